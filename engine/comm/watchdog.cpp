// Collective watchdog implementation.
#include "engine/comm/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace subdp {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CollectiveWatchdog::Guard::Guard(CollectiveWatchdog& w, const char* what) : w_(w) {
  w_.since_ns_ = now_ns();
  w_.what_ = what;
}

CollectiveWatchdog::Guard::~Guard() { w_.what_ = nullptr; }

void CollectiveWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    const char* what = what_;
    if (!what) continue;
    const double waited = (now_ns() - since_ns_) * 1e-9;
    if (waited < timeout_s_) continue;
    std::fprintf(stderr,
                 "subdp: error on rank %d: collective %s has waited %.0f s (parallel.collective_timeout_s = %.0f): "
                 "a peer rank is lost or stuck; exiting so the job does not hang\n",
                 rank_, what, waited, timeout_s_);
    std::fflush(stderr);
    std::_Exit(3);  // MPI_Abort is not callable from this thread; mpirun tears down the job
  }
}

}  // namespace subdp
