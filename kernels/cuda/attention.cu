// Causal self-attention: twins of kernels/cpu/attention.cpp. The products are cuBLAS
// strided-batched GEMMs over the H heads of one sequence (heads sit hd columns apart inside
// a qkv row), one call per sequence; the causal softmax and its backward are one warp per
// score row.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::warp_max;
using detail::warp_sum;

constexpr int kWarpsPerBlock = 8;

// Row i of matrix m: softmax over j <= i of scale * scores, zero beyond.
__global__ void causal_softmax_kernel(const float* scores, float* att, int64_t rows, int T, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31, i = static_cast<int>(row % T);
  const float* in = scores + row * T;
  float* out = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, scale * in[j]);
  mx = warp_max(mx);
  float sum = 0.f;
  for (int j = lane; j <= i; j += 32) sum += expf(scale * in[j] - mx);
  const float inv = 1.f / warp_sum(sum);
  for (int j = lane; j < T; j += 32) out[j] = j <= i ? expf(scale * in[j] - mx) * inv : 0.f;
}

__global__ void causal_softmax_backward_kernel(const float* att, const float* datt, float* dscores, int64_t rows, int T,
                                               float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x & 31, i = static_cast<int>(row % T);
  const float* p = att + row * T;
  const float* g = datt + row * T;
  float* d = dscores + row * T;
  float dot = 0.f;
  for (int j = lane; j <= i; j += 32) dot += p[j] * g[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= i ? scale * p[j] * (g[j] - dot) : 0.f;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void attention_softmax_forward(const float* scores, float* att, int64_t mats, int T, float scale, cudaStream_t s) {
  const int64_t rows = mats * T;
  if (rows <= 0) return;
  SUBDP_LAUNCH(row_blocks(rows), kWarpsPerBlock * 32, 0, s, causal_softmax_kernel)(scores, att, rows, T, scale);
  CUDA_CHECK_LAUNCH();
}

void attention_softmax_backward(const float* att, const float* datt, float* dscores, int64_t mats, int T, float scale,
                                cudaStream_t s) {
  const int64_t rows = mats * T;
  if (rows <= 0) return;
  SUBDP_LAUNCH(row_blocks(rows), kWarpsPerBlock * 32, 0, s, causal_softmax_backward_kernel)
  (att, datt, dscores, rows, T, scale);
  CUDA_CHECK_LAUNCH();
}

int64_t attention_workspace_floats(const AttentionShape& s) { return static_cast<int64_t>(s.H) * s.T * s.T; }

void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y, cudaStream_t stream) {
  const int T = s.T, hd = s.hd, H = s.H, C = static_cast<int>(s.width()), ld = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t TT = static_cast<int64_t>(T) * T;
  for (int b = 0; b < s.B; ++b) {
    const float* q = qkv + static_cast<int64_t>(b) * T * ld;  // head h at column h*hd
    float* a = att + static_cast<int64_t>(b) * H * TT;        // (H, T, T)
    // a_h (T, T) = q_h (T, hd) . k_h^T (hd, T) * scale
    sgemm_strided_batched(false, true, T, T, hd, scale, q, ld, hd, q + C, ld, hd, 0.f, a, T, TT, H, stream);
  }
  attention_softmax_forward(att, att, static_cast<int64_t>(s.B) * H, T, 1.f, stream);
  for (int b = 0; b < s.B; ++b) {
    const float* v = qkv + static_cast<int64_t>(b) * T * ld + 2 * C;
    // y_h (T, hd) = a_h (T, T) . v_h (T, hd), row stride C
    sgemm_strided_batched(false, false, T, hd, T, 1.f, att + static_cast<int64_t>(b) * H * TT, T, TT, v, ld, hd, 0.f,
                          y + static_cast<int64_t>(b) * T * C, C, hd, H, stream);
  }
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy, float* dqkv,
                        float* ws, cudaStream_t stream) {
  const int T = s.T, hd = s.hd, H = s.H, C = static_cast<int>(s.width()), ld = 3 * C;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t TT = static_cast<int64_t>(T) * T;
  for (int b = 0; b < s.B; ++b) {
    const int64_t off = static_cast<int64_t>(b) * T * ld;
    const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
    const float* a = att + static_cast<int64_t>(b) * H * TT;  // (H, T, T)
    const float* g = dy + static_cast<int64_t>(b) * T * C;    // (T, H*hd)
    // da_h (T, T) = g_h (T, hd) . v_h^T;  dv_h (T, hd) = a_h^T (T, T) . g_h
    sgemm_strided_batched(false, true, T, T, hd, 1.f, g, C, hd, v, ld, hd, 0.f, ws, T, TT, H, stream);
    sgemm_strided_batched(true, false, T, hd, T, 1.f, a, T, TT, g, C, hd, 0.f, dv, ld, hd, H, stream);
    attention_softmax_backward(a, ws, ws, H, T, 1.f, stream);  // ws: d(scores / scale)
    // dq_h = da_h . k_h * scale;  dk_h = da_h^T . q_h * scale
    sgemm_strided_batched(false, false, T, hd, T, scale, ws, T, TT, k, ld, hd, 0.f, dq, ld, hd, H, stream);
    sgemm_strided_batched(true, false, T, hd, T, scale, ws, T, TT, q, ld, hd, 0.f, dk, ld, hd, H, stream);
  }
}

}  // namespace subdp::cuda
