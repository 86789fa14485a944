// Deterministic reductions (sum, sum of squares, all-finite): twins of the reductions in
// kernels/cpu/elementwise.cpp. Two passes: a grid whose size depends only on n writes one
// double partial per block, then one block adds the partials in a fixed tree order, so a
// given input always gives the same bits (needed for identical clipping factors on every
// rank and bit-exact resume).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::block_sum;
using detail::grid_first;
using detail::grid_stride;
using detail::to_f;

constexpr int kReduceThreads = 512;
constexpr int kReduceBlocks = 1024;  // partials of the first pass (and workspace doubles)

int reduce_blocks(int64_t n) {
  const int64_t b = (n + kReduceThreads * 4 - 1) / (kReduceThreads * 4);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(b, kReduceBlocks)));
}

template <class T, bool Square>
__global__ void partial_sum_kernel(const T* x, int64_t n, double* partials) {
  __shared__ double shared[32];
  double acc = 0;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const double v = to_f(x[i]);
    acc += Square ? v * v : v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void final_sum_kernel(const double* partials, int count, double* out) {
  __shared__ double shared[32];
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = acc;
}

template <class T, bool Square>
void reduce(const T* x, int64_t n, double* out, double* ws, cudaStream_t s) {
  const int blocks = reduce_blocks(n);
  SUBDP_LAUNCH(blocks, kReduceThreads, 0, s, partial_sum_kernel<T, Square>)(x, n, ws);
  CUDA_CHECK_LAUNCH();
  SUBDP_LAUNCH(1, kReduceThreads, 0, s, final_sum_kernel)(ws, blocks, out);
  CUDA_CHECK_LAUNCH();
}

// One block per span, the loop and tree of partial_sum_kernel with a grid of one block; its
// final pass adds zeros to that one partial, which leaves the bits as they are.
__global__ void square_span_kernel(const SquareSpan* spans, double* out) {
  __shared__ double shared[32];
  const SquareSpan span = spans[blockIdx.x];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < span.n; i += blockDim.x) {
    const double v = span.x[i];
    acc += v * v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) out[span.slot] = acc;
}

__global__ void set_int_kernel(int* out, int v) { *out = v; }

// Every thread that meets a non-finite value stores 0: racing stores of one value are benign.
template <class T>
__global__ void finite_kernel(const T* x, int64_t n, int* out) {
  bool bad = false;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) bad |= !isfinite(to_f(x[i]));
  if (__syncthreads_or(bad) && threadIdx.x == 0) *out = 0;
}

template <class T>
void finite(const T* x, int64_t n, int* out, cudaStream_t s) {
  SUBDP_LAUNCH(1, 1, 0, s, set_int_kernel)(out, 1);
  CUDA_CHECK_LAUNCH();
  if (n <= 0) return;
  SUBDP_LAUNCH(reduce_blocks(n), kReduceThreads, 0, s, finite_kernel<T>)(x, n, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t reduce_workspace_doubles() { return kReduceBlocks; }
int64_t batch_span_max_floats() { return kReduceThreads * 4; }  // reduce_blocks(n) == 1

void sum_squares_batch(const SquareSpan* spans, int count, double* out, cudaStream_t s) {
  if (count <= 0) return;
  SUBDP_LAUNCH(count, kReduceThreads, 0, s, square_span_kernel)(spans, out);
  CUDA_CHECK_LAUNCH();
}

void sum(const float* x, int64_t n, double* out, double* ws, cudaStream_t s) { reduce<float, false>(x, n, out, ws, s); }
void sum(const bf16* x, int64_t n, double* out, double* ws, cudaStream_t s) { reduce<bf16, false>(x, n, out, ws, s); }
void sum_squares(const float* x, int64_t n, double* out, double* ws, cudaStream_t s) {
  reduce<float, true>(x, n, out, ws, s);
}
void sum_squares(const bf16* x, int64_t n, double* out, double* ws, cudaStream_t s) {
  reduce<bf16, true>(x, n, out, ws, s);
}
void all_finite(const float* x, int64_t n, int* out, cudaStream_t s) { finite(x, n, out, s); }
void all_finite(const bf16* x, int64_t n, int* out, cudaStream_t s) { finite(x, n, out, s); }

}  // namespace subdp::cuda
