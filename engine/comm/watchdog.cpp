// Collective watchdog implementation.
#include "engine/comm/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace subdp {

namespace {
constexpr int64_t kTickNs = 500'000'000;
// A tick this late means the process was stopped: a loaded machine delays a thread by far less.
constexpr int64_t kStoppedGapNs = 2'000'000'000;

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

CollectiveWatchdog::Guard::Guard(CollectiveWatchdog& w, const char* what, bool device_wait) : w_(w) {
  w_.since_ns_ = now_ns();
  w_.stopped_at_start_ns_ = w_.stopped_ns_.load();
  w_.device_wait_ = device_wait;
  w_.what_ = what;
}

void CollectiveWatchdog::set_device_probe(std::function<bool()> collective_running) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_probe_ = std::move(collective_running);
}

CollectiveWatchdog::Guard::~Guard() { w_.what_ = nullptr; }

void CollectiveWatchdog::allow_longer(double extra_s, const char* why) {
  extra_why_ = extra_s > 0 ? why : nullptr;
  extra_s_ = extra_s > 0 ? extra_s : 0;
}

void CollectiveWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  int64_t last_tick = now_ns();
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::nanoseconds(kTickNs));
    const int64_t now = now_ns();
    note_gap(now - last_tick, now);
    last_tick = now;
    // Every tick, waiting or not: the probe also retires the collectives that have finished.
    const bool collective_running = device_probe_ && device_probe_();
    const char* what = what_;
    if (!what) continue;
    const bool timed_by_probe = device_wait_ && device_probe_;
    if (timed_by_probe && !collective_running) {  // the device still computes: the clock starts later
      since_ns_ = now;
      stopped_at_start_ns_ = stopped_ns_.load();
      continue;
    }
    const double waited = (now - since_ns_ - (stopped_ns_ - stopped_at_start_ns_)) * 1e-9;
    const double extra = extra_s_;
    if (waited < timeout_s_ + extra) continue;
    const char* why = extra_why_;
    std::fprintf(stderr,
                 "subdp: error on rank %d: collective %s has waited %.1f s (parallel.collective_timeout_s = %g%s%s%s): "
                 "a peer rank is lost or stuck%s; exiting so the job does not hang\n",
                 rank_, what, waited, timeout_s_, why ? ", and " : "", why ? why : "", why ? " allowed more" : "",
                 timed_by_probe ? " (timed from the tick that saw the collective begin on the device)" : "");
    std::fflush(stderr);
    std::_Exit(3);  // MPI_Abort is not callable from this thread; mpirun tears down the job
  }
}

void CollectiveWatchdog::note_gap(int64_t gap_ns, int64_t now) {
  if (gap_ns <= kStoppedGapNs) return;
  stopped_ns_ += gap_ns - kTickNs;
  // Every watchdog of the process (MPI's, NCCL's device waits) sees the same stop: one note.
  static std::atomic<int64_t> last_note_ns{0};
  if (now - last_note_ns.exchange(now) < kStoppedGapNs) return;
  std::fprintf(stderr,
               "subdp: rank %d did not run for %.0f s (stopped, e.g. a suspended job); the collective timeout "
               "does not count it\n",
               rank_, (gap_ns - kTickNs) * 1e-9);
  std::fflush(stderr);
}

namespace {
CollectiveWatchdog* g_device_wait_watchdog = nullptr;
}  // namespace

void set_device_wait_watchdog(CollectiveWatchdog* w) { g_device_wait_watchdog = w; }

DeviceWaitGuard::DeviceWaitGuard(const char* what) {
  if (g_device_wait_watchdog) guard_.emplace(*g_device_wait_watchdog, what, /*device_wait=*/true);
}

DeviceWaitGuard::~DeviceWaitGuard() = default;

}  // namespace subdp
