// Elementwise kernels (float32 and bf16 storage, float arithmetic) and the bias kernels:
// CUDA twins of kernels/cpu/elementwise.cpp. Grid-stride loops, one element per step.
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::from_f;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;
using detail::to_f;

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const float v = to_f(x[i]);
    y[i] = from_f<T>(v > 0.f ? v : 0.f);
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, int64_t n, bool accumulate) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const float g = to_f(y[i]) > 0.f ? to_f(dy[i]) : 0.f;
    dx[i] = from_f<T>(accumulate ? to_f(dx[i]) + g : g);
  }
}

__device__ __forceinline__ float gelu(float v) {
  return 0.5f * v * (1.f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
}

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<T>(gelu(to_f(x[i])));
}

/// Where element i of a (rows, cols) result sits in its (rows, ld) source.
__device__ __forceinline__ int64_t source_of(int64_t i, int64_t ld, int64_t cols) { return i / cols * ld + i % cols; }

/// y (rows, cols) = bf16(x[:, :cols]), x (rows, ld) floats.
__global__ void to_bf16_columns_kernel(const float* x, int64_t rows, int64_t ld, int64_t cols, bf16* y) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<bf16>(x[source_of(i, ld, cols)]);
}

/// y (rows, cols) = gelu(x[:, :cols]), x (rows, ld) bf16.
__global__ void gelu_columns_kernel(const bf16* x, int64_t rows, int64_t ld, int64_t cols, float* y) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = gelu(to_f(x[source_of(i, ld, cols)]));
}

/// kept = bf16(x); x = float(kept) in place.
__global__ void round_keep_bf16_kernel(float* x, bf16* kept, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const bf16 p = from_f<bf16>(x[i]);
    kept[i] = p;
    x[i] = to_f(p);
  }
}

/// kept = bf16(x); x = gelu(kept) in place: the forward reads the value the backward will.
__global__ void gelu_keep_bf16_kernel(float* x, bf16* kept, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const bf16 p = from_f<bf16>(x[i]);
    kept[i] = p;
    x[i] = gelu(to_f(p));
  }
}

/// dx = dy * gelu'(x); X and T the storage of x and of dy / dx (dx may be dy).
template <class X, class T>
__global__ void gelu_backward_kernel(const X* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const float v = to_f(x[i]);
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float sech2 = 1.f - t * t;
    const float grad = 0.5f * (1.f + t) + 0.5f * v * sech2 * kGeluC * (1.f + 3.f * 0.044715f * v * v);
    dx[i] = from_f<T>(to_f(dy[i]) * grad);
  }
}

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

/// h = silu(g) * u; G the storage of g and u.
template <class G>
__global__ void swiglu_forward_kernel(const G* g, const G* u, float* h, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const float gi = to_f(g[i]);
    h[i] = gi * sigmoid(gi) * to_f(u[i]);
  }
}

/// u_kept = bf16(u); u = silu(g) * u_kept in place (h over u), g already bf16.
__global__ void swiglu_keep_bf16_kernel(const bf16* g, float* u, bf16* u_kept, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const bf16 p = from_f<bf16>(u[i]);
    u_kept[i] = p;
    const float gi = to_f(g[i]);
    u[i] = gi * sigmoid(gi) * to_f(p);
  }
}

/// Each element reads g, u and dh before writing dg and du, so dg may be g or dh and du u.
template <class G>
__global__ void swiglu_backward_kernel(const G* g, const G* u, const float* dh, float* dg, float* du, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const float gi = to_f(g[i]), ui = to_f(u[i]), d = dh[i], s = sigmoid(gi);
    dg[i] = d * ui * (s * (1.f + gi * (1.f - s)));
    du[i] = d * (gi * s);
  }
}

template <class T>
__global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <class T>
__global__ void axpy_kernel(float alpha, const T* x, T* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<T>(to_f(y[i]) + alpha * to_f(x[i]));
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) x[i] = from_f<T>(to_f(x[i]) * alpha);
}

template <class S, class D>
__global__ void convert_kernel(const S* x, D* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<D>(to_f(x[i]));
}

template <class T>
__global__ void add_bias_rows_kernel(T* y, const float* b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = from_f<T>(to_f(y[i]) + b[i % cols]);
}

