// Collective watchdog: a background thread that ends the process when one collective has
// waited longer than the configured timeout (a peer rank lost or stuck), so a run never
// hangs. mpirun then tears down the other ranks.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace subdp {

class CollectiveWatchdog {
 public:
  /// timeout_s <= 0 disables the watchdog. rank is only used in the message.
  CollectiveWatchdog(double timeout_s, int rank);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// RAII mark of one collective in flight; `what` must outlive the guard (a literal).
  class Guard {
   public:
    Guard(CollectiveWatchdog& w, const char* what);
    ~Guard();

   private:
    CollectiveWatchdog& w_;
  };

 private:
  void watch();
  double timeout_s_;
  int rank_;
  std::atomic<const char*> what_{nullptr};
  std::atomic<int64_t> since_ns_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace subdp
