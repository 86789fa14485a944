// NCCL implementation of subdp::Communicator (see nccl_comm.h). After llm.c: the unique id is
// made on rank 0 and broadcast over MPI; subgroups are ncclCommSplit children, each paired
// with the matching sub-communicator of the bootstrap for string all-gathers and barriers.
#include "kernels/cuda/nccl_comm.h"

#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm/watchdog.h"
#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/collectives_in_flight.h"
#include "kernels/cuda/device_pool.h"

namespace subdp {

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

/// Local rank from the launcher's environment, or -1 when none sets it.
int env_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return -1;
}

bool is_device_pointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

/// A rank's entry of choose_device ("host|gpu|bus id" or "host|none|visible GPUs|reason") in
/// words: "host h: 2 visible GPUs" (and the reason when there are none).
std::string describe_entry(const std::string& entry) {
  std::vector<std::string> f;  // host, "gpu" or "none", then the bus id, or the count and reason
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t bar = entry.find('|', at);
    if (bar == std::string::npos) break;
    f.push_back(entry.substr(at, bar - at));
    at = bar + 1;
  }
  f.push_back(entry.substr(at));
  if (f.size() < 3 || f[1] != "none") return fmt::format("host {}: GPU {}", f.front(), f.back());
  return fmt::format("host {}: {} visible GPU(s){}", f[0], f[2], f.size() > 3 && !f[3].empty() ? ", " + f[3] : "");
}

/// Picks this rank's GPU and checks, identically on every rank, that each rank has its own:
/// the local rank's device, modulo the devices this process sees (a launcher that binds one
/// GPU per rank, through CUDA_VISIBLE_DEVICES as Slurm's --gpus-per-task does, leaves every
/// rank one device, its own). Two ranks of a host on one GPU (its PCI bus id) are refused.
int choose_device(Communicator& bootstrap) {
  const std::string host = host_name();
  const std::vector<std::string> hosts = bootstrap.allgather(host);
  int local = env_local_rank();
  if (local < 0) local = static_cast<int>(std::count(hosts.begin(), hosts.begin() + bootstrap.rank(), host));
  std::string why;
  const int count = cuda::device_count(&why);
  std::string mine = host + "|none|" + std::to_string(count) + "|" + why;
  const int device = count > 0 ? local % count : -1;
  if (device >= 0) {
    CUDA_CHECK(cudaSetDevice(device));
    char bus[64] = {0};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
    mine = host + "|gpu|" + bus;
  }
  const std::vector<std::string> all = bootstrap.allgather(mine);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].find("|none|") != std::string::npos)
      throw Error(fmt::format("[device] type = \"cuda\": no CUDA device was found on rank {} ({}); use \"cpu\"", r,
                              describe_entry(all[r])));
    for (size_t q = 0; q < r; ++q)
      if (all[q] == all[r])
        throw Error(
            fmt::format("NCCL 2.28 refuses two ranks on one GPU: run W = 1 or --simulate-rank, or give each rank a "
                        "GPU of its own (ranks {} and {} both map to {})",
                        q, r, describe_entry(all[r])));
  }
  return device;
}

/// The end of the last collective any communicator of one world (the world and its subgroups)
/// queued, so that the next one, on whichever communicator's stream, starts after it: every
/// rank's device then runs them in the order the host issued them, the same on every rank.
/// Without it a deferred collective (parallel.overlap) waited only for the compute stream, so
/// two subgroups' collectives could run in either order, or at once, on the device, which
/// NCCL documents as a possible deadlock for communicators used concurrently. Host thread only.
class CollectiveOrder {
 public:
  explicit CollectiveOrder(int device) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaEventCreateWithFlags(&last_end_, cudaEventDisableTiming));
  }
  ~CollectiveOrder() { cudaEventDestroy(last_end_); }  // teardown: errors ignored
  CollectiveOrder(const CollectiveOrder&) = delete;
  CollectiveOrder& operator=(const CollectiveOrder&) = delete;
  /// Makes `stream` wait for the last collective queued by any communicator of the world.
  void after_last(cudaStream_t stream) {
    if (any_) CUDA_CHECK(cudaStreamWaitEvent(stream, last_end_, 0));
  }
  /// Records the end of the collective just queued on `stream`.
  void ended_on(cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(last_end_, stream));
    any_ = true;
  }

 private:
  cudaEvent_t last_end_ = nullptr;
  bool any_ = false;
};

