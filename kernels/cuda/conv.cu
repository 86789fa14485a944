// conv2d as im2col + cuBLAS GEMM, and global average pooling: twins of kernels/cpu/conv.cpp.
// Layout NCHW, float32. Samples go through in chunks: one im2col pass and one strided-batched
// GEMM per chunk for y and dx; for dw the chunk's columns and dy are laid side by side, so one
// GEMM sums over the chunk's samples (K = chunk * Ho*Wo) instead of one GEMM per sample. The
// workspace is chunk * (Cin*k*k + Cout) * (Ho*Wo) floats. col2im gathers each input pixel's
// contributions in (kh, kw) order, as the CPU adds them: no atomics.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;

/// Plain-data copy of ConvShape for kernel arguments.
struct Geo {
  int Cin, H, W, k, stride, pad, Ho, Wo;
};

Geo geo(const ConvShape& s) { return {s.Cin, s.H, s.W, s.k, s.stride, s.pad, s.Ho(), s.Wo()}; }

// cols (n, Cin*k*k, Ho*Wo): element (sample, c*kk + kh*k + kw, oh*Wo + ow).
__global__ void im2col_kernel(Geo g, const float* x, float* cols, int64_t total) {
  const int P = g.Ho * g.Wo, kk = g.k * g.k;
  for (int64_t i = grid_first(); i < total; i += grid_stride()) {
    const int p = static_cast<int>(i % P);
    const int64_t row = i / P;  // sample * Cin*kk + c*kk + ki
    const int ki = static_cast<int>(row % kk);
    const int64_t img = row / kk;  // sample * Cin + c
    const int ih = (p / g.Wo) * g.stride - g.pad + ki / g.k;
    const int iw = (p % g.Wo) * g.stride - g.pad + ki % g.k;
    const bool inside = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
    cols[i] = inside ? x[(img * g.H + ih) * g.W + iw] : 0.f;
  }
}

// cols (rows, n, Ho*Wo), the first `rows` rows of im2col with the n samples side by side:
// element (c*kk + kh*k + kw, sample, oh*Wo + ow).
__global__ void im2col_side_by_side_kernel(Geo g, const float* x, float* cols, int n, int64_t total) {
  const int P = g.Ho * g.Wo, kk = g.k * g.k;
  for (int64_t i = grid_first(); i < total; i += grid_stride()) {
    const int p = static_cast<int>(i % P);
    const int64_t t = i / P;
    const int sample = static_cast<int>(t % n);
    const int64_t row = t / n;  // c*kk + ki
    const int ki = static_cast<int>(row % kk);
    const int64_t img = static_cast<int64_t>(sample) * g.Cin + row / kk;
    const int ih = (p / g.Wo) * g.stride - g.pad + ki / g.k;
    const int iw = (p % g.Wo) * g.stride - g.pad + ki % g.k;
    const bool inside = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
    cols[i] = inside ? x[(img * g.H + ih) * g.W + iw] : 0.f;
  }
}

// dst (rows, n, P) = src (n, R, P) for rows r < rows: the samples side by side.
__global__ void side_by_side_kernel(const float* src, float* dst, int n, int64_t R, int P, int64_t total) {
  for (int64_t i = grid_first(); i < total; i += grid_stride()) {
    const int p = static_cast<int>(i % P);
    const int64_t t = i / P;
    const int64_t sample = t % n, r = t / n;
    dst[i] = src[(sample * R + r) * P + p];
  }
}

// dx (n, Cin, H, W): each pixel sums the columns that read it, kernel offsets in order.
__global__ void col2im_kernel(Geo g, const float* cols, float* dx, int64_t total) {
  const int P = g.Ho * g.Wo, kk = g.k * g.k;
  for (int64_t i = grid_first(); i < total; i += grid_stride()) {
    const int iw = static_cast<int>(i % g.W);
    const int ih = static_cast<int>((i / g.W) % g.H);
    const int64_t img = i / (static_cast<int64_t>(g.W) * g.H);  // sample * Cin + c
    const float* base = cols + img * kk * P;
    float acc = 0.f;
    for (int kh = 0; kh < g.k; ++kh) {
      const int th = ih + g.pad - kh;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.Ho) continue;
      for (int kw = 0; kw < g.k; ++kw) {
        const int tw = iw + g.pad - kw;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.Wo) continue;
        acc += base[static_cast<int64_t>(kh * g.k + kw) * P + (th / g.stride) * g.Wo + tw / g.stride];
      }
    }
    dx[i] = acc;
  }
}

// One warp per (sample, channel) plane.
__global__ void avg_pool_forward_kernel(const float* x, float* y, int64_t planes, int HW) {
  const int64_t plane = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (plane >= planes) return;
  const int lane = threadIdx.x & 31;
  float acc = 0.f;
  for (int p = lane; p < HW; p += 32) acc += x[plane * HW + p];
  acc = detail::warp_sum(acc);
  if (lane == 0) y[plane] = acc / HW;
}

__global__ void avg_pool_backward_kernel(const float* dy, float* dx, int64_t total, int HW) {
  for (int64_t i = grid_first(); i < total; i += grid_stride()) dx[i] = dy[i / HW] / HW;
}

bool is_direct(const ConvShape& s) { return s.k == 1 && s.stride == 1 && s.pad == 0; }

/// dst (rows, n, P) = src (n, R, P) for rows r < rows.
void side_by_side(const float* src, float* dst, int n, int64_t R, int64_t rows, int P, cudaStream_t stream) {
  const int64_t total = rows * n * P;
  if (total <= 0) return;
  SUBDP_LAUNCH(blocks_for(total), kThreads, 0, stream, side_by_side_kernel)(src, dst, n, R, P, total);
  CUDA_CHECK_LAUNCH();
}

