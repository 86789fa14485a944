// Channels-last im2col convolution (conv_channels_last.h). The NCHW path (conv.cpp) builds
// one im2col row per (input channel, kernel offset), a strided gather of Ho * Wo pixels,
// and runs GEMMs whose long side is pixels: on the ResNet's 14x14 and 7x7 downsampling
// layers that is rows of 7 to 14 floats and GEMMs 49 columns wide. Here a sample is
// transposed once to (H * W, Cin), each im2col row is k * k copies of whole channel vectors,
// and small images are taken several samples at a time, so the GEMMs get at least 128 rows
// (Ho * Wo rows per sample; all N samples when they give fewer).
#include "kernels/cpu/conv_channels_last.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/transpose.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/winograd.h"

namespace subdp::cpu {

namespace {

constexpr int kTargetRows = 128;  // GEMM rows per chunk of samples, as winograd.cpp's tiles

// Sizes of one call: pixels in and out per sample, the im2col row length KC = k * k * Cin,
// and the chunking of samples into GEMM row blocks of `rows` = chunk * P_out.
struct Layout {
  int P_in, P_out, kk, KC, chunk, rows;
  explicit Layout(const ConvShape& s)
      : P_in(s.H * s.W),
        P_out(s.Ho() * s.Wo()),
        kk(s.k * s.k),
        KC(kk * s.Cin),
        chunk(std::max(1, std::min(s.N, (kTargetRows + P_out - 1) / P_out))),
        rows(chunk * P_out) {}
  int chunks(int N) const { return (N + chunk - 1) / chunk; }
  int64_t filter_floats(const ConvShape& s) const { return int64_t{s.Cout} * KC; }
  int64_t thread_floats(const ConvShape& s) const {
    return int64_t{P_in} * s.Cin + s.Cin + int64_t{rows} * KC + int64_t{rows} * s.Cout + filter_floats(s);
  }
};

// Thread th's region of the workspace (after the shared permuted filters Wp): one sample
// channels-last (P_in, Cin) and Cin zeros (the padding), im2col rows (rows, KC), the
// channels-last output or output gradient (rows, Cout), a weight-gradient partial (Cout, KC).
struct ThreadBuffers {
  float *plane, *zero, *cols, *out, *partial;
  ThreadBuffers(const ConvShape& s, const Layout& l, float* ws, int th) {
    plane = ws + l.filter_floats(s) + th * l.thread_floats(s);
    zero = plane + int64_t{l.P_in} * s.Cin;
    cols = zero + s.Cin;
    out = cols + int64_t{l.rows} * l.KC;
    partial = out + int64_t{l.rows} * s.Cout;
  }
};

// Wp (Cout, k*k*Cin): Wp[co][(kh * k + kw) * Cin + ci] = w[co][ci][kh][kw], one (Cin, k*k)
// transpose per output channel.
void permute_filters(const ConvShape& s, const Layout& l, const float* w, float* Wp) {
#pragma omp parallel for schedule(static)
  for (int co = 0; co < s.Cout; ++co)
    transpose(w + int64_t{co} * l.KC, s.Cin, l.kk, l.kk, Wp + int64_t{co} * l.KC, s.Cin, false);
}

// dst[c] = src[c] (copy_channels) or dst[c] += src[c] (add_channels) for c < C, in whole
// vectors (for_channels). Written out because GCC turns the plain copy loop into a memmove
// call, and these run 9 times per output pixel on 32 to 128 channels.
inline void copy_channels(const float* src, float* dst, int C) {
  for_channels(C, [&](int c, auto tag) { store(dst + c, load<decltype(tag)>(src + c)); });
}

inline void add_channels(const float* src, float* dst, int C) {
  for_channels(C, [&](int c, auto tag) {
    using V = decltype(tag);
    store(dst + c, load<V>(dst + c) + load<V>(src + c));
  });
}

// Calls f(kernel offset kh * k + kw, input pixel index or -1 for padding) for every tap of
// output pixel (oh, ow).
template <class Fn>
inline void for_taps(const ConvShape& s, int oh, int ow, Fn&& f) {
  for (int kh = 0; kh < s.k; ++kh) {
    const int ih = oh * s.stride - s.pad + kh;
    for (int kw = 0; kw < s.k; ++kw) {
      const int iw = ow * s.stride - s.pad + kw;
      f(kh * s.k + kw, ih >= 0 && ih < s.H && iw >= 0 && iw < s.W ? ih * s.W + iw : -1);
    }
  }
}

// cols (P_out, k*k*Cin) of one sample from its channels-last plane (P_in, Cin): row (oh, ow)
// holds the input pixels (oh * stride - pad + kh, ow * stride - pad + kw) in (kh, kw) order,
// zeros where they fall in the padding.
void gather_cols(const ConvShape& s, const Layout& l, const float* plane, const float* zero, float* cols) {
  for (int oh = 0; oh < s.Ho(); ++oh)
    for (int ow = 0; ow < s.Wo(); ++ow) {
      float* row = cols + (int64_t{oh} * s.Wo() + ow) * l.KC;
      for_taps(s, oh, ow, [&](int tap, int pixel) {
        copy_channels(pixel < 0 ? zero : plane + int64_t{pixel} * s.Cin, row + tap * s.Cin, s.Cin);
      });
    }
}

// plane (P_in, Cin) += col2im of dcols (P_out, k*k*Cin): each channel vector goes back to the
// input pixel gather_cols took it from (padding taps are dropped).
void scatter_cols(const ConvShape& s, const Layout& l, const float* dcols, float* plane) {
  for (int oh = 0; oh < s.Ho(); ++oh)
    for (int ow = 0; ow < s.Wo(); ++ow) {
      const float* row = dcols + (int64_t{oh} * s.Wo() + ow) * l.KC;
      for_taps(s, oh, ow, [&](int tap, int pixel) {
        if (pixel >= 0) add_channels(row + tap * s.Cin, plane + int64_t{pixel} * s.Cin, s.Cin);
      });
    }
}

// im2col rows of samples [n0, n0 + count) of x (N, Cin, H, W) into tb.cols.
void gather_chunk(const ConvShape& s, const Layout& l, const float* x, int n0, int count, const ThreadBuffers& tb) {
  for (int ln = 0; ln < count; ++ln) {
    transpose(x + int64_t{n0 + ln} * s.Cin * l.P_in, s.Cin, l.P_in, l.P_in, tb.plane, s.Cin, false);
    gather_cols(s, l, tb.plane, tb.zero, tb.cols + int64_t{ln} * l.P_out * l.KC);
  }
}

// dw (dw_cout, dw_cin, k, k) += the threads' partials (dw_cout rows of (Cout, KC) each),
// summed into thread 0's in thread order, then permuted back per output channel.
void fold_weight_gradients(const ConvShape& s, const Layout& l, float* ws, int threads, int dw_cout, int dw_cin,
                           float* dw) {
  float* total = ThreadBuffers(s, l, ws, 0).partial;
  const int64_t n = int64_t{dw_cout} * l.KC;
  for (int th = 1; th < threads; ++th) {
    const float* part = ThreadBuffers(s, l, ws, th).partial;
    for (int64_t i = 0; i < n; ++i) total[i] += part[i];
  }
  for (int co = 0; co < dw_cout; ++co)
    transpose(total + int64_t{co} * l.KC, l.kk, dw_cin, s.Cin, dw + int64_t{co} * dw_cin * l.kk, l.kk, true);
}

}  // namespace

bool channels_last_applies(const ConvShape& s) { return s.k > 1 && !winograd_applies(s) && s.Cin >= 8 && s.Cout >= 8; }

int64_t conv2d_channels_last_workspace_floats(const ConvShape& s) {
  const Layout l(s);
  return l.filter_floats(s) + omp_get_max_threads() * l.thread_floats(s);
}

void conv2d_channels_last_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const Layout l(s);
  permute_filters(s, l, w, ws);
  const float* Wp = ws;
#pragma omp parallel
  {
    const ThreadBuffers tb(s, l, ws, omp_get_thread_num());
    std::fill(tb.zero, tb.zero + s.Cin, 0.f);
#pragma omp for schedule(static)
    for (int ch = 0; ch < l.chunks(s.N); ++ch) {
      const int n0 = ch * l.chunk, count = std::min(l.chunk, s.N - n0);
      gather_chunk(s, l, x, n0, count, tb);
      // y^T (rows, Cout) = cols (rows, KC) x Wp^T (KC, Cout)
      small_sgemm(count * l.P_out, s.Cout, l.KC, tb.cols, l.KC, 1, Wp, l.KC, true, tb.out, s.Cout, false);
      for (int ln = 0; ln < count; ++ln)
        transpose(tb.out + int64_t{ln} * l.P_out * s.Cout, l.P_out, s.Cout, s.Cout,
                  y + int64_t{n0 + ln} * s.Cout * l.P_out, l.P_out, false);
    }
  }
}

