// conv2d via per-sample im2col + GEMM (small_sgemm) over OpenMP threads, and pooling kernels.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "kernels/cpu/conv_channels_last.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/winograd.h"

namespace subdp::cpu {

namespace {

// Valid output columns [lo, hi) of a kernel column offset kw: those whose input column
// ow*stride - pad + kw lies inside [0, W).
inline void valid_range(int W, int Wo, int stride, int pad, int kw, int& lo, int& hi) {
  lo = 0;
  while (lo < Wo && lo * stride - pad + kw < 0) ++lo;
  hi = Wo;
  while (hi > lo && (hi - 1) * stride - pad + kw >= W) --hi;
}

// o[i] = src[2 * i] for i < n: a stride-2 row of im2col. With the pointers restrict and the
// loop marked simd, GCC vectorises it as two loads and a permute per vector (scalar loads
// otherwise: most of im2col's time in the ResNet's stride-2 convolutions).
inline void gather_even(const float* __restrict src, float* __restrict o, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) o[i] = src[2 * i];
}

// One (channel, kernel offset) row of im2col for one image: out (Ho*Wo) from img (H, W).
// Rows are copied in runs (memcpy for stride 1) and only the padding is zero-filled.
inline void im2col_row(const ConvShape& s, const float* img, int kh, int kw, float* out) {
  const int Ho = s.Ho(), Wo = s.Wo();
  int lo, hi;
  valid_range(s.W, Wo, s.stride, s.pad, kw, lo, hi);
  for (int oh = 0; oh < Ho; ++oh) {
    float* o = out + oh * Wo;
    const int ih = oh * s.stride - s.pad + kh;
    if (ih < 0 || ih >= s.H || lo >= hi) {
      std::memset(o, 0, sizeof(float) * Wo);
      continue;
    }
    for (int ow = 0; ow < lo; ++ow) o[ow] = 0.f;
    for (int ow = hi; ow < Wo; ++ow) o[ow] = 0.f;
    const float* src = img + ih * s.W - s.pad + kw;
    if (s.stride == 1) {
      std::memcpy(o + lo, src + lo, sizeof(float) * (hi - lo));
    } else if (s.stride == 2) {
      gather_even(src + 2 * lo, o + lo, hi - lo);
    } else {
      for (int ow = lo; ow < hi; ++ow) o[ow] = src[ow * s.stride];
    }
  }
}

// "Same" convolutions (stride 1, 2*pad = k-1) have Ho = H, Wo = W: the im2col row of kernel
// offset (kh, kw) is the flat image shifted by d = (kh-pad)*W + (kw-pad), except for the
// columns where ow + kw - pad leaves [0, W) (which the flat shift wraps onto the
// neighbouring row) and the rows outside the image. One long copy per row instead of one
// per output row: for 7x7 planes the per-call overhead dominated.
bool is_same_stride1(const ConvShape& s) { return s.stride == 1 && 2 * s.pad == s.k - 1; }

// Flat index range [lo, hi) of the im2col row (kh, kw) whose source i + d lies in the image.
inline void same_flat_range(const ConvShape& s, int kh, int kw, int& lo, int& hi, int& d) {
  const int HW = s.H * s.W;
  d = (kh - s.pad) * s.W + (kw - s.pad);
  lo = std::max(0, -d);
  hi = std::min(HW, HW - d);
}

// Zeroes the wrapped columns of one (H*W) im2col row: ow < pad - kw or ow >= W + pad - kw.
inline void zero_wrapped_columns(const ConvShape& s, int kw, float* row) {
  const int left = std::max(0, s.pad - kw), right_from = std::min(s.W, s.W + s.pad - kw);
  for (int oh = 0; oh < s.H; ++oh) {
    float* r = row + oh * s.W;
    for (int ow = 0; ow < left; ++ow) r[ow] = 0.f;
    for (int ow = right_from; ow < s.W; ++ow) r[ow] = 0.f;
  }
}

void im2col_row_same(const ConvShape& s, const float* img, int kh, int kw, float* out) {
  int lo, hi, d;
  same_flat_range(s, kh, kw, lo, hi, d);
  const int HW = s.H * s.W;
  if (lo >= hi) {
    std::memset(out, 0, sizeof(float) * HW);
    return;
  }
  std::memset(out, 0, sizeof(float) * lo);
  std::memcpy(out + lo, img + lo + d, sizeof(float) * (hi - lo));
  std::memset(out + hi, 0, sizeof(float) * (HW - hi));
  zero_wrapped_columns(s, kw, out);
}

// cols (Cin*k*k, Ho*Wo) of one image x (Cin, H, W).
void im2col_sample(const ConvShape& s, const float* x, float* cols) {
  const int P = s.Ho() * s.Wo(), kk = s.k * s.k;
  const bool same = is_same_stride1(s);
  for (int c = 0; c < s.Cin; ++c)
    for (int ki = 0; ki < kk; ++ki) {
      const float* img = x + static_cast<int64_t>(c) * s.H * s.W;
      float* out = cols + (static_cast<int64_t>(c) * kk + ki) * P;
      if (same)
        im2col_row_same(s, img, ki / s.k, ki % s.k, out);
      else
        im2col_row(s, img, ki / s.k, ki % s.k, out);
    }
}

// dx_img (H, W) += col2im of one row (H*W) of a "same" convolution. The row's wrapped
// columns are zeroed first (the row is scratch), so one flat shifted add is exact.
void col2im_row_same(const ConvShape& s, float* row, int kh, int kw, float* img) {
  int lo, hi, d;
  same_flat_range(s, kh, kw, lo, hi, d);
  zero_wrapped_columns(s, kw, row);
  for (int i = lo; i < hi; ++i) img[i + d] += row[i];
}

// dx (Cin, H, W) (+)= col2im(cols (Cin*k*k, Ho*Wo)); dx is zeroed here unless accumulate;
// cols is scratch and may be modified.
void col2im_sample(const ConvShape& s, float* cols, float* dx, bool accumulate) {
  const int Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo, kk = s.k * s.k;
  if (!accumulate) std::memset(dx, 0, sizeof(float) * s.Cin * s.H * s.W);
  const bool same = is_same_stride1(s);
  for (int c = 0; c < s.Cin; ++c) {
    float* img = dx + static_cast<int64_t>(c) * s.H * s.W;
    for (int ki = 0; ki < kk; ++ki) {
      const int kh = ki / s.k, kw = ki % s.k;
      float* in = cols + (static_cast<int64_t>(c) * kk + ki) * P;
      if (same) {
        col2im_row_same(s, in, kh, kw, img);
        continue;
      }
      int lo, hi;
      valid_range(s.W, Wo, s.stride, s.pad, kw, lo, hi);
      for (int oh = 0; oh < Ho; ++oh) {
        const int ih = oh * s.stride - s.pad + kh;
        if (ih < 0 || ih >= s.H) continue;
        float* dst = img + ih * s.W - s.pad + kw;
        const float* src = in + oh * Wo;
        for (int ow = lo; ow < hi; ++ow) dst[ow * s.stride] += src[ow];
      }
    }
  }
}

int64_t cols_floats(const ConvShape& s) { return static_cast<int64_t>(s.Cin) * s.k * s.k * s.Ho() * s.Wo(); }
int64_t weight_floats(const ConvShape& s) { return static_cast<int64_t>(s.Cout) * s.Cin * s.k * s.k; }
int64_t thread_floats(const ConvShape& s) { return cols_floats(s) + weight_floats(s); }

}  // namespace

