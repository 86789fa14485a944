// SGD (momentum, Nesterov, weight decay) and AdamW updates: the formulas of
// engine/optim/optimizer.cpp (torch.optim semantics), float32. Either on one contiguous run
// of a parameter (value, gradient and state pointers), or multi-tensor: every chunk of a
// table in one launch, counting the non-finite values written into a device counter, with
// per element the same arithmetic (the same bits) as the one-run kernels.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;

/// SGD on element k; returns how many of the values it wrote are not finite.
__device__ __forceinline__ unsigned sgd_element(float* w, const float* g, float* buf, int64_t k, float lr, float mu,
                                                float wd, bool nesterov, bool first) {
  float d = g[k] + wd * w[k];
  unsigned bad = 0;
  if (buf) {
    const float b = first ? d : mu * buf[k] + d;
    buf[k] = b;
    bad += !isfinite(b);
    d = nesterov ? d + mu * b : b;
  }
  w[k] -= lr * d;
  return bad + !isfinite(w[k]);
}

struct AdamScalars {
  float b1, b2, bc2_sqrt, step_size, decay, eps;
};

/// AdamW on element k; returns how many of the values it wrote are not finite.
__device__ __forceinline__ unsigned adamw_element(float* w, const float* g, float* m, float* v, int64_t k,
                                                  const AdamScalars& a) {
  const float gk = g[k];
  const float mk = a.b1 * m[k] + (1.f - a.b1) * gk;
  const float vk = a.b2 * v[k] + (1.f - a.b2) * gk * gk;
  m[k] = mk;
  v[k] = vk;
  const float denom = sqrtf(vk) / a.bc2_sqrt + a.eps;
  w[k] = w[k] * a.decay - a.step_size * mk / denom;
  return !isfinite(mk) + !isfinite(vk) + !isfinite(w[k]);
}

/// Adds each warp's count to *count (one atomic per warp; integer sums commute, so the total
/// does not depend on the order). Every thread of the block must call it.
__device__ void add_count(unsigned bad, unsigned long long* count) {
  const unsigned long long total = detail::warp_sum(static_cast<unsigned long long>(bad));
  if ((threadIdx.x & 31) == 0 && total != 0) atomicAdd(count, total);
}

__global__ void sgd_kernel(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd, bool nesterov,
                           bool first) {
  for (int64_t k = grid_first(); k < n; k += grid_stride()) sgd_element(w, g, buf, k, lr, mu, wd, nesterov, first);
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, int64_t n, AdamScalars a) {
  for (int64_t k = grid_first(); k < n; k += grid_stride()) adamw_element(w, g, m, v, k, a);
}

// Multi-tensor: block b takes chunks b, b + gridDim.x, ...; its threads stride the chunk.
__global__ void sgd_chunks_kernel(const UpdateRun* chunks, int64_t count, float lr, float mu, float wd, bool nesterov,
                                  bool first, unsigned long long* nonfinite) {
  unsigned bad = 0;
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const UpdateRun r = chunks[c];
    for (int64_t k = threadIdx.x; k < r.n; k += blockDim.x)
      bad += sgd_element(r.w, r.g, r.s0, k, lr, mu, wd, nesterov, first);
  }
  add_count(bad, nonfinite);
}

__global__ void adamw_chunks_kernel(const UpdateRun* chunks, int64_t count, AdamScalars a,
                                    unsigned long long* nonfinite) {
  unsigned bad = 0;
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const UpdateRun r = chunks[c];
    for (int64_t k = threadIdx.x; k < r.n; k += blockDim.x) bad += adamw_element(r.w, r.g, r.s0, r.s1, k, a);
  }
  add_count(bad, nonfinite);
}

unsigned chunk_blocks(int64_t count) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(count, detail::kMaxBlocks)));
}

}  // namespace

int64_t update_chunk_floats() { return 32768; }

void sgd_update_chunks(const UpdateRun* chunks, int64_t count, float lr, float momentum, float weight_decay,
                       bool nesterov, bool first, unsigned long long* nonfinite, cudaStream_t s) {
  if (count <= 0) return;
  SUBDP_LAUNCH(chunk_blocks(count), kThreads, 0, s, sgd_chunks_kernel)
  (chunks, count, lr, momentum, weight_decay, nesterov, first, nonfinite);
  CUDA_CHECK_LAUNCH();
}

void adamw_update_chunks(const UpdateRun* chunks, int64_t count, float step_size, float bc2_sqrt, float decay,
                         float eps, float beta1, float beta2, unsigned long long* nonfinite, cudaStream_t s) {
  if (count <= 0) return;
  SUBDP_LAUNCH(chunk_blocks(count), kThreads, 0, s, adamw_chunks_kernel)
  (chunks, count, AdamScalars{beta1, beta2, bc2_sqrt, step_size, decay, eps}, nonfinite);
  CUDA_CHECK_LAUNCH();
}

void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float weight_decay,
                bool nesterov, bool first, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, sgd_kernel)(w, g, buf, n, lr, momentum, weight_decay, nesterov, first);
  CUDA_CHECK_LAUNCH();
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t t, cudaStream_t s) {
  if (n <= 0) return;
  // Scalars exactly as engine/optim/optimizer.cpp computes them (double, then rounded to float).
  const float bc1 = static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
  const float step_size = static_cast<float>(lr) / bc1;
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  adamw_update_scaled(w, g, m, v, n, step_size, bc2_sqrt, decay, static_cast<float>(eps), static_cast<float>(beta1),
                      static_cast<float>(beta2), s);
}

void adamw_update_scaled(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float bc2_sqrt,
                         float decay, float eps, float beta1, float beta2, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, adamw_kernel)
  (w, g, m, v, n, AdamScalars{beta1, beta2, bc2_sqrt, step_size, decay, eps});
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
