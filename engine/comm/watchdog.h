// Collective watchdog: a background thread that ends the process when one collective has
// waited longer than the configured timeout (a peer rank lost or stuck), so a run never
// hangs. mpirun then tears down the other ranks. Time during which this process did not run
// (the whole job stopped by SIGSTOP, as SLURM's `scontrol suspend` does, or the machine
// paused) does not count: a suspended job resumes instead of timing out.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace subdp {

class CollectiveWatchdog {
 public:
  /// timeout_s <= 0 disables the watchdog. rank is only used in the message.
  CollectiveWatchdog(double timeout_s, int rank);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// RAII mark of one collective in flight; `what` must outlive the guard (a literal). A
  /// `device_wait` guard (a host wait on device work) is timed only while the device probe,
  /// if one is set, says a collective is running.
  class Guard {
   public:
    Guard(CollectiveWatchdog& w, const char* what, bool device_wait = false);
    ~Guard();

   private:
    CollectiveWatchdog& w_;
  };

  /// Sets the probe that times device waits: called on the watchdog's thread at each 500 ms
  /// tick (waiting or not, so that it can retire finished work), it says whether a collective
  /// is running on the device now (begun: the device work queued before it is done; not yet
  /// finished). A wait's clock starts at the first tick that sees one, so a host wait that
  /// covers a long computation before the collective does not time out, while a collective
  /// stuck on a lost peer does. Set before the first guard, from the thread that owns the
  /// watchdog; without one the whole wait is timed.
  void set_device_probe(std::function<bool()> collective_running);

  /// From now on a wait may run extra_s seconds past the timeout (0: none again), and a timeout
  /// names `why` (a literal): rank 0 writing or reading a checkpoint, which its peers wait on in
  /// their next collective, can take longer than any collective should on a slow file system.
  void allow_longer(double extra_s, const char* why);

 private:
  void watch();
  /// Adds to stopped_ns_ the part of a gap between two ticks beyond kStoppedGap: the thread,
  /// due every 500 ms, did not run, so neither did the process.
  void note_gap(int64_t gap_ns, int64_t now_ns);
  double timeout_s_;
  int rank_;
  std::atomic<const char*> what_{nullptr};
  std::atomic<bool> device_wait_{false};
  std::function<bool()> device_probe_;
  std::atomic<double> extra_s_{0};
  std::atomic<const char*> extra_why_{nullptr};
  std::atomic<int64_t> since_ns_{0};
  std::atomic<int64_t> stopped_ns_{0};           // total time the process was stopped
  std::atomic<int64_t> stopped_at_start_ns_{0};  // stopped_ns_ when the collective began
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread thread_;
};

/// The watchdog that guards host waits on device work (DeviceWaitGuard): the NCCL world
/// installs one, since a peer lost inside an NCCL collective stalls the stream, and so the next
/// host wait on it, not a host collective. Null (no guard) otherwise. Set and read on the main
/// thread.
void set_device_wait_watchdog(CollectiveWatchdog* w);

/// RAII mark of one host wait on device work (a stream synchronisation, a synchronous copy)
/// under the installed device-wait watchdog, if any: a collective that runs longer than its
/// timeout during the wait (CollectiveWatchdog::set_device_probe) ends the process naming
/// `what` (a literal).
class DeviceWaitGuard {
 public:
  explicit DeviceWaitGuard(const char* what);
  ~DeviceWaitGuard();
  DeviceWaitGuard(const DeviceWaitGuard&) = delete;
  DeviceWaitGuard& operator=(const DeviceWaitGuard&) = delete;

 private:
  std::optional<CollectiveWatchdog::Guard> guard_;
};

}  // namespace subdp
