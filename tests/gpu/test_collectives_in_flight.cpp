// CollectivesInFlight (kernels/cuda/collectives_in_flight.h), which times the NCCL watchdog's
// device waits: a collective counts as running only between its start on the device (the
// stream has passed the work queued before it) and its end, as seen from another thread.
// Emulated device only: its lazy streams hold the work at a chosen point, which a GPU's
// eager ones cannot.
#if defined(SUBDP_CUDA_EMULATED)
#include <gtest/gtest.h>

#include <thread>

#include "kernels/cuda/collectives_in_flight.h"
#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

class CollectivesInFlightTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
  }
  void TearDown() override {
    if (mark) cudaEventDestroy(mark);
    if (comm) cudaStreamDestroy(comm);
  }
  /// any_running() asked from another thread, as the watchdog asks it.
  bool running_seen_by_another_thread() {
    bool running = false;
    std::thread([&] { running = list.any_running(); }).join();
    return running;
  }
  cudaStream_t comm = nullptr;
  cudaEvent_t mark = nullptr;  // recorded on comm just after a collective's start
  cuda::CollectivesInFlight list{0};
  Dev<float> x{4096};
};

TEST_F(CollectivesInFlightTest, RunningOnlyBetweenItsStartAndItsEnd) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 4096 * sizeof(float), comm));  // the work queued before it
  const size_t k = list.begin(comm);
  CUDA_CHECK(cudaEventRecord(mark, comm));
  CUDA_CHECK(cudaMemsetAsync(x, 1, 4096 * sizeof(float), comm));  // the collective itself
  list.finish(k, comm);
  EXPECT_FALSE(running_seen_by_another_thread()) << "counted while the work before it had not run";
  CUDA_CHECK(cudaEventSynchronize(mark));  // the stream runs to just past the start
  EXPECT_TRUE(running_seen_by_another_thread()) << "not counted once begun";
  CUDA_CHECK(cudaStreamSynchronize(comm));
  EXPECT_FALSE(running_seen_by_another_thread()) << "still counted once finished";
  EXPECT_EQ(list.begin(comm), k) << "a retired entry is not reused";
}

TEST_F(CollectivesInFlightTest, RunningUntilItsEndIsRecorded) {
  // The emulated NCCL runs a collective inside the call, between begin() and finish(): while
  // it waits there for a lost peer, its end is not recorded yet and must not count as reached.
  list.begin(comm);
  CUDA_CHECK(cudaStreamSynchronize(comm));
  EXPECT_TRUE(running_seen_by_another_thread());
  EXPECT_TRUE(running_seen_by_another_thread()) << "retired before its end was recorded";
}

}  // namespace
}  // namespace subdp::gpu_test
#endif
