// Rotary position embeddings: the CUDA twin of kernels/cpu/rope.cpp, one thread per rotated
// pair (row, head, i) in a grid-stride loop; the same arithmetic per pair as the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;

__global__ void rope_rotate_kernel(float* x, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                                   float sign, int64_t pairs) {
  const int half = hd / 2;
  for (int64_t k = grid_first(); k < pairs; k += grid_stride()) {
    const int i = static_cast<int>(k % half);
    const int64_t rh = k / half;
    const int h = static_cast<int>(rh % heads);
    const int64_t r = rh / heads;
    float* p = x + r * ld + static_cast<int64_t>(h) * hd;
    const int64_t t = (r % T) * half + i;
    const float a = p[i], b = p[i + half], c = cos[t], si = sign * sin[t];
    p[i] = a * c - b * si;
    p[i + half] = b * c + a * si;
  }
}

}  // namespace

void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                 bool inverse, cudaStream_t s) {
  const int64_t pairs = rows * heads * (hd / 2);
  if (pairs <= 0) return;
  SUBDP_LAUNCH(blocks_for(pairs), kThreads, 0, s, rope_rotate_kernel)
  (x, T, ld, heads, hd, cos, sin, inverse ? -1.f : 1.f, pairs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