/// dw (dw_cout, dw_cin*kk) += dy[:dw_cout] . cols[:dw_cin*kk]^T summed over the n samples of
/// x (n, Cin, H, W) and dy (n, Cout, P) in one GEMM: both laid out with the samples side by
/// side in ws ((dw_cin*kk + dw_cout) * n * P floats).
void weight_grad(const ConvShape& s, const float* x, const float* dy, float* dw, int dw_cout, int dw_cin, int n,
                 float* ws, cudaStream_t stream) {
  const int P = s.Ho() * s.Wo(), kk = s.k * s.k;
  const int64_t rows = static_cast<int64_t>(dw_cin) * kk, K = static_cast<int64_t>(n) * P;
  float* cols = ws;            // (dw_cin*kk, n, P)
  float* dys = ws + rows * K;  // (dw_cout, n, P)
  if (is_direct(s)) {
    side_by_side(x, cols, n, s.Cin, dw_cin, P, stream);  // 1x1 stride 1: x is its own im2col
  } else if (rows * K > 0) {
    SUBDP_LAUNCH(blocks_for(rows * K), kThreads, 0, stream, im2col_side_by_side_kernel)(geo(s), x, cols, n, rows * K);
    CUDA_CHECK_LAUNCH();
  }
  side_by_side(dy, dys, n, s.Cout, dw_cout, P, stream);
  sgemm(false, true, dw_cout, static_cast<int>(rows), static_cast<int>(K), 1.f, dys, static_cast<int>(K), cols,
        static_cast<int>(K), 1.f, dw, static_cast<int>(rows), stream);
}

}  // namespace

void im2col(const ConvShape& s, const float* x, float* cols, int n, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * s.Cin * s.k * s.k * s.Ho() * s.Wo();
  if (total <= 0) return;
  SUBDP_LAUNCH(blocks_for(total), kThreads, 0, stream, im2col_kernel)(geo(s), x, cols, total);
  CUDA_CHECK_LAUNCH();
}

void col2im(const ConvShape& s, const float* cols, float* dx, int n, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * s.Cin * s.H * s.W;
  if (total <= 0) return;
  SUBDP_LAUNCH(blocks_for(total), kThreads, 0, stream, col2im_kernel)(geo(s), cols, dx, total);
  CUDA_CHECK_LAUNCH();
}

int64_t conv2d_workspace_floats(const ConvShape& s, int chunk) {
  return static_cast<int64_t>(std::max(chunk, 1)) * (s.Cin * s.k * s.k + s.Cout) * s.Ho() * s.Wo();
}

void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws, int chunk,
                    cudaStream_t stream) {
  const int P = s.Ho() * s.Wo(), CK = s.Cin * s.k * s.k;
  const int64_t in_size = static_cast<int64_t>(s.Cin) * s.H * s.W;
  const int64_t out_size = static_cast<int64_t>(s.Cout) * P, cols_size = static_cast<int64_t>(CK) * P;
  chunk = std::max(chunk, 1);
  for (int n0 = 0; n0 < s.N; n0 += chunk) {
    const int nc = std::min(chunk, s.N - n0);
    const float* xn = x + n0 * in_size;
    const float* cols = xn;  // 1x1 stride 1: x is its own im2col
    if (!is_direct(s)) {
      im2col(s, xn, ws, nc, stream);
      cols = ws;
    }
    // y_n (Cout, P) = w (Cout, CK) . cols_n (CK, P), w shared by the batch
    sgemm_strided_batched(false, false, s.Cout, P, CK, 1.f, w, CK, 0, cols, P, is_direct(s) ? in_size : cols_size, 0.f,
                          y + n0 * out_size, P, out_size, nc, stream);
  }
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int dw_cout, int dw_cin, float* ws, int chunk, cudaStream_t stream) {
  const int P = s.Ho() * s.Wo(), kk = s.k * s.k, CK = s.Cin * kk;
  const int64_t in_size = static_cast<int64_t>(s.Cin) * s.H * s.W;
  const int64_t out_size = static_cast<int64_t>(s.Cout) * P, cols_size = static_cast<int64_t>(CK) * P;
  const bool want_dw = dw && dw_cout > 0 && dw_cin > 0, direct = is_direct(s);
  chunk = std::max(chunk, 1);
  for (int n0 = 0; n0 < s.N; n0 += chunk) {
    const int nc = std::min(chunk, s.N - n0);
    const float* xn = x + n0 * in_size;
    const float* dyn = dy + n0 * out_size;  // (nc, Cout, P)
    if (want_dw) weight_grad(s, xn, dyn, dw, dw_cout, dw_cin, nc, ws, stream);
    if (dx) {
      float* dxn = dx + n0 * in_size;
      // dcols_n (CK, P) = w^T (CK, Cout) . dy_n (Cout, P)
      sgemm_strided_batched(true, false, CK, P, s.Cout, 1.f, w, CK, 0, dyn, P, out_size, 0.f, direct ? dxn : ws, P,
                            direct ? in_size : cols_size, nc, stream);
      if (!direct) col2im(s, ws, dxn, nc, stream);
    }
  }
}

void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW, cudaStream_t stream) {
  const int64_t planes = static_cast<int64_t>(N) * C;
  if (planes <= 0) return;
  constexpr int kWarps = 8;
  SUBDP_LAUNCH(static_cast<unsigned>((planes + kWarps - 1) / kWarps), kWarps * 32, 0, stream, avg_pool_forward_kernel)
  (x, y, planes, HW);
  CUDA_CHECK_LAUNCH();
}

void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * C * HW;
  if (total <= 0) return;
  SUBDP_LAUNCH(blocks_for(total), kThreads, 0, stream, avg_pool_backward_kernel)(dy, dx, total, HW);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
