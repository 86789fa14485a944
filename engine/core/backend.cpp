// The run's backend and the choice by [device] type.
#include "engine/core/backend.h"

#include <chrono>

#include "engine/core/error.h"

#ifdef SUBDP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace subdp {

namespace {

std::unique_ptr<Backend>& current() {
  static std::unique_ptr<Backend> b = make_cpu_backend();
  return b;
}

/// CUDA devices this process can see (0 without a CUDA build or a driver).
int cuda_device_count() {
#ifdef SUBDP_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;  // no driver / no device: both mean none
  return n;
#else
  return 0;
#endif
}

}  // namespace

Backend& backend() { return *current(); }

int64_t Backend::timestamp_slot(int64_t id) const {
  SUBDP_CHECK(id >= 0 && id < timestamps_issued_ && id >= timestamps_issued_ - kTimestamps,
              "timestamp {} is not among the last {} issued (of {})", id, kTimestamps, timestamps_issued_);
  return id % kTimestamps;
}

int64_t Backend::timestamp() {
  const int64_t id = timestamps_issued_++;
  host_stamps_[timestamp_slot(id)] =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return id;
}

double Backend::seconds_between(int64_t from, int64_t to) {
  SUBDP_ASSERT(from < to);
  return host_stamps_[timestamp_slot(to)] - host_stamps_[timestamp_slot(from)];
}

void Backend::linear_forward(const float* x, const float* w, const float* b, float* y, float* pre_gelu, int64_t rows,
                             int64_t in, int64_t out) {
  float* z = pre_gelu ? pre_gelu : y;
  sgemm(false, true, static_cast<int>(rows), static_cast<int>(out), static_cast<int>(in), 1.f, x, static_cast<int>(in),
        w, static_cast<int>(in), 0.f, z, static_cast<int>(out));
  if (b) add_bias_rows(z, b, rows, out);
  if (pre_gelu) gelu_forward(pre_gelu, y, rows * out);
}

void Backend::linear_dx_dgelu(const float* dy, const float* w, const float* pre, float* dx, int64_t rows, int64_t in,
                              int64_t out) {
  sgemm(false, false, static_cast<int>(rows), static_cast<int>(in), static_cast<int>(out), 1.f, dy,
        static_cast<int>(out), w, static_cast<int>(in), 0.f, dx, static_cast<int>(in));
  gelu_backward(pre, dx, dx, rows * in);
}

namespace {
[[noreturn]] void no_bf16(const Backend& b) {
  throw Error(
      fmt::format("the {} backend has no bf16 operations: [device] precision = \"bf16\" needs device.type = "
                  "\"cuda\"",
                  b.name()));
}
}  // namespace

void Backend::to_bf16(const float*, void*, int64_t) { no_bf16(*this); }
void Backend::bf16_to_f32(const void*, float*, int64_t) { no_bf16(*this); }
void Backend::round_keep_bf16(float*, void*, int64_t) { no_bf16(*this); }
void Backend::to_bf16_columns(const float*, int64_t, int64_t, int64_t, void*) { no_bf16(*this); }
void Backend::gemm_bf16(bool, bool, int, int, int, float, const void*, int, const void*, int, float, void*, int, bool) {
  no_bf16(*this);
}
void Backend::cross_entropy_bf16(const void*, const int32_t*, void*, int64_t, int, float) { no_bf16(*this); }
void Backend::gelu_keep_bf16(float*, void*, int64_t) { no_bf16(*this); }
void Backend::gelu_forward_bf16(const void*, int64_t, int64_t, int64_t, float*) { no_bf16(*this); }
void Backend::gelu_backward_bf16(const void*, const float*, float*, int64_t) { no_bf16(*this); }
void Backend::swiglu_keep_bf16(const void*, float*, void*, int64_t) { no_bf16(*this); }
void Backend::swiglu_forward_bf16(const void*, const void*, float*, int64_t) { no_bf16(*this); }
void Backend::swiglu_backward_bf16(const void*, const void*, const float*, float*, float*, int64_t) { no_bf16(*this); }
bool Backend::attention_keeps_statistics(const AttentionShape&) const { return false; }
bool Backend::attention_reads_bf16(const AttentionShape&) const { return false; }
void Backend::attention_forward_bf16(const AttentionShape&, const void*, float*, float*, float*, int) {
  no_bf16(*this);
}
void Backend::attention_backward_bf16(const AttentionShape&, const void*, const float*, const AttentionKept*, float*,
                                      float*, int) {
  no_bf16(*this);
}

CollectiveScope::CollectiveScope() : backend_(backend()) { backend_.open_for_collective(); }
CollectiveScope::~CollectiveScope() { backend_.close_for_collective(); }

void set_backend(std::unique_ptr<Backend> b) {
  SUBDP_ASSERT(b != nullptr);
  current() = std::move(b);
}

std::unique_ptr<Backend> make_backend(DeviceType device_type) {
  if (device_type == DeviceType::cpu) return make_cpu_backend();
  if (device_type == DeviceType::fenced) return make_fenced_backend();
  SUBDP_CHECK(cuda_device_count() > 0,
              "[device] type = \"cuda\": no CUDA device was found{}; use \"cpu\" (--set device.type=cpu, and "
              "--set device.precision=fp32 where it is tf32 or bf16: the CPU computes in fp32)",
#ifdef SUBDP_WITH_CUDA
              " (cudaGetDeviceCount)"
#else
              " (this build has no CUDA backend: nvcc was not found)"
#endif
  );
#ifdef SUBDP_WITH_CUDA
  return make_cuda_backend();
#else
  return nullptr;  // unreachable: without a CUDA build no device is counted
#endif
}

std::unique_ptr<Backend> make_planning_backend(DeviceType device_type) {
  if (device_type != DeviceType::cuda) return make_backend(device_type);
#ifdef SUBDP_WITH_CUDA
  return make_cuda_backend(/*planning=*/true);
#else
  throw Error("[device] type = \"cuda\": this build has no CUDA backend (nvcc was not found), so it cannot size one");
#endif
}

}  // namespace subdp
