// The CUDA backend's plumbing: error-checking macros and the arena free list (no device
// needed), the device pool's tracking, and the NCCL communicator on one GPU (world size 1
// over the local bootstrap communicator).
#include <gtest/gtest.h>

#include <string>

#include "engine/comm/communicator.h"
#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_pool.h"
#include "tests/gpu/gpu_test_util.h"
#if defined(SUBDP_WITH_NCCL)
#include "kernels/cuda/nccl_comm.h"
#endif

namespace subdp::gpu_test {
namespace {

/// Message of the subdp::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckMacros, NameCallFileLineAndLibraryString) {
  const std::string cuda = error_of([] { CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(cuda.find("CUDA error in cudaErrorInvalidValue"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("test_device.cpp:"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("invalid argument"), std::string::npos) << cuda;
  const std::string blas = error_of([] { CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); });
  EXPECT_NE(blas.find("cuBLAS error in CUBLAS_STATUS_NOT_INITIALIZED"), std::string::npos) << blas;
  EXPECT_NE(blas.find("not initialized"), std::string::npos) << blas;
#if defined(SUBDP_WITH_NCCL)
  const std::string nccl = error_of([] { NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_NE(nccl.find("NCCL error in ncclInvalidArgument"), std::string::npos) << nccl;
  EXPECT_NE(nccl.find("invalid argument"), std::string::npos) << nccl;
#endif
  EXPECT_EQ(error_of([] { CUDA_CHECK(cudaSuccess); }), "");
}

TEST(ArenaAllocator, AlignsSplitsAndCoalesces) {
  cuda::ArenaAllocator a(4096);
  const size_t x = a.allocate(1), y = a.allocate(300), z = a.allocate(256);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 256u);
  EXPECT_EQ(z, 768u);
  EXPECT_EQ(a.block_size(y), 512u);
  EXPECT_EQ(a.used(), 1024u);
  a.release(y);
  EXPECT_EQ(a.allocate(200), 256u);  // first fit reuses the hole
  a.release(256);
  a.release(x);
  a.release(z);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.free_blocks(), 1u);  // everything merged back
  EXPECT_EQ(a.largest_free(), 4096u);
}

TEST(ArenaAllocator, ReportsOutOfMemoryAndBadRelease) {
  cuda::ArenaAllocator a(1024);
  a.allocate(512);
  const std::string oom = error_of([&] { a.allocate(1024); });
  EXPECT_NE(oom.find("device pool out of memory: 1024 bytes requested, 512 of 1024 bytes free"), std::string::npos)
      << oom;
  EXPECT_NE(error_of([&] { a.release(256); }).find("unknown block"), std::string::npos);
}

using DeviceTest = GpuTest;

TEST_F(DeviceTest, PoolReportsToTracker) {
  auto& t = MemoryTracker::global();
  const MemStats before = t.stats();
  cuda::DevicePool pool(0, 1 << 20);
  {
    cuda::DeviceBuffer a(pool, 1000, MemCategory::activations), b(pool, 4096, MemCategory::params);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 256, 0u);
    const int act = static_cast<int>(MemCategory::activations), par = static_cast<int>(MemCategory::params);
    EXPECT_EQ(t.stats().current[act] - before.current[act], 1000);
    EXPECT_EQ(t.stats().current[par] - before.current[par], 4096);
    EXPECT_EQ(pool.used(), 1024u + 4096u);
    CUDA_CHECK(cudaMemset(a.get(), 0, 1000));
    EXPECT_GT(cuda::device_memory_used_bytes(), int64_t{1} << 20);
  }
  EXPECT_EQ(t.stats().total_current, before.total_current);
  EXPECT_EQ(pool.used(), 0u);
  EXPECT_NE(error_of([&] { pool.allocate(2 << 20, MemCategory::workspace); }).find("out of memory"), std::string::npos);
}

#if defined(SUBDP_WITH_NCCL)
TEST_F(DeviceTest, NcclWorldOfOne) {
  auto boot = make_local_communicator();
  auto comm = make_nccl_communicator(*boot);
  ASSERT_EQ(comm->kind(), CommKind::nccl);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get());
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->device(), 0);

  const auto v = random_vec(1000, 5);
  Dev<float> d(v);
  comm->allreduce_sum(d.get(), 1000);  // device buffer: identity on one rank
  EXPECT_EQ(d.download(), v);
  double host[2] = {1.5, -2.0};
  comm->allreduce_sum(host, 2);  // host buffer: staged
  comm->allreduce_max(host, 2);
  EXPECT_EQ(host[0], 1.5);
  EXPECT_EQ(host[1], -2.0);
  std::vector<float> out(1000);
  comm->reduce_sum(v.data(), out.data(), 1000, 0);
  EXPECT_EQ(out, v);
  comm->broadcast(d.get(), 4000, 0);
  comm->barrier();
  EXPECT_EQ(comm->allgather("x"), std::vector<std::string>{"x"});

  auto sub = comm->subgroup({0});
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  sub->allreduce_sum(d.get(), 1000);
  EXPECT_EQ(d.download(), v);
}
#endif

}  // namespace
}  // namespace subdp::gpu_test