void conv2d_channels_last_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                                   float* dw, int dw_cout, int dw_cin, float* ws, bool accumulate_dx) {
  const Layout l(s);
  const bool want_dw = dw && dw_cout > 0 && dw_cin > 0;
  if (!dx && !want_dw) return;
  if (dx) permute_filters(s, l, w, ws);
  const float* Wp = ws;
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    const ThreadBuffers tb(s, l, ws, omp_get_thread_num());
    std::fill(tb.zero, tb.zero + s.Cin, 0.f);
    if (want_dw) std::memset(tb.partial, 0, sizeof(float) * dw_cout * l.KC);
#pragma omp for schedule(static)
    for (int ch = 0; ch < l.chunks(s.N); ++ch) {
      const int n0 = ch * l.chunk, count = std::min(l.chunk, s.N - n0), rows = count * l.P_out;
      for (int ln = 0; ln < count; ++ln)  // dy^T (rows, Cout)
        transpose(dy + int64_t{n0 + ln} * s.Cout * l.P_out, s.Cout, l.P_out, l.P_out,
                  tb.out + int64_t{ln} * l.P_out * s.Cout, s.Cout, false);
      if (want_dw) {
        gather_chunk(s, l, x, n0, count, tb);
        // partial[:dw_cout] (dw_cout, KC) += (dy^T[:, :dw_cout])^T (dw_cout, rows) x cols (rows, KC)
        small_sgemm(dw_cout, l.KC, rows, tb.out, 1, s.Cout, tb.cols, l.KC, false, tb.partial, l.KC, true);
      }
      if (!dx) continue;
      // dcols (rows, KC) = dy^T (rows, Cout) x Wp (Cout, KC), into the im2col buffer
      small_sgemm(rows, l.KC, s.Cout, tb.out, s.Cout, 1, Wp, l.KC, false, tb.cols, l.KC, false);
      for (int ln = 0; ln < count; ++ln) {
        std::fill(tb.plane, tb.plane + int64_t{l.P_in} * s.Cin, 0.f);
        scatter_cols(s, l, tb.cols + int64_t{ln} * l.P_out * l.KC, tb.plane);
        transpose(tb.plane, l.P_in, s.Cin, s.Cin, dx + int64_t{n0 + ln} * s.Cin * l.P_in, l.P_in, accumulate_dx);
      }
    }
  }
  if (want_dw) fold_weight_gradients(s, l, ws, threads, dw_cout, dw_cin, dw);
}

}  // namespace subdp::cpu