// Samples are spread over OpenMP threads; each thread runs single-threaded GEMMs
// (small_sgemm) on its own im2col buffer, so no thread waits on another
// inside a layer. Weight gradients go to per-thread partials summed in thread order:
// deterministic for a fixed thread count.
int64_t conv2d_im2col_workspace_floats(const ConvShape& s) {
  return static_cast<int64_t>(omp_get_max_threads()) * thread_floats(s);
}

int64_t conv2d_workspace_floats(const ConvShape& s) {
  if (winograd_applies(s)) return winograd_workspace_floats(s);
  if (channels_last_applies(s)) return conv2d_channels_last_workspace_floats(s);
  return conv2d_im2col_workspace_floats(s);
}

void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  if (winograd_applies(s)) return winograd_forward(s, x, w, y, ws);
  if (channels_last_applies(s)) return conv2d_channels_last_forward(s, x, w, y, ws);
  conv2d_im2col_forward(s, x, w, y, ws);
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  if (winograd_applies(s)) return winograd_backward(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
  if (channels_last_applies(s))
    return conv2d_channels_last_backward(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
  conv2d_im2col_backward(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
}

void conv2d_im2col_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const int P = s.Ho() * s.Wo(), CK = s.Cin * s.k * s.k;
  const int64_t in_size = static_cast<int64_t>(s.Cin) * s.H * s.W, out_size = static_cast<int64_t>(s.Cout) * P;
  const bool direct = s.k == 1 && s.stride == 1 && s.pad == 0;  // 1x1 stride 1: x is its own im2col
#pragma omp parallel
  {
    float* cols = ws + omp_get_thread_num() * thread_floats(s);
#pragma omp for schedule(static)
    for (int n = 0; n < s.N; ++n) {
      const float* xn = x + n * in_size;
      if (!direct) im2col_sample(s, xn, cols);
      // y_n (Cout, P) = w (Cout, CK) x cols (CK, P)
      small_sgemm(s.Cout, P, CK, w, CK, 1, direct ? xn : cols, P, false, y + n * out_size, P, false);
    }
  }
}

void conv2d_im2col_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                            int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  const int P = s.Ho() * s.Wo(), kk = s.k * s.k, CK = s.Cin * kk;
  const int64_t in_size = static_cast<int64_t>(s.Cin) * s.H * s.W, out_size = static_cast<int64_t>(s.Cout) * P;
  const bool want_dw = dw && dw_cout > 0 && dw_cin > 0;
  const int64_t dw_n = static_cast<int64_t>(dw_cout) * dw_cin * kk;
  int threads = 1;
#pragma omp parallel
  {
    const int t = omp_get_thread_num();
#pragma omp single
    threads = omp_get_num_threads();
    float* cols = ws + t * thread_floats(s);
    float* dwt = cols + cols_floats(s);  // this thread's partial (dw_cout, dw_cin*kk)
    if (want_dw) std::memset(dwt, 0, sizeof(float) * dw_n);
#pragma omp for schedule(static)
    for (int n = 0; n < s.N; ++n) {
      const float* dyn = dy + n * out_size;  // (Cout, P)
      if (want_dw) {
        im2col_sample(s, x + n * in_size, cols);
        // dwt (dw_cout, dw_cin*kk) += dy_n[:dw_cout] (dw_cout, P) x cols[:dw_cin*kk]^T
        small_sgemm(dw_cout, dw_cin * kk, P, dyn, P, 1, cols, P, true, dwt, dw_cin * kk, true);
      }
      if (dx) {
        // dcols (CK, P) = w^T (CK, Cout) x dy_n (Cout, P)
        small_sgemm(CK, P, s.Cout, w, 1, CK, dyn, P, false, cols, P, false);
        col2im_sample(s, cols, dx + n * in_size, accumulate_dx);
      }
    }
  }
  if (!want_dw) return;
  for (int t = 0; t < threads; ++t) {
    const float* part = ws + t * thread_floats(s) + cols_floats(s);
    for (int64_t i = 0; i < dw_n; ++i) dw[i] += part[i];
  }
}