class NcclComm final : public NcclCommunicator {
 public:
  /// Takes ownership of comm; bootstrap is either owned (subgroups, or the world of
  /// make_nccl_world) or borrowed (make_nccl_communicator's world). order: the world's,
  /// shared with its subgroups; in_flight: the world's list of collectives on the device
  /// (null: none kept, no watchdog times them).
  NcclComm(ncclComm_t comm, int device, Communicator* bootstrap, std::unique_ptr<Communicator> owned_bootstrap,
           std::optional<cudaStream_t> compute, std::shared_ptr<CollectiveOrder> order,
           std::shared_ptr<cuda::CollectivesInFlight> in_flight)
      : comm_(comm),
        device_(device),
        bootstrap_(bootstrap),
        owned_(std::move(owned_bootstrap)),
        compute_(compute),
        order_(std::move(order)),
        in_flight_(std::move(in_flight)) {
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &size_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming));
  }
  ~NcclComm() override {
    // Teardown: errors are ignored, a destructor must not throw. While an exception unwinds
    // (a rank failed; the others may be inside a collective), finalising would wait for them:
    // abort instead, and the caller aborts the job (run_train).
    cudaSetDevice(device_);
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      DeviceWaitGuard guard("NCCL (finalising the communicator)");
      cudaStreamSynchronize(stream_);
      ncclCommFinalize(comm_);
      ncclCommDestroy(comm_);
    }
    if (watchdog_) set_device_wait_watchdog(nullptr);
    watchdog_.reset();  // its thread stops probing in_flight_ before anything here goes
    cudaEventDestroy(before_);
    cudaEventDestroy(after_);
    cudaStreamDestroy(stream_);
  }

  /// Makes w (this world's) the device-wait watchdog for as long as this communicator lives,
  /// timing each device wait from when a collective of this world or its subgroups begins on
  /// the device (CollectivesInFlight), not from when the host begins to wait.
  void install_watchdog(std::unique_ptr<CollectiveWatchdog> w) {
    in_flight_ = std::make_shared<cuda::CollectivesInFlight>(device_);
    w->set_device_probe([list = in_flight_.get()] { return list->any_running(); });
    watchdog_ = std::move(w);
    set_device_wait_watchdog(watchdog_.get());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }
  cudaStream_t stream() const override { return stream_; }
  void set_compute_stream(cudaStream_t s) override { compute_ = s; }
  CommKind kind() const override { return CommKind::nccl; }

  void allreduce_sum(float* data, int64_t n) override { sum_floats(data, n, /*compute_waits=*/true); }
  void allreduce_sum_deferred(float* data, int64_t n) override { sum_floats(data, n, /*compute_waits=*/false); }
  void join() override {
    if (!deferred_) return;
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), after_, 0));  // the last collective's, so every one's
    deferred_ = false;
  }
  void allreduce_sum(double* data, int64_t n) override {
    if (!on_device(data, n)) return bootstrap_->allreduce_sum(data, n);
    enqueue(
        [&] { NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(n), ncclDouble, ncclSum, comm_, stream_)); });
  }
  void allreduce_max(double* data, int64_t n) override {
    if (!on_device(data, n)) return bootstrap_->allreduce_max(data, n);
    enqueue(
        [&] { NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(n), ncclDouble, ncclMax, comm_, stream_)); });
  }
  void reduce_sum(const float* data, float* recv, int64_t n, int root) override {
    // The transport follows data alone: the root's recv, which only the root sees, must not
    // send it to MPI while the other ranks enter ncclReduce (a hang).
    if (!on_device(data, n)) return bootstrap_->reduce_sum(data, recv, n, root);
    SUBDP_CHECK(rank_ != root || recv == data || is_device_pointer(recv),
                "NCCL reduce_sum: device data into a host recv on the root (rank {}): pass device memory", rank_);
    enqueue([&] {
      NCCL_CHECK(ncclReduce(data, rank_ == root ? recv : const_cast<float*>(data), static_cast<size_t>(n), ncclFloat,
                            ncclSum, root, comm_, stream_));
    });
  }
  void reduce_scatter_sum(float* data, const std::vector<int64_t>& counts) override {
    if (!on_device(data, segment_offset(counts, size_, size_))) return bootstrap_->reduce_scatter_sum(data, counts);
    // Variable counts: one ncclReduce per segment to its rank, grouped into one launch
    // (ncclReduceScatter wants equal counts).
    per_segment(data, counts, [&](float* seg, size_t n, int r) {
      NCCL_CHECK(ncclReduce(seg, seg, n, ncclFloat, ncclSum, r, comm_, stream_));
    });
  }
  void allgather_segments(float* data, const std::vector<int64_t>& counts) override {
    if (!on_device(data, segment_offset(counts, size_, size_))) return bootstrap_->allgather_segments(data, counts);
    per_segment(data, counts, [&](float* seg, size_t n, int r) {
      NCCL_CHECK(ncclBroadcast(seg, seg, n, ncclFloat, r, comm_, stream_));
    });
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    if (!on_device(data, bytes)) return bootstrap_->broadcast(data, bytes, root);
    enqueue(
        [&] { NCCL_CHECK(ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_)); });
  }
  std::vector<std::string> allgather(const std::string& mine) override { return bootstrap_->allgather(mine); }
  void barrier() override {
    CUDA_CHECK(cudaSetDevice(device_));
    {
      DeviceWaitGuard guard("NCCL (a barrier's wait on the collective stream)");
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    bootstrap_->barrier();
  }
  void allow_longer_waits(double extra_s, const char* why) override {
    bootstrap_->allow_longer_waits(extra_s, why);          // its host collectives
    if (watchdog_) watchdog_->allow_longer(extra_s, why);  // the waits on the collective stream
  }
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks) override {
    const bool member = std::find(ranks.begin(), ranks.end(), rank_) != ranks.end();
    // Two collectives in the same order on every rank: the bootstrap split, then NCCL's.
    std::unique_ptr<Communicator> sub_boot = bootstrap_->subgroup(ranks);
    CUDA_CHECK(cudaSetDevice(device_));
    ncclComm_t sub = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, member ? 0 : NCCL_SPLIT_NOCOLOR, rank_, &sub, nullptr));
    if (!member) return nullptr;
    SUBDP_ASSERT(sub != nullptr && sub_boot != nullptr);
    Communicator* boot = sub_boot.get();
    return std::make_unique<NcclComm>(sub, device_, boot, std::move(sub_boot), compute_, order_, in_flight_);
  }

 private:
  /// One NCCL call per segment r of `counts` (op(segment, count, r)), grouped, in place on
  /// device memory.
  template <class F>
  void per_segment(float* data, const std::vector<int64_t>& counts, F&& op) {
    enqueue([&] {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r)
        if (counts[r] > 0) op(data + segment_offset(counts, r, size_), static_cast<size_t>(counts[r]), r);
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  /// True when the n elements at p are device memory, which NCCL reduces. Host buffers (the
  /// metrics, the probes) and empty ones go through the bootstrap's MPI instead (the same on
  /// every rank of a collective), so no device staging buffer exists outside the plan.
  bool on_device(const void* p, int64_t n) const { return n > 0 && is_device_pointer(p); }

  /// The stream whose work a collective is ordered against: the one set_compute_stream gave,
  /// else the run's backend's (the CUDA backend computes on a non-blocking stream, which the
  /// legacy default stream does not synchronise with), else the legacy default stream.
  cudaStream_t compute_stream() const {
    if (compute_) return *compute_;
    return static_cast<cudaStream_t>(subdp::backend().cuda_stream());
  }

  /// Runs op on the comm stream after the compute stream's earlier work and, when
  /// compute_waits, before its later work (else before the work after join()).
  template <class F>
  void enqueue(F&& op, bool compute_waits = true) {
    CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t compute = compute_stream();
    CUDA_CHECK(cudaEventRecord(before_, compute));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, before_, 0));
    order_->after_last(stream_);
    const size_t listed = in_flight_ ? in_flight_->begin(stream_) : 0;
    {
      // NCCL may block here (a full queue; the emulator runs the collective at the call).
      DeviceWaitGuard guard("NCCL (a collective call)");
      op();
    }
    CUDA_CHECK(cudaEventRecord(after_, stream_));
    order_->ended_on(stream_);
    if (in_flight_) in_flight_->finish(listed, stream_);
    // A waited collective comes after every deferred one on the same stream: nothing left to join.
    deferred_ = !compute_waits;
    if (compute_waits) CUDA_CHECK(cudaStreamWaitEvent(compute, after_, 0));
  }

  /// In-place float sum, on NCCL for device memory (the compute stream's later work ordered
  /// after it now, or only after join()), through the bootstrap for host memory (blocking).
  void sum_floats(float* data, int64_t n, bool compute_waits) {
    if (!on_device(data, n)) return bootstrap_->allreduce_sum(data, n);
    enqueue([&] { NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_)); },
            compute_waits);
  }

  ncclComm_t comm_;
  int device_;
  Communicator* bootstrap_;
  std::unique_ptr<Communicator> owned_;
  std::optional<cudaStream_t> compute_;  // set_compute_stream's; unset: compute_stream() asks the backend
  cudaStream_t stream_ = nullptr;
  cudaEvent_t before_ = nullptr, after_ = nullptr;
  int rank_ = 0, size_ = 1;
  bool deferred_ = false;                                 // a deferred collective the compute stream has not joined yet
  std::shared_ptr<CollectiveOrder> order_;                // the world's, shared with its subgroups
  std::shared_ptr<cuda::CollectivesInFlight> in_flight_;  // the world's, shared with its subgroups
  std::unique_ptr<CollectiveWatchdog> watchdog_;          // the world's (install_watchdog); subgroups: none
};

}  // namespace

