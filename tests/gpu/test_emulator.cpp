// The emulated device's own checks (SUBDP_CUDA=EMULATE only): what it must refuse or
// expose as a GPU would — launch limits, a host pointer handed to a kernel, a copy read
// before its stream ran, a race between streams without an event, host access to device
// memory. The kernels here are test kernels: the emulated build compiles them as host C++.
#if defined(SUBDP_CUDA_EMULATED)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

__global__ void set_kernel(float* x, float v, int n) {
  for (int64_t i = cuda::detail::grid_first(); i < n; i += cuda::detail::grid_stride()) x[i] = v;
}

__global__ void __launch_bounds__(128) bounded_kernel(float* x, int n) {
  for (int64_t i = cuda::detail::grid_first(); i < n; i += cuda::detail::grid_stride()) x[i] = 2.f;
}

/// Message of the CUDA_CHECK_LAUNCH after `launch` ("" when none).
template <class F>
std::string launch_error(F&& launch) {
  try {
    launch();
    CUDA_CHECK_LAUNCH();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

using Emulator = GpuTest;

TEST_F(Emulator, RefusesLaunchesBeyondSm90Limits) {
  Dev<float> x(16);
  EXPECT_NE(launch_error([&] {
              SUBDP_LAUNCH(1, 1025, 0, stream, set_kernel)(x.get(), 1.f, 16);
            }).find("exceeds sm_90's 1024 threads per block"),
            std::string::npos);
  EXPECT_NE(launch_error([&] {
              SUBDP_LAUNCH(dim3(1, 70000), 32, 0, stream, set_kernel)(x.get(), 1.f, 16);
            }).find("grid limits"),
            std::string::npos);
  EXPECT_NE(launch_error([&] {
              SUBDP_LAUNCH(1, 32, 64 * 1024, stream, set_kernel)(x.get(), 1.f, 16);
            }).find("dynamic shared memory"),
            std::string::npos);
  EXPECT_EQ(launch_error([&] { SUBDP_LAUNCH(1, 1024, 0, stream, set_kernel)(x.get(), 1.f, 16); }), "");
}

TEST_F(Emulator, RefusesBlocksBeyondTheKernelsLaunchBounds) {
  Dev<float> x(256);
  EXPECT_EQ(launch_error([&] { SUBDP_LAUNCH(2, 128, 0, stream, bounded_kernel)(x.get(), 256); }), "");
  EXPECT_EQ(x.download(), std::vector<float>(256, 2.f));
  const std::string e = launch_error([&] { SUBDP_LAUNCH(1, 256, 0, stream, bounded_kernel)(x.get(), 256); });
  EXPECT_NE(e.find("256 threads per block, more than the kernel's __launch_bounds__(128)"), std::string::npos) << e;
  EXPECT_NE(e.find("cudaErrorLaunchOutOfResources"), std::string::npos) << e;
}

TEST_F(Emulator, NamesTheKernelArgumentThatIsHostMemory) {
  std::vector<float> host(16);
  const std::string e = launch_error([&] { SUBDP_LAUNCH(1, 32, 0, stream, set_kernel)(host.data(), 1.f, 16); });
  EXPECT_NE(e.find("kernel set_kernel argument 0 points to pageable host memory"), std::string::npos) << e;
  CUDA_CHECK(cudaDeviceReset());  // the fault is sticky, as on a GPU
}

TEST_F(Emulator, CopyToPinnedMemoryIsStaleUntilTheStreamSynchronises) {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Dev<float> x(8);
  float* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, 8 * sizeof(float)));
  for (int i = 0; i < 8; ++i) pinned[i] = -1.f;
  SUBDP_LAUNCH(1, 32, 0, s, set_kernel)(x.get(), 3.f, 8);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemcpyAsync(pinned, x.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(pinned[0], -1.f);  // queued, not run: reading it now is the bug a GPU hides by luck
  CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(pinned[7], 3.f);
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_F(Emulator, StreamsWithoutAnEventRaceAndAnEventOrdersThem) {
  cudaStream_t a = nullptr, b = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t done = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  Dev<float> x(1);
  int raced = 0;
  for (int round = 0; round < 32; ++round) {
    SUBDP_LAUNCH(1, 1, 0, a, set_kernel)(x.get(), 1.f, 1);
    SUBDP_LAUNCH(1, 1, 0, b, set_kernel)(x.get(), 2.f, 1);  // no event: either order
    raced += x.download()[0] == 1.f;
  }
  EXPECT_GT(raced, 0);  // the seeded interleaving ran b first at least once
  EXPECT_LT(raced, 32);
  for (int round = 0; round < 8; ++round) {
    SUBDP_LAUNCH(1, 1, 0, a, set_kernel)(x.get(), 1.f, 1);
    CUDA_CHECK(cudaEventRecord(done, a));
    CUDA_CHECK(cudaStreamWaitEvent(b, done, 0));
    SUBDP_LAUNCH(1, 1, 0, b, set_kernel)(x.get(), 2.f, 1);
    EXPECT_EQ(x.download()[0], 2.f);
  }
  CUDA_CHECK(cudaEventDestroy(done));
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
}

TEST_F(Emulator, CopyChecksWhereEachPointerLies) {
  Dev<float> x(4);
  std::vector<float> host(4);
  const cudaError_t st = cudaMemcpy(host.data(), x.get(), 16, cudaMemcpyHostToDevice);  // direction swapped
  EXPECT_EQ(st, cudaErrorInvalidValue);
  const std::string why = cudaGetErrorString(st);
  EXPECT_NE(why.find("argument dst"), std::string::npos) << why;
  EXPECT_NE(why.find("pageable host memory, but the call expects device memory"), std::string::npos) << why;
  cudaGetLastError();
}

TEST_F(Emulator, HostAccessToDeviceMemoryFaults) {
  Dev<float> x(4);
  float* p = x.get();
  EXPECT_DEATH(p[0] = 1.f, "host code touched emulated device memory");
}

}  // namespace
}  // namespace subdp::gpu_test
#endif
