// The collective watchdog's clock (engine/comm/watchdog.h): a host wait on device work under
// NCCL is timed only while the device probe says a collective is running, so a long
// computation queued before the collective is not taken for a lost peer, while a collective
// that runs past the limit still ends the process (exit 3, naming it). Timeouts of 1 s, the
// smallest the config allows.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "engine/comm/watchdog.h"

namespace subdp {
namespace {

using std::chrono::milliseconds;

/// A device wait of `wait` under a 1 s watchdog whose probe reports a collective running from
/// `begins` into the wait on; exits 0 if the watchdog lets it end.
void device_wait(milliseconds wait, milliseconds begins) {
  CollectiveWatchdog watchdog(1.0, 0);
  const auto start = std::chrono::steady_clock::now();
  watchdog.set_device_probe([&] { return std::chrono::steady_clock::now() - start >= begins; });
  set_device_wait_watchdog(&watchdog);
  {
    DeviceWaitGuard guard("NCCL (a test wait)");
    std::this_thread::sleep_for(wait);
  }
  set_device_wait_watchdog(nullptr);
  std::_Exit(0);
}

TEST(Watchdog, DeviceWaitNotTimedWhileTheDeviceComputes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // A wait of 2.2 s (twice the limit, four ticks) on computation before the collective: no timeout.
  EXPECT_EXIT(device_wait(milliseconds(2200), milliseconds(100000)), testing::ExitedWithCode(0), "");
}

TEST(Watchdog, DeviceWaitTimedFromTheCollectivesStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The collective begins 0.7 s into the wait and never ends: the clock runs from the tick that
  // sees it, and the process ends naming the wait.
  EXPECT_EXIT(device_wait(milliseconds(10000), milliseconds(700)), testing::ExitedWithCode(3),
              "collective NCCL \\(a test wait\\) has waited [0-9.]+ s .*a peer rank is lost or stuck \\(timed from");
}

TEST(Watchdog, HostCollectiveTimedFromItsCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // An MPI collective (no device probe applies) is timed from the call.
  EXPECT_EXIT(
      {
        CollectiveWatchdog watchdog(1.0, 0);
        watchdog.set_device_probe([] { return false; });
        CollectiveWatchdog::Guard guard(watchdog, "MPI_Allreduce");
        std::this_thread::sleep_for(milliseconds(10000));
        std::_Exit(0);
      },
      testing::ExitedWithCode(3), "collective MPI_Allreduce has waited [0-9.]+ s");
}

/// A barrier's wait of `wait` under a 1 s watchdog that allows `extra_s` more for rank 0's
/// checkpoint write; exits 0 if the watchdog lets it end.
void barrier_during_a_write(double extra_s, milliseconds wait) {
  CollectiveWatchdog watchdog(1.0, 0);
  watchdog.allow_longer(extra_s, "rank 0's checkpoint write");
  {
    CollectiveWatchdog::Guard guard(watchdog, "MPI_Barrier");
    std::this_thread::sleep_for(wait);
  }
  std::_Exit(0);
}

TEST(Watchdog, AnAllowanceLetsAWaitRunLongerAndTheTimeoutNamesIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Rank 0's checkpoint write kept its peers in a barrier past a 1 s limit: with 1.5 s allowed
  // more, a 2 s wait ends normally.
  EXPECT_EXIT(barrier_during_a_write(1.5, milliseconds(2000)), testing::ExitedWithCode(0), "");
  // A wait past both still ends the process, naming the allowance.
  EXPECT_EXIT(barrier_during_a_write(1.0, milliseconds(10000)), testing::ExitedWithCode(3),
              "collective MPI_Barrier has waited [0-9.]+ s \\(parallel.collective_timeout_s = 1, and rank 0's "
              "checkpoint write allowed more\\)");
}

}  // namespace
}  // namespace subdp