// Here rather than in check.cpp, which every CUDA source pulls in: a binary that makes no
// NCCL call then has no reference to libnccl, and --as-needed leaves it off its link.
namespace cuda {
void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw Error(fmt::format("NCCL error in {} at {}:{}: {}{}", call, file, line, ncclGetErrorString(status),
                          last && *last ? fmt::format(" (last: {})", last) : std::string()));
}
}  // namespace cuda

namespace {

/// The world communicator over `bootstrap`, which it owns when `owned` holds it; with
/// collective_timeout_s > 0 it installs the device-wait watchdog.
std::unique_ptr<Communicator> make_world(Communicator& bootstrap, std::unique_ptr<Communicator> owned,
                                         double collective_timeout_s) {
  const int device = choose_device(bootstrap);
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, sizeof(id), 0);
  CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  auto world = std::make_unique<NcclComm>(comm, device, &bootstrap, std::move(owned), std::nullopt,
                                          std::make_shared<CollectiveOrder>(device), nullptr);
  if (collective_timeout_s > 0)
    world->install_watchdog(std::make_unique<CollectiveWatchdog>(collective_timeout_s, bootstrap.rank()));
  return world;
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, double collective_timeout_s) {
  return make_world(bootstrap, nullptr, collective_timeout_s);
}

std::unique_ptr<Communicator> make_nccl_world(std::unique_ptr<Communicator> bootstrap, double collective_timeout_s) {
  Communicator& boot = *bootstrap;
  return make_world(boot, std::move(bootstrap), collective_timeout_s);
}

}  // namespace subdp
