// The CUDA backend (kernels/cuda/backend.cpp) against the CPU backend: one training step
// (forward, backward) of every tiny model under DP and forward / backward masking at block and
// neuron level gives the CPU's loss and gradients within float32 tolerance (1e-4 relative to
// the largest element of each tensor: the kernels sum in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/core/backend.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

using CudaBackendStep = gpu_test::GpuTest;

/// max |a - b| / max(max |b|, 1e-6).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

TEST_F(CudaBackendStep, EveryModelAndRegimeMatchesTheCpuBackend) {
  for (const test::BackendCase& c : test::backend_cases()) {
    SCOPED_TRACE(c.label());
    set_backend(make_cpu_backend());
    const test::StepResult cpu = test::backend_step(c);
    set_backend(make_backend(DeviceType::cuda));
    const test::StepResult gpu = test::backend_step(c);
    set_backend(make_cpu_backend());
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * std::abs(cpu.loss));
    ASSERT_EQ(cpu.grads.size(), gpu.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i)
      EXPECT_LT(relative_error(gpu.grads[i], cpu.grads[i]), 1e-4) << "gradient " << i;
  }
}

// cuBLAS takes a default workspace pool from device memory at a handle's first GEMM unless the
// handle has a workspace of the caller's: memory outside the backend's pool, which the planner
// and the tracker never see. Every model's step must leave the device's used bytes as they were.
TEST_F(CudaBackendStep, GemmsTakeNoDeviceMemoryOutsideTheBackendsPool) {
  // A thread of its own: its cuBLAS handles are new, so no earlier test's GEMM took the pool.
  std::thread([] {
    const std::vector<test::BackendCase> cases = test::backend_cases();  // host batches: before the switch
    set_backend(make_backend(DeviceType::cuda));
    const int64_t before = backend().device_used_bytes();
    for (const test::BackendCase& c : cases) {
      if (c.regime != MaskRegime::none) continue;
      SCOPED_TRACE(c.label());
      test::backend_step(c);
      EXPECT_EQ(backend().device_used_bytes(), before);
    }
    set_backend(make_cpu_backend());
  }).join();
}

}  // namespace
}  // namespace subdp
