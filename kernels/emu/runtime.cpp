// The emulated CUDA runtime API (runtime.h) over the emulator's memory (memory.h) and lazy
// streams (streams.h). One device per local rank (each process drives its own), with an
// H200's properties.
#include "kernels/emu/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/emu/errors.h"
#include "kernels/emu/exit_count.h"
#include "kernels/emu/limits.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/streams.h"

using namespace subdp::emu;

namespace {

// The current device is per host thread, as CUDA's: a new thread starts on device 0.
thread_local int g_device = 0;
// The thread that drives the device (queues and runs its work): the process's main thread,
// which runs static initialisation. Other threads only observe (cudaEventQuery).
const std::thread::id g_host_thread = std::this_thread::get_id();

/// Devices of the emulated machine: one per rank the launcher placed on this host
/// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE), so that several
/// ranks under mpirun each find a device of their own, as on a GPU node. Each process
/// emulates only the device it uses; its memory is the one pool.
int machine_devices() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const char* v = std::getenv(var)) return std::max(1, std::atoi(v));
  return 1;
}

/// The machine's devices this process sees, as CUDA numbers them: CUDA_VISIBLE_DEVICES's
/// list of indices when set (renumbered from 0, up to the first entry that is not a device,
/// as the runtime does; a launcher binding one GPU per rank, as Slurm's --gpus-per-task does,
/// leaves each rank a device 0 of its own), else all of them.
const std::vector<int>& visible_devices() {
  static const std::vector<int> visible = [] {
    std::vector<int> v;
    const int machine = machine_devices();
    const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
    if (list == nullptr) {
      for (int d = 0; d < machine; ++d) v.push_back(d);
      return v;
    }
    for (const char* at = list; *at != '\0';) {
      char* end = nullptr;
      const long d = std::strtol(at, &end, 10);
      if (end == at || d < 0 || d >= machine || (*end != ',' && *end != '\0')) break;
      v.push_back(static_cast<int>(d));
      at = *end == ',' ? end + 1 : end;
    }
    return v;
  }();
  return visible;
}

int device_count() { return static_cast<int>(visible_devices().size()); }

bool valid_device(int device) { return device >= 0 && device < device_count(); }

/// Host synchronisations (stream, device and event waits, synchronous copies): with
/// SUBDP_EMU_HOST_WAITS=1 the process prints their number when it exits, so a test can hold
/// the engine to its synchronisations per step.
void count_host_wait() {
  static ExitCount waits("SUBDP_EMU_HOST_WAITS", "host synchronisations");
  waits.add();
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

cudaError_t invalid(const std::string& call, const std::string& why) {
  return set_error(cudaErrorInvalidValue, call + ": " + why);
}

/// Checks that [p, p + bytes) is in the memory `want` allows (device, or host: pinned or
/// pageable); "" when it is, else the reason.
std::string misplaced(const char* arg, const void* p, size_t bytes, bool want_device) {
  const Region r = region_of(p, bytes);
  const bool ok = want_device ? r == Region::device : (r == Region::pinned || r == Region::pageable);
  if (ok && !(!want_device && in_device_range(p))) return "";
  return std::string("argument ") + arg + " (" + hex(p) + ", " + std::to_string(bytes) + " bytes) is " +
         describe_region(p, bytes) + ", but the call expects " + (want_device ? "device memory" : "host memory");
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    default: return "cudaMemcpyDefault";
  }
}

/// Every copy: checks, then queues; returns once the copy has run when `blocking`, or when
/// the destination is pageable host memory (CUDA's rule for cudaMemcpyAsync to pageable
/// memory). A pageable source is read at the call, as CUDA stages it.
cudaError_t copy(const char* call, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                 size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool blocking) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  Stream* s = stream_of(stream);
  if (s == nullptr) return set_error(cudaErrorInvalidResourceHandle, std::string(call) + ": destroyed stream");
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch) return invalid(call, "width exceeds a pitch");
  const size_t dbytes = dpitch * (height - 1) + width, sbytes = spitch * (height - 1) + width;
  bool dst_device = region_of(dst, dbytes) == Region::device, src_device = region_of(src, sbytes) == Region::device;
  if (kind != cudaMemcpyDefault) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
      return set_error(cudaErrorInvalidMemcpyDirection, std::string(call) + ": unknown cudaMemcpyKind");
    dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  }
  for (const std::string& why : {misplaced("dst", dst, dbytes, dst_device), misplaced("src", src, sbytes, src_device)})
    if (!why.empty()) return invalid(call, std::string(kind_name(kind)) + ": " + why);
  auto* d = static_cast<char*>(dst);
  const char* from = static_cast<const char*>(src);
  size_t from_pitch = spitch;
  std::shared_ptr<std::vector<char>> staged;
  if (!src_device && region_of(src, sbytes) == Region::pageable) {
    staged = std::make_shared<std::vector<char>>(width * height);
    for (size_t r = 0; r < height; ++r) std::memcpy(staged->data() + r * width, from + r * spitch, width);
    from = staged->data();
    from_pitch = width;
  }
  const uint64_t at = enqueue(s, call, [=, staged = std::move(staged)] {
    for (size_t r = 0; r < height; ++r) std::memmove(d + r * dpitch, from + r * from_pitch, width);
  });
  if (blocking || (!dst_device && region_of(dst, dbytes) == Region::pageable)) run_until(s, at);
  return sticky_error();
}

