// Entry point of subdp_gpu_tests: runs every test (device tests skip themselves when no
// CUDA device is usable) and exits 77 when the device tests were skipped, so ctest
// (SKIP_RETURN_CODE 77) reports the GPU suite as skipped instead of passed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tests/gpu/gpu_test_util.h"

int main(int argc, char** argv) {
  // Each CudaBackend reserves its pool at construction (default: 90 % of the free device
  // memory); the tests' shapes need little, and a small pool leaves the device to the next
  // process (benchmarks/gpu/run.sh runs the suites one process each). Set it to override.
  setenv("SUBDP_CUDA_POOL_GB", "1", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const std::string why = subdp::gpu_test::no_device_reason();
  if (!why.empty()) {
    std::printf("subdp_gpu_tests: device tests skipped: %s\n", why.c_str());
    if (rc == 0) return 77;
  }
  return rc;
}