/// The bias gradient term of (row r, column c): dy[r, c] (no second sum).
struct BiasGradTerm {
  const float* dy;
  int64_t ld;
  __device__ detail::Pair operator()(int64_t r, int64_t c) const { return {dy[r * ld + c], 0.f}; }
};

}  // namespace

// One grid-stride launch over n elements (nothing when n <= 0).
#define LAUNCH_ELEMENTWISE(kernel, n, stream, ...)                         \
  do {                                                                     \
    if ((n) <= 0) return;                                                  \
    SUBDP_LAUNCH(blocks_for(n), kThreads, 0, stream, kernel)(__VA_ARGS__); \
    CUDA_CHECK_LAUNCH();                                                   \
  } while (0)

void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(relu_forward_kernel<float>, n, s, x, y, n);
}
void relu_forward(const bf16* x, bf16* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(relu_forward_kernel<bf16>, n, s, x, y, n);
}
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool acc, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(relu_backward_kernel<float>, n, s, y, dy, dx, n, acc);
}
void relu_backward(const bf16* y, const bf16* dy, bf16* dx, int64_t n, bool acc, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(relu_backward_kernel<bf16>, n, s, y, dy, dx, n, acc);
}
void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(gelu_forward_kernel<float>, n, s, x, y, n);
}
void gelu_forward(const bf16* x, bf16* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(gelu_forward_kernel<bf16>, n, s, x, y, n);
}
void gelu_forward_columns(const bf16* x, int64_t rows, int64_t ld, int64_t cols, float* y, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(gelu_columns_kernel, rows * cols, s, x, rows, ld, cols, y);
}
void to_bf16_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, bf16* y, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(to_bf16_columns_kernel, rows * cols, s, x, rows, ld, cols, y);
}
void round_keep_bf16(float* x, bf16* kept, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(round_keep_bf16_kernel, n, s, x, kept, n);
}
void gelu_keep_bf16(float* x, bf16* kept, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(gelu_keep_bf16_kernel, n, s, x, kept, n);
}
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE((gelu_backward_kernel<float, float>), n, s, x, dy, dx, n);
}
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE((gelu_backward_kernel<bf16, bf16>), n, s, x, dy, dx, n);
}
void gelu_backward(const bf16* x, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE((gelu_backward_kernel<bf16, float>), n, s, x, dy, dx, n);
}
void swiglu_forward(const float* g, const float* u, float* h, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(swiglu_forward_kernel<float>, n, s, g, u, h, n);
}
void swiglu_forward(const bf16* g, const bf16* u, float* h, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(swiglu_forward_kernel<bf16>, n, s, g, u, h, n);
}
void swiglu_keep_bf16(const bf16* g, float* u, bf16* u_kept, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(swiglu_keep_bf16_kernel, n, s, g, u, u_kept, n);
}
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(swiglu_backward_kernel<float>, n, s, g, u, dh, dg, du, n);
}
void swiglu_backward(const bf16* g, const bf16* u, const float* dh, float* dg, float* du, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(swiglu_backward_kernel<bf16>, n, s, g, u, dh, dg, du, n);
}
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(add_kernel<float>, n, s, a, b, y, n);
}
void add(const bf16* a, const bf16* b, bf16* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(add_kernel<bf16>, n, s, a, b, y, n);
}
void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(axpy_kernel<float>, n, s, alpha, x, y, n);
}
void axpy(float alpha, const bf16* x, bf16* y, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(axpy_kernel<bf16>, n, s, alpha, x, y, n);
}
void scale(float* x, float alpha, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(scale_kernel<float>, n, s, x, alpha, n);
}
void scale(bf16* x, float alpha, int64_t n, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(scale_kernel<bf16>, n, s, x, alpha, n);
}
void to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, convert_kernel<float, bf16>)(x, y, n);
  CUDA_CHECK_LAUNCH();
}
void to_f32(const bf16* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, convert_kernel<bf16, float>)(x, y, n);
  CUDA_CHECK_LAUNCH();
}
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(add_bias_rows_kernel<float>, rows * cols, s, y, b, rows, cols);
}
void add_bias_rows(bf16* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
  LAUNCH_ELEMENTWISE(add_bias_rows_kernel<bf16>, rows * cols, s, y, b, rows, cols);
}

#undef LAUNCH_ELEMENTWISE

void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld, float* ws,
                    cudaStream_t s) {
  detail::column_sums(BiasGradTerm{dy, ld}, rows, cols_used, db, nullptr, ws, s);
}

}  // namespace subdp::cuda