cudaError_t memset(const char* call, void* p, int value, size_t count, cudaStream_t stream) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  Stream* s = stream_of(stream);
  if (s == nullptr) return set_error(cudaErrorInvalidResourceHandle, std::string(call) + ": destroyed stream");
  if (count == 0) return cudaSuccess;
  const std::string why = misplaced("devPtr", p, count, true);
  if (!why.empty()) return invalid(call, why);
  enqueue(s, call, [p, value, count] { std::memset(p, value, count); });
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaGetLastError() { return take_last_error(); }
cudaError_t cudaPeekAtLastError() { return peek_last_error(); }
const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }
const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  if (*count == 0) return set_error(cudaErrorNoDevice, "cudaGetDeviceCount: CUDA_VISIBLE_DEVICES names no device");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device))
    return set_error(cudaErrorInvalidDevice, "cudaSetDevice: the emulated machine has " +
                                                 std::to_string(device_count()) + " device(s), one per local rank");
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "CUDA emulator (H200 limits)");
  prop->totalGlobalMem = device_capacity();
  prop->sharedMemPerBlock = kStaticSharedBytes;
  prop->sharedMemPerBlockOptin = kOptinSharedBytes;
  prop->warpSize = kWarpSize;
  prop->maxThreadsPerBlock = static_cast<int>(kMaxThreadsPerBlock);
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = static_cast<int>(kMaxBlockDim[i]);
    prop->maxGridSize[i] = static_cast<int>(kMaxGridDim[i]);
  }
  prop->major = kMajor;
  prop->minor = kMinor;
  prop->multiProcessorCount = kMultiprocessors;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId: no such device");
  // The machine's index, not the process's number: two processes seeing one GPU agree on it.
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", visible_devices()[device]);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  count_host_wait();
  run_all();
  return sticky_error();
}

cudaError_t cudaDeviceReset() {
  run_all();
  clear_errors();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = device_capacity();
  // A CUDA context holds device memory of its own: count one, as a GPU's cudaMemGetInfo does.
  constexpr size_t kContextBytes = size_t{512} << 20;
  *free = device_capacity() - std::min(device_capacity(), device_used() + kContextBytes);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  *devPtr = device_allocate(size);
  if (*devPtr == nullptr)
    return set_error(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) +
                                                    " bytes: " + std::to_string(device_capacity() - device_used()) +
                                                    " bytes free (SUBDP_EMU_DEVICE_GB sets the size)");
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  run_all();  // cudaFree synchronises the device
  if (!device_free(devPtr))
    return invalid("cudaFree", "argument devPtr (" + hex(devPtr) + ") is " + describe_region(devPtr, 0) +
                                   ", not the start of a live cudaMalloc block");
  return sticky_error();
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  *ptr = pinned_allocate(size);
  return *ptr ? cudaSuccess : set_error(cudaErrorMemoryAllocation, "cudaMallocHost of " + std::to_string(size));
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  run_all();
  if (!pinned_free(ptr))
    return invalid("cudaFreeHost", "argument ptr (" + hex(ptr) + ") is not a cudaMallocHost block");
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = cudaPointerAttributes{};
  attributes->device = 0;
  switch (region_of(ptr, 0)) {
    case Region::device:
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = const_cast<void*>(ptr);
      break;
    case Region::pinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->hostPointer = const_cast<void*>(ptr);
      attributes->devicePointer = const_cast<void*>(ptr);
      break;
    default: attributes->type = cudaMemoryTypeUnregistered; attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  count_host_wait();
  return copy("cudaMemcpy", dst, count, src, count, count, 1, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy("cudaMemcpyAsync", dst, count, src, count, count, 1, kind, stream, false);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  return copy("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream, false);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return memset("cudaMemset", devPtr, value, count, nullptr);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return memset("cudaMemsetAsync", devPtr, value, count, stream);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  *stream = create_stream(flags);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Stream* s = stream_of(stream);
  if (s == nullptr || s->legacy)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  destroy_stream(s);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Stream* s = stream_of(stream);
  if (s == nullptr) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: destroyed stream");
  count_host_wait();
  run_until(s, s->enqueued);
  return sticky_error();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Stream* s = stream_of(stream);
  if (s == nullptr || event == nullptr)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: destroyed stream or null event");
  if (event->stream != nullptr) enqueue_wait(s, event->stream, event->position);
  return sticky_error();
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new Event();
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Stream* s = stream_of(stream);
  if (s == nullptr || event == nullptr)
    return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord: destroyed stream or null event");
  event->stream = s;
  if (!event->timing) {
    event->position = s->enqueued;
    return sticky_error();
  }
  auto stamp = std::make_shared<double>(std::nan(""));
  event->stamp = stamp;
  event->position = enqueue(s, "cudaEventRecord", [stamp] {
    *stamp = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  });
  return sticky_error();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr)
    return set_error(cudaErrorInvalidValue, "cudaEventElapsedTime: null result or event");
  if (!start->timing || !end->timing)
    return set_error(cudaErrorInvalidResourceHandle,
                     "cudaEventElapsedTime: an event created with cudaEventDisableTiming");
  if (start->stamp == nullptr || end->stamp == nullptr)
    return set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event never recorded");
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return e;
  if (std::isnan(*start->stamp) || std::isnan(*end->stamp)) return cudaErrorNotReady;  // no wait since recorded
  *ms = static_cast<float>((*end->stamp - *start->stamp) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  count_host_wait();
  if (event->stream != nullptr) run_until(event->stream, event->position);
  return sticky_error();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (std::this_thread::get_id() != g_host_thread) {
    // Another thread (the NCCL watchdog's) observes the device as it progresses, running
    // nothing: on a GPU the work would run meanwhile, here it runs when the host thread waits.
    const bool done = event->stream == nullptr || event->stream->completed.load() >= event->position;
    return done ? cudaSuccess : cudaErrorNotReady;
  }
  // Lazy queues would make a polling loop on the host thread spin forever: its query runs the
  // work it asks about (not counted as a host synchronisation: on a GPU it returns at once).
  if (event->stream != nullptr) run_until(event->stream, event->position);
  return sticky_error();
}
