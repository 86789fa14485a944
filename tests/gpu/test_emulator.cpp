// The emulated device's own checks (SUBDP_CUDA=EMULATE only): what it must refuse or
// expose as a GPU would — launch limits, a host pointer handed to a kernel, a copy or an
// event's time read before its stream ran, a race between streams without an event, host
// access to device memory, a warp matrix operation or load misused, shared memory read before
// a block wrote it, an asynchronous copy read before its wait, warps that run apart between
// barriers. The kernels here are test kernels: the emulated build compiles them as host C++.
#if defined(SUBDP_CUDA_EMULATED)
#include <gtest/gtest.h>
#include <mma.h>

#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/mma_sync.cuh"
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

TEST_F(Emulator, EventTimesAreReadableOnlyOnceTheStreamRanThem) {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr, unrecorded = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&end));
  CUDA_CHECK(cudaEventCreate(&unrecorded));
  CUDA_CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  Dev<float> x(1 << 16);
  CUDA_CHECK(cudaEventRecord(start, s));
  SUBDP_LAUNCH(64, 256, 0, s, set_kernel)(x.get(), 1.f, 1 << 16);
  CUDA_CHECK(cudaEventRecord(end, s));
  CUDA_CHECK(cudaEventRecord(untimed, s));
  float ms = -1.f;
  // Queued, not run: the read a GPU may answer by luck is refused, and is not a sticky error.
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 0.f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("cudaEventDisableTiming"), std::string::npos);
  EXPECT_EQ(cudaEventElapsedTime(&ms, unrecorded, end), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {start, end, untimed, unrecorded}) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaStreamDestroy(s));
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

namespace wmma = nvcuda::wmma;

/// One warp: d = a b + c for a (16 x 16 bf16, row-major), b (col-major) and c (float,
/// row-major); `lanes` receives, for each lane and element i of a fragment loaded from
/// [0, 256), the tile position that element holds.
__global__ void wmma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d,
                            const float* positions, float* lanes) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(fc, positions, 16, wmma::mem_row_major);
  for (int i = 0; i < fc.num_elements; ++i) lanes[threadIdx.x * fc.num_elements + i] = fc.x[i];
}

/// A load from `a` with leading dimension ldm.
__global__ void wmma_load_kernel(const __nv_bfloat16* a, unsigned ldm) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, a, ldm);
}

TEST_F(Emulator, WarpMatrixMultiplyIsTheProductOfTheBf16Tiles) {
  const std::vector<float> a = round_bf16(random_vec(256, 1)), b = round_bf16(random_vec(256, 2)),
                           c = random_vec(256, 3);
  std::vector<float> positions(256);
  for (int p = 0; p < 256; ++p) positions[p] = static_cast<float>(p);
  DevBf16 da(a), db(b);
  Dev<float> dc(c), dd(256), dpos(positions), dlanes(256);
  SUBDP_LAUNCH(1, 32, 0, stream, wmma_kernel)(da, db, dc.get(), dd.get(), dpos.get(), dlanes.get());
  CUDA_CHECK_LAUNCH();
  const std::vector<float> d = dd.download(), lanes = dlanes.download();
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      float want = c[r * 16 + col];  // b is column-major: b(k, col) at col * 16 + k
      for (int k = 0; k < 16; ++k) want += a[r * 16 + k] * b[col * 16 + k];
      EXPECT_NEAR(d[r * 16 + col], want, 1e-5f) << r << "," << col;
    }
  // Every element held by exactly one lane, and not in the row-major lane order a kernel
  // might wrongly assume (lane l holding positions 8 l .. 8 l + 7).
  EXPECT_EQ(std::set<float>(lanes.begin(), lanes.end()).size(), 256u);
  EXPECT_NE(lanes, positions);
}

TEST_F(Emulator, WarpMatrixLoadsNeedAlignedPointersAndLeadingDimensions) {
  DevBf16 a(std::vector<float>(512, 1.f));
  SUBDP_LAUNCH(1, 32, 0, stream, wmma_load_kernel)(a.get() + 16, 16u);  // 32 bytes in: fine
  CUDA_CHECK(cudaDeviceSynchronize());
  for (const auto& [offset, ldm] : {std::pair<int, unsigned>{8, 16}, {0, 12}}) {
    SUBDP_LAUNCH(1, 32, 0, stream, wmma_load_kernel)(a.get() + offset, ldm);
    const cudaError_t st = cudaDeviceSynchronize();
    EXPECT_EQ(st, cudaErrorMisalignedAddress) << offset << " " << ldm;
    const std::string why = cudaGetErrorString(st);
    EXPECT_NE(why.find("not 256-bit aligned or ldm"), std::string::npos) << why;
    CUDA_CHECK(cudaDeviceReset());  // the fault is sticky, as on a GPU
  }
}