void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(N) * C; ++i) {
    float acc = 0.f;
    for (int p = 0; p < HW; ++p) acc += x[i * HW + p];
    y[i] = acc / HW;
  }
}

void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(N) * C; ++i) {
    const float g = dy[i] / HW;
    for (int p = 0; p < HW; ++p) dx[i * HW + p] = g;
  }
}

void max_pool_forward(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W, int k, int s) {
  const int Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < static_cast<int64_t>(N) * C; ++nc) {
    const float* img = x + nc * H * W;
    for (int oh = 0; oh < Ho; ++oh)
      for (int ow = 0; ow < Wo; ++ow) {
        int best = (oh * s) * W + ow * s;
        for (int i = 0; i < k; ++i)
          for (int j = 0; j < k; ++j) {
            const int idx = (oh * s + i) * W + ow * s + j;
            if (img[idx] > img[best]) best = idx;
          }
        y[nc * Ho * Wo + oh * Wo + ow] = img[best];
        argmax[nc * Ho * Wo + oh * Wo + ow] = best;
      }
  }
}

void max_pool_backward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H, int W, int Ho, int Wo) {
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < static_cast<int64_t>(N) * C; ++nc) {
    float* img = dx + nc * H * W;
    std::memset(img, 0, sizeof(float) * H * W);
    for (int o = 0; o < Ho * Wo; ++o) img[argmax[nc * Ho * Wo + o]] += dy[nc * Ho * Wo + o];
  }
}

}  // namespace subdp::cpu
