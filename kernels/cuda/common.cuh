// Device-side helpers shared by the .cu files of kernels/cuda: launch geometry, float <->
// bf16 conversion for templated kernels, and deterministic warp / block reductions (a fixed
// shuffle tree for a fixed block size, so a result never depends on scheduling).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.cuh"

namespace subdp::cuda::detail {

constexpr int kThreads = 256;         // threads per block of the elementwise kernels
constexpr int64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

/// Blocks for n elements, one per thread, capped (kernels use grid-stride loops).
inline int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min(b, kMaxBlocks)));
}

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

/// Grid-stride index range: for (int64_t i = first(); i < n; i += stride()).
__device__ __forceinline__ int64_t grid_first() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
/// result. `shared` holds 32 values; the call ends with a barrier so it can be reused.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : T(0);
  r = warp_sum(r);
  __syncthreads();
  return r;
}

/// Max over the block, like block_sum.
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : -INFINITY;
  r = warp_max(r);
  __syncthreads();
  return r;
}

}  // namespace subdp::cuda::detail