/// One warp: d = a b + c through mma.sync.m16n8k16 for a (16 x 16 bf16, row-major), b
/// (16 x 8 bf16, column-major: b(k, n) at n * 16 + k) and c, d (16 x 8 float, row-major),
/// each lane placing its elements as the PTX ISA's fragment figures show them. A lane with
/// lane >= `lanes` leaves first.
__global__ void mma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d, int lanes) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane % 4;
  if (lane >= lanes) return;
  uint32_t ra[4], rb[2];
  float rc[4], rd[4];
  for (int reg = 0; reg < 4; ++reg) {  // registers: (row g, k 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8)
    const int row = g + (reg % 2) * 8, k = 2 * t + (reg / 2) * 8;
    ra[reg] = cuda::mma::pack(a[row * 16 + k], a[row * 16 + k + 1]);
  }
  for (int reg = 0; reg < 2; ++reg)
    rb[reg] = cuda::mma::pack(b[g * 16 + 2 * t + 8 * reg], b[g * 16 + 2 * t + 8 * reg + 1]);
  for (int i = 0; i < 4; ++i) rc[i] = c[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
  cuda::mma::m16n8k16(rd, ra, rb, rc);
  for (int i = 0; i < 4; ++i) d[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = rd[i];
}

/// mma::pair of the two bf16 at p.
__global__ void pair_kernel(const __nv_bfloat16* p, uint32_t* out) { *out = cuda::mma::pair(p); }

/// Block 0 writes its shared array, then every block reads it into out (32 floats a block):
/// a template kernel, whose static locals GCC would place outside the emulator's shared section.
template <int N>
__global__ void shared_each_block_kernel(float* out) {
  __shared__ float s[N];
  if (blockIdx.x == 0) s[threadIdx.x] = 1.f;
  __syncthreads();
  out[blockIdx.x * N + threadIdx.x] = s[threadIdx.x];
}

TEST_F(Emulator, SharedMemoryStartsEachBlockAsNaN) {
  Dev<float> out(64);
  SUBDP_LAUNCH(2, 32, 0, stream, shared_each_block_kernel<32>)(out.get());
  CUDA_CHECK_LAUNCH();
  const std::vector<float> v = out.download();
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(v[i], 1.f) << i;
    EXPECT_TRUE(std::isnan(v[32 + i])) << "block 1 read " << v[32 + i] << " at " << i;  // not block 0's 1
  }
}

/// Warp 1 writes its lanes' shared floats after two warp collectives; warp 0 reads them
/// after one, with no barrier between: out[lane] is 1 where warp 1 got there first, else NaN.
__global__ void uneven_warps_kernel(float* out) {
  __shared__ float s[32];
  const int lane = static_cast<int>(threadIdx.x) % 32;
  __syncwarp();
  if (threadIdx.x >= 32) {
    __syncwarp();
    s[lane] = 1.f;
  } else {
    out[lane] = s[lane];  // a race, on purpose
  }
}

TEST_F(Emulator, WarpsProgressUnevenlyBetweenBarriers) {
  Dev<float> out(32);
  int first = 0, second = 0;                      // launches where warp 1 wrote before warp 0 read, and after
  for (int launch = 0; launch < 200; ++launch) {  // warp 1 runs ahead in about 1 launch of 10
    SUBDP_LAUNCH(1, 64, 0, stream, uneven_warps_kernel)(out.get());
    CUDA_CHECK_LAUNCH();
    for (float v : out.download()) (v == 1.f ? first : second) += 1;
  }
  EXPECT_GT(first, 0);  // in lock step, warp 0 would always read before warp 1 writes
  EXPECT_GT(second, 0);
}

