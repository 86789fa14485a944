// Elementwise kernels and reductions on float32 arrays (OpenMP).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// y = max(x, 0), n elements.
void relu_forward(const float* x, float* y, int64_t n);
/// dx (=|+=) dy * (y > 0); accumulate selects +=. y is relu's output.
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate);
/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
void gelu_forward(const float* x, float* y, int64_t n);
/// y (rows, cols) = gelu of the first cols columns of x (rows, ld), element for element the
/// same arithmetic as gelu_forward (recomputing part of a stored GELU output gives its bits).
void gelu_forward_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, float* y);
/// dx = dy * gelu'(x).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);
/// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6): h = silu(g) * u with
/// silu(g) = g / (1 + exp(-g)), n elements.
void swiglu_forward(const float* g, const float* u, float* h, int64_t n);
/// SwiGLU backward: dg = dh * u * silu'(g), du = dh * silu(g), silu'(g) = s (1 + g (1 - s)),
/// s = sigmoid(g). Written (=); dg may be g and du may be u (each element reads before it writes).
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n);
/// y = a + b.
void add(const float* a, const float* b, float* y, int64_t n);
/// y += alpha * x.
void axpy(float alpha, const float* x, float* y, int64_t n);
/// x *= alpha.
void scale(float* x, float alpha, int64_t n);
/// y = x * alpha (the unpacking of a reduced communication buffer).
void scale_copy(const float* x, float alpha, float* y, int64_t n);
/// y[r * ldy + c] = x[r * ldx + c] * alpha for r < rows, c < cols (strides in floats): a
/// strided run of a communication bucket (a unit's slice across a weight's rows), packed
/// (alpha 1: the bits copied) or unpacked.
void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows, int64_t cols);
/// out (rows, cols) = the first cols columns of x (rows, width).
void copy_columns(const float* x, int64_t rows, int64_t width, int64_t cols, float* out);
/// Sum of x (double accumulator).
double sum(const float* x, int64_t n);
/// Sum of squares of x: eight double accumulators, lane j over i = j (mod 8), added in lane
/// order (a fixed rounding, independent of the build's vector width and of threads).
double sum_squares(const float* x, int64_t n);
/// True when every element is finite.
bool all_finite(const float* x, int64_t n);
/// Elements of x (n floats) that are inf or NaN.
int64_t count_nonfinite(const float* x, int64_t n);
/// y (rows, cols) += bias broadcast over rows: y[r, c] += b[c].
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols);
/// db[c] += sum_r dy[r, c] over the first `cols_used` columns of an (rows, ld) matrix.
void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld);

}  // namespace subdp::cpu
