// The collectives an NCCL world has queued on its streams, as device events, so that the
// device-wait watchdog can time a collective from when it begins on the device rather than
// from when the host begins to wait (a wait that also covers the computation queued before it).
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace subdp::cuda {

class CollectivesInFlight {
 public:
  /// device: the GPU the watchdog thread's queries go to (its current device is set to it,
  /// so no context is made on GPU 0 of another rank).
  explicit CollectivesInFlight(int device) : device_(device) {}
  ~CollectivesInFlight();
  CollectivesInFlight(const CollectivesInFlight&) = delete;
  CollectivesInFlight& operator=(const CollectivesInFlight&) = delete;

  /// Host thread: records on `stream` the collective's start (the stream has passed its wait
  /// for the work before it) and lists it as in flight; returns its index for finish().
  size_t begin(cudaStream_t stream);
  /// Host thread: records on `stream` the end of the collective `begin` returned.
  void finish(size_t index, cudaStream_t stream);
  /// Any thread (the watchdog's): true when a listed collective has begun on the device and
  /// not finished. Retires the finished ones. Never runs or waits for device work, never
  /// throws (a CUDA error counts as not running: the host thread's next call reports it).
  bool any_running();

 private:
  struct Entry {
    cudaEvent_t began = nullptr, ended = nullptr;
    bool ended_recorded = false;  // until then the collective has not finished, whatever ended says
    bool listed = false;          // in flight; else free for begin()
  };
  /// True when the device has passed e's record (cudaEventQuery, which neither runs nor waits).
  static bool complete(cudaEvent_t e);
  int device_;
  std::mutex mutex_;
  std::vector<Entry> entries_;  // grown by begin(), reused once retired
};

}  // namespace subdp::cuda