/// One thread: copies src[0 .. 3] (16 bytes, of which src_bytes are read) into shared memory
/// with cp.async at `offset` floats into a 16-byte aligned array, one 16-byte copy or
/// (cp_size 4) four 4-byte ones, and writes what it reads there before the wait (out[0 .. 3])
/// and after it (out[4 .. 7]); with `skip_wait`, it never waits.
__global__ void cp_async_kernel(const float* src, float* out, int src_bytes, int offset, bool skip_wait, int cp_size) {
  alignas(16) __shared__ float s[8];
  if (cp_size == 16) {
    cuda::async::copy16(s + offset, src, src_bytes);
  } else {
    for (int k = 0; k < 4; ++k) cuda::async::copy4(s + offset + k, src + k, src_bytes >= 4 * (k + 1) ? 4 : 0);
  }
  cuda::async::commit();
  for (int k = 0; k < 4; ++k) out[k] = s[offset + k];
  if (skip_wait) return;
  cuda::async::wait<0>();
  for (int k = 0; k < 4; ++k) out[4 + k] = s[offset + k];
}

TEST_F(Emulator, CpAsyncLandsAtTheWait) {
  Dev<float> src(std::vector<float>{1.f, 2.f, 3.f, 4.f}), out(8);
  // 16-byte copies at a 16-byte aligned offset, 4-byte ones at a 4-byte aligned one.
  for (const auto& [cp_size, offset] : {std::pair{16, 0}, {4, 1}}) {
    SUBDP_LAUNCH(1, 1, 0, stream, cp_async_kernel)(src.get(), out.get(), 16, offset, false, cp_size);
    CUDA_CHECK_LAUNCH();
    std::vector<float> v = out.download();
    for (int k = 0; k < 4; ++k) {
      EXPECT_TRUE(std::isnan(v[k])) << "read before the wait: " << v[k] << ", copies of " << cp_size;
      EXPECT_EQ(v[4 + k], 1.f + k) << cp_size;
    }
    SUBDP_LAUNCH(1, 1, 0, stream, cp_async_kernel)
    (src.get(), out.get(), 8, offset, false, cp_size);  // 2 floats, 2 zeros
    CUDA_CHECK_LAUNCH();
    v = out.download();
    EXPECT_EQ(std::vector<float>(v.begin() + 4, v.end()), (std::vector<float>{1.f, 2.f, 0.f, 0.f})) << cp_size;
  }
  for (const auto& [offset, skip, want] :
       {std::tuple<int, bool, const char*>{2, false, "not 16-byte aligned"}, {0, true, "never waited for"}}) {
    SUBDP_LAUNCH(1, 1, 0, stream, cp_async_kernel)(src.get(), out.get(), 16, offset, skip, 16);
    const cudaError_t st = cudaDeviceSynchronize();
    EXPECT_NE(st, cudaSuccess);
    EXPECT_NE(std::string(cudaGetErrorString(st)).find(want), std::string::npos) << cudaGetErrorString(st);
    CUDA_CHECK(cudaDeviceReset());  // the fault is sticky, as on a GPU
  }
}

/// Stages the 16 x 16 bf16 matrix m in shared memory (rows 24 apart) and loads it with
/// ldmatrix_x4 as the four 8 x 8 blocks of an A operand (rows 0-7 / 8-15 by columns 0-7,
/// then 8-15), untransposed into out[32 lane + i] and transposed into out[32 lane + 4 + i].
/// `shift` moves every row address by that many elements; with `from_global`, the rows are
/// read from m itself, not from shared memory.
__global__ void ldmatrix_kernel(const __nv_bfloat16* m, uint32_t* out, int shift, bool from_global) {
  alignas(16) __shared__ __nv_bfloat16 tile[16 * 24];
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 256; e += 32) tile[e / 16 * 24 + e % 16] = m[e];
  __syncthreads();
  const int i = lane / 8, row = (i % 2) * 8 + lane % 8, col = (i / 2) * 8;
  const __nv_bfloat16* at = (from_global ? m + row * 16 : tile + row * 24) + col + shift;
  uint32_t r[4], rt[4];
  cuda::mma::ldmatrix_x4(r, at);
  cuda::mma::ldmatrix_x4<true>(rt, at);
  for (int k = 0; k < 4; ++k) {
    out[lane * 8 + k] = r[k];
    out[lane * 8 + 4 + k] = rt[k];
  }
}

