// Collectives in flight as device events (collectives_in_flight.h).
#include "kernels/cuda/collectives_in_flight.h"

#include "kernels/cuda/check.h"

namespace subdp::cuda {

CollectivesInFlight::~CollectivesInFlight() {
  for (Entry& e : entries_) {  // teardown: errors ignored, a destructor must not throw
    cudaEventDestroy(e.began);
    cudaEventDestroy(e.ended);
  }
}

size_t CollectivesInFlight::begin(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t i = 0;
  while (i < entries_.size() && entries_[i].listed) ++i;
  if (i == entries_.size()) {
    Entry e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e.began, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&e.ended, cudaEventDisableTiming));
    entries_.push_back(e);
  }
  Entry& e = entries_[i];
  CUDA_CHECK(cudaEventRecord(e.began, stream));
  e.ended_recorded = false;
  e.listed = true;
  return i;
}

void CollectivesInFlight::finish(size_t index, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_.at(index);
  CUDA_CHECK(cudaEventRecord(e.ended, stream));
  e.ended_recorded = true;
}

// The watchdog's thread must not throw (that would end the process without a message); a CUDA
// error here is the device's sticky error, which the host thread's next call reports with its
// file and line, so this thread only counts it as "not running".
bool CollectivesInFlight::complete(cudaEvent_t e) { return cudaEventQuery(e) == cudaSuccess; }

bool CollectivesInFlight::any_running() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cudaSetDevice(device_) != cudaSuccess) return false;  // this thread's device (a new thread's is 0)
  bool running = false;
  for (Entry& e : entries_) {
    if (!e.listed) continue;
    if (e.ended_recorded && complete(e.ended)) {
      e.listed = false;
      continue;
    }
    running = running || complete(e.began);
  }
  return running;
}

}  // namespace subdp::cuda
