// Row softmax and the fused softmax cross-entropy (forward and backward in one pass): twins
// of kernels/cpu/softmax.cpp.
// One block per row; max and sum are block reductions in a fixed tree (deterministic).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::block_max;
using detail::block_sum;
using detail::from_f;
using detail::to_f;

constexpr int kRowThreads = 256;

template <class T>
__global__ void softmax_rows_kernel(T* x, int V) {
  __shared__ float shared[32];
  T* p = x + static_cast<int64_t>(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, to_f(p[i]));
  mx = block_max(mx, shared);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(to_f(p[i]) - mx);
  const float inv = 1.f / block_sum(s, shared);
  for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = from_f<T>(expf(to_f(p[i]) - mx) * inv);
}

/// (value, index) max with ties going to the lower index, as the CPU's first-max argmax.
struct ArgMax {
  float v;
  int i;
};

__device__ __forceinline__ ArgMax better(ArgMax a, ArgMax b) {
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}

__device__ ArgMax block_argmax(ArgMax a, float* sv, int* si) {
  for (int o = 16; o > 0; o >>= 1) {
    ArgMax other{__shfl_xor_sync(0xffffffffu, a.v, o), __shfl_xor_sync(0xffffffffu, a.i, o)};
    a = better(a, other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    sv[warp] = a.v;
    si[warp] = a.i;
  }
  __syncthreads();
  ArgMax r = lane < warps ? ArgMax{sv[lane], si[lane]} : ArgMax{-INFINITY, 0x7fffffff};
  for (int o = 16; o > 0; o >>= 1) {
    ArgMax other{__shfl_xor_sync(0xffffffffu, r.v, o), __shfl_xor_sync(0xffffffffu, r.i, o)};
    r = better(r, other);
  }
  __syncthreads();
  return r;
}

// dlogits: null, separate, or logits itself (every thread reads the target logit first; the
// reductions' barriers then separate every read of the row from the first write). T: float,
// or bf16 logits and dlogits (read as floats, reduced in fp32, gradients rounded once).
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const int32_t* targets, T* dlogits, float* row_loss,
                                     int32_t* row_hit, int V, float scale) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const int64_t r = blockIdx.x;
  const T* l = logits + r * V;
  const int t = targets[r];
  const bool valid = t >= 0 && t < V;
  const float lt = valid ? to_f(l[t]) : 0.f;
  ArgMax a{-INFINITY, 0x7fffffff};
  for (int i = threadIdx.x; i < V; i += blockDim.x) a = better(a, ArgMax{to_f(l[i]), i});
  a = block_argmax(a, sv, si);
  const float mx = a.v;
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(to_f(l[i]) - mx);
  s = block_sum(s, sv);
  if (threadIdx.x == 0) {
    row_loss[r] = valid ? logf(s) - (lt - mx) : NAN;
    if (row_hit) row_hit[r] = valid && a.i == t ? 1 : 0;
  }
  if (!dlogits) return;
  const float inv = 1.f / s;
  T* d = dlogits + r * V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float g = expf(to_f(l[i]) - mx) * inv * scale;
    d[i] = from_f<T>(i == t ? g - scale : g);
  }
}

}  // namespace

void softmax_rows(float* x, int64_t rows, int V, cudaStream_t s) {
  if (rows <= 0 || V <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, softmax_rows_kernel<float>)(x, V);
  CUDA_CHECK_LAUNCH();
}

void softmax_rows(bf16* x, int64_t rows, int V, cudaStream_t s) {
  if (rows <= 0 || V <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, softmax_rows_kernel<bf16>)(x, V);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void cross_entropy_rows(const T* logits, const int32_t* targets, T* dlogits, float* row_loss, int32_t* row_hit,
                        int64_t rows, int V, float scale, cudaStream_t s) {
  if (rows <= 0 || V <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, cross_entropy_kernel<T>)
  (logits, targets, dlogits, row_loss, row_hit, V, scale);
  CUDA_CHECK_LAUNCH();
}

void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, float* row_loss, int32_t* row_hit,
                   int64_t rows, int V, float scale, cudaStream_t s) {
  cross_entropy_rows(logits, targets, dlogits, row_loss, row_hit, rows, V, scale, s);
}

void cross_entropy(const bf16* logits, const int32_t* targets, bf16* dlogits, float* row_loss, int32_t* row_hit,
                   int64_t rows, int V, float scale, cudaStream_t s) {
  cross_entropy_rows(logits, targets, dlogits, row_loss, row_hit, rows, V, scale, s);
}

}  // namespace subdp::cuda
