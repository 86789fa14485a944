// The fenced test device (kernels/fenced): a planted host access of device memory faults
// with its message; transfers round-trip; every model under every regime gives the CPU
// backend's loss and gradients bit for bit, with batches staged through host buffers.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/core/backend.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

/// The fenced device is the run's backend for the scope's lifetime; the CPU backend after.
struct FencedScope {
  FencedScope() { set_backend(make_fenced_backend()); }
  ~FencedScope() { set_backend(make_cpu_backend()); }
};

TEST(FencedDeviceDeathTest, HostReadOfADeviceTensorFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FencedScope fenced;
        const Tensor t = Tensor::zeros({16}, MemCategory::params);
        volatile float x = t.f32()[3];  // the planted bug: a host read of a device tensor
        (void)x;
      },
      "host access to fenced device memory");
}

TEST(FencedDeviceDeathTest, HostWriteOfADeviceTensorFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        FencedScope fenced;
        const Tensor t = Tensor::empty({16}, MemCategory::grads);
        t.f32()[0] = 1.f;
      },
      "host access to fenced device memory");
}

TEST(FencedDevice, TransfersRoundTripAndBuffersAreReused) {
  FencedScope fenced;
  EXPECT_EQ(backend().name(), "fenced");
  const std::vector<float> values = {1.5f, -2.f, 3.25f, 0.f, 7.f};
  const Tensor a = Tensor::empty({5}, MemCategory::params);
  EXPECT_FALSE(a.on_host());
  set_values(a, values);
  EXPECT_EQ(host_values(a), values);
  const Tensor b = Tensor::zeros({5}, MemCategory::params);
  backend().axpy(2.f, a.f32(), b.f32(), 5);  // a backend operation opens the pool
  EXPECT_EQ(host_values(b), (std::vector<float>{3.f, -4.f, 6.5f, 0.f, 14.f}));
  const Tensor staged = Tensor::host_empty({5}, MemCategory::activations);
  EXPECT_TRUE(staged.on_host());
  staged.copy_from(b);  // device -> host
  EXPECT_EQ(staged.f32()[4], 14.f);
  void* first = nullptr;
  {
    const Tensor t = Tensor::zeros({3000}, MemCategory::workspace);
    first = t.raw();
  }
  const Tensor again = Tensor::zeros({3000}, MemCategory::workspace);  // the freed pages, first fit
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(host_values(again), std::vector<float>(3000, 0.f));
}

TEST(FencedDevice, EveryModelAndRegimeMatchesTheCpuBackendBitForBit) {
  for (const test::BackendCase& c : test::backend_cases()) {
    SCOPED_TRACE(c.label());
    const test::StepResult cpu = test::backend_step(c);
    test::StepResult fenced;
    {
      FencedScope scope;
      fenced = test::backend_step(c);
    }
    EXPECT_EQ(std::memcmp(&cpu.loss, &fenced.loss, sizeof(double)), 0) << cpu.loss << " vs " << fenced.loss;
    ASSERT_EQ(cpu.grads.size(), fenced.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i) EXPECT_EQ(cpu.grads[i], fenced.grads[i]) << "gradient " << i;
  }
}

}  // namespace
}  // namespace subdp
