// Elementwise kernels (OpenMP parallel loops).
#include "kernels/cpu/elementwise.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/fast_math.h"

namespace subdp::cpu {

namespace {
// Floats below which a copy runs serially without entering libgomp: an OpenMP `if` clause
// still allocates and frees a team (about 1 us a call), and gradient buckets copy neuron
// slices of a single float millions of times a step.
constexpr int64_t kParallelCopyMin = 1 << 16;
}  // namespace

void relu_forward(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate) {
  if (accumulate) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] += y[i] > 0.f ? dy[i] : 0.f;
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
  }
}

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
inline float gelu(float v) { return 0.5f * v * (1.f + tanh_approx(kGeluC * (v + 0.044715f * v * v * v))); }
}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

void gelu_forward_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    float* yr = y + r * cols;
#pragma omp simd
    for (int64_t i = 0; i < cols; ++i) yr[i] = gelu(xr[i]);
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    float t = tanh_approx(u);
    float sech2 = 1.f - t * t;
    float grad = 0.5f * (1.f + t) + 0.5f * v * sech2 * kGeluC * (1.f + 3.f * 0.044715f * v * v);
    dx[i] = dy[i] * grad;
  }
}

namespace {
// exp_approx, not std::exp: the libm call kept the loops scalar (SwiGLU was ~10 % of a LLaMA
// step on 1 thread, its forward alone 8 %).
inline float sigmoid(float g) { return 1.f / (1.f + exp_approx(-g)); }
}  // namespace

void swiglu_forward(const float* g, const float* u, float* h, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], ui = u[i], d = dh[i], s = sigmoid(gi);
    dg[i] = d * ui * (s * (1.f + gi * (1.f - s)));
    du[i] = d * (gi * s);
  }
}

void add(const float* a, const float* b, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void scale(float* x, float alpha, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void scale_copy(const float* x, float alpha, float* y, int64_t n) {
  if (n < kParallelCopyMin) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * alpha;
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * alpha;
}

void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows, int64_t cols) {
  auto row = [=](int64_t r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    if (alpha == 1.f) {
      std::memcpy(yr, xr, sizeof(float) * cols);
      return;
    }
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * alpha;
  };
  if (rows * cols < kParallelCopyMin) {
    for (int64_t r = 0; r < rows; ++r) row(r);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) row(r);
}

void copy_columns(const float* x, int64_t rows, int64_t width, int64_t cols, float* out) {
  scale_copy_rows(x, width, 1.f, out, cols, rows, cols);
}

// Reductions run serially: an OpenMP reduction combines partial sums in an
// unspecified order, which would break bit-exact resume and invariant 1.
double sum(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

double sum_squares(const float* x, int64_t n) {
  // Eight running sums, lane j over the elements i = j (mod 8), added in lane order at the
  // end: the source fixes every rounding (nothing left for the compiler to reorder), and GCC
  // keeps the lanes in one vector register. One serial sum waited on each add's latency (about
  // 1 % of a 1-thread GPT step, clipping's gradient norm).
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  const int64_t whole = n / kLanes * kLanes;
  for (int64_t i = 0; i < whole; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (int64_t i = whole; i < n; ++i) lane[i - whole] += static_cast<double>(x[i]) * x[i];
  double s = 0;
  for (double l : lane) s += l;
  return s;
}

int64_t count_nonfinite(const float* x, int64_t n) {
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(x[i]) ? 0 : 1;
  return bad;
}

bool all_finite(const float* x, int64_t n) { return count_nonfinite(x, n) == 0; }

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += b[c];
}

void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld) {
  // Column sums in a fixed order (row by row) so results do not depend on thread count.
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < cols_used; ++c) db[c] += row[c];
  }
}

}  // namespace subdp::cpu