TEST_F(Emulator, LdmatrixLoadsThePtxLayout) {
  std::vector<float> m(256);
  for (int e = 0; e < 256; ++e) m[e] = static_cast<float>(e);  // exact in bf16
  DevBf16 dm(m);
  Dev<uint32_t> dout(256);
  SUBDP_LAUNCH(1, 32, 0, stream, ldmatrix_kernel)(dm, dout.get(), 0, false);
  CUDA_CHECK_LAUNCH();
  const std::vector<uint32_t> out = dout.download();
  const auto bits = [&](int r, int c) { return static_cast<uint32_t>(f32_to_bf16_bits(m[r * 16 + c])); };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int r0 = (i % 2) * 8, c0 = (i / 2) * 8;
      // Untransposed: the m16n8k16 A operand of m (register i: rows g / g + 8, k 2t / 2t + 8).
      EXPECT_EQ(out[lane * 8 + i], bits(r0 + g, c0 + 2 * t) | bits(r0 + g, c0 + 2 * t + 1) << 16) << lane << " " << i;
      EXPECT_EQ(out[lane * 8 + 4 + i], bits(r0 + 2 * t, c0 + g) | bits(r0 + 2 * t + 1, c0 + g) << 16)
          << lane << " " << i << " trans";
    }
  }
  // Row addresses must be 16-byte aligned, in shared memory.
  SUBDP_LAUNCH(1, 32, 0, stream, ldmatrix_kernel)(dm, dout.get(), 2, false);
  cudaError_t st = cudaDeviceSynchronize();
  EXPECT_EQ(st, cudaErrorMisalignedAddress);
  EXPECT_NE(std::string(cudaGetErrorString(st)).find("not 16-byte aligned"), std::string::npos);
  CUDA_CHECK(cudaDeviceReset());  // the fault is sticky, as on a GPU
  SUBDP_LAUNCH(1, 32, 0, stream, ldmatrix_kernel)(dm, dout.get(), 0, true);
  st = cudaDeviceSynchronize();
  EXPECT_EQ(st, cudaErrorIllegalAddress);
  EXPECT_NE(std::string(cudaGetErrorString(st)).find("outside shared memory"), std::string::npos);
  CUDA_CHECK(cudaDeviceReset());
}

TEST_F(Emulator, MmaSyncIsTheProductInThePtxLayout) {
  const std::vector<float> a = round_bf16(random_vec(256, 4)), b = round_bf16(random_vec(128, 5)),
                           c = random_vec(128, 6);
  DevBf16 da(a), db(b);
  Dev<float> dc(c), dd(std::vector<float>(128, std::nanf("")));
  SUBDP_LAUNCH(1, 32, 0, stream, mma_kernel)(da, db, dc.get(), dd.get(), 32);
  CUDA_CHECK_LAUNCH();
  const std::vector<float> d = dd.download();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float want = c[r * 8 + n];
      for (int k = 0; k < 16; ++k) want += a[r * 16 + k] * b[n * 16 + k];
      EXPECT_NEAR(d[r * 8 + n], want, 1e-5f) << r << "," << n;
    }
  // The instruction is .aligned: every lane of the warp takes part.
  SUBDP_LAUNCH(1, 32, 0, stream, mma_kernel)(da, db, dc.get(), dd.get(), 31);
  EXPECT_NE(cudaDeviceSynchronize(), cudaSuccess);
  CUDA_CHECK(cudaDeviceReset());
}

TEST_F(Emulator, MmaPairNeedsAFourByteAlignedAddress) {
  DevBf16 a(std::vector<float>{1.f, 2.f, 3.f, 4.f});
  Dev<uint32_t> out(1);
  SUBDP_LAUNCH(1, 1, 0, stream, pair_kernel)(a.get() + 2, out.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(out.download()[0], 0x40804040u);  // bf16 3 (0x4040) low, 4 (0x4080) high
  SUBDP_LAUNCH(1, 1, 0, stream, pair_kernel)(a.get() + 1, out.get());
  const cudaError_t st = cudaDeviceSynchronize();
  EXPECT_EQ(st, cudaErrorMisalignedAddress);
  EXPECT_NE(std::string(cudaGetErrorString(st)).find("not 4-byte aligned"), std::string::npos);
  CUDA_CHECK(cudaDeviceReset());
}

}  // namespace
}  // namespace subdp::gpu_test
#endif
