// conv2d via grouped im2col + OpenBLAS GEMM, and pooling kernels.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.h"

namespace subdp::cpu {

namespace {

constexpr int64_t kTargetColFloats = 1 << 20;  // ~4 MiB of im2col columns per group

// cols (Cin*k*k, G*Ho*Wo): column block g holds sample n0+g.
void im2col_group(const ConvShape& s, const float* x, int n0, int G, float* cols) {
  const int Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo, kk = s.k * s.k;
  const int64_t ld = static_cast<int64_t>(G) * P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int c = 0; c < s.Cin; ++c) {
    for (int g = 0; g < G; ++g) {
      const float* img = x + (static_cast<int64_t>(n0 + g) * s.Cin + c) * s.H * s.W;
      for (int ki = 0; ki < kk; ++ki) {
        const int kh = ki / s.k, kw = ki % s.k;
        float* out = cols + (static_cast<int64_t>(c) * kk + ki) * ld + static_cast<int64_t>(g) * P;
        for (int oh = 0; oh < Ho; ++oh) {
          const int ih = oh * s.stride - s.pad + kh;
          for (int ow = 0; ow < Wo; ++ow) {
            const int iw = ow * s.stride - s.pad + kw;
            const bool inside = ih >= 0 && ih < s.H && iw >= 0 && iw < s.W;
            out[oh * Wo + ow] = inside ? img[ih * s.W + iw] : 0.f;
          }
        }
      }
    }
  }
}

// dx[n0..n0+G) += col2im(dcols); dx must be zeroed by the caller.
void col2im_group(const ConvShape& s, const float* cols, int n0, int G, float* dx) {
  const int Ho = s.Ho(), Wo = s.Wo(), P = Ho * Wo, kk = s.k * s.k;
  const int64_t ld = static_cast<int64_t>(G) * P;
#pragma omp parallel for collapse(2) schedule(static)
  for (int c = 0; c < s.Cin; ++c) {
    for (int g = 0; g < G; ++g) {
      float* img = dx + (static_cast<int64_t>(n0 + g) * s.Cin + c) * s.H * s.W;
      for (int ki = 0; ki < kk; ++ki) {
        const int kh = ki / s.k, kw = ki % s.k;
        const float* in = cols + (static_cast<int64_t>(c) * kk + ki) * ld + static_cast<int64_t>(g) * P;
        for (int oh = 0; oh < Ho; ++oh) {
          const int ih = oh * s.stride - s.pad + kh;
          if (ih < 0 || ih >= s.H) continue;
          for (int ow = 0; ow < Wo; ++ow) {
            const int iw = ow * s.stride - s.pad + kw;
            if (iw >= 0 && iw < s.W) img[ih * s.W + iw] += in[oh * Wo + ow];
          }
        }
      }
    }
  }
}

// (G, C, P) <-> (C, G*P) layout shuffles between NCHW and the GEMM's layout.
void nchw_to_cgp(const float* src, float* dst, int G, int C, int P) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c)
      std::memcpy(dst + (static_cast<int64_t>(c) * G + g) * P, src + (static_cast<int64_t>(g) * C + c) * P,
                  sizeof(float) * P);
}

void cgp_to_nchw(const float* src, float* dst, int G, int C, int P) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c)
      std::memcpy(dst + (static_cast<int64_t>(g) * C + c) * P, src + (static_cast<int64_t>(c) * G + g) * P,
                  sizeof(float) * P);
}

}  // namespace

int ConvShape::group() const {
  const int64_t per_sample = static_cast<int64_t>(Cin) * k * k * Ho() * Wo();
  return static_cast<int>(std::clamp<int64_t>(kTargetColFloats / std::max<int64_t>(per_sample, 1), 1, std::max(N, 1)));
}

int64_t conv2d_workspace_floats(const ConvShape& s) {
  const int64_t gp = static_cast<int64_t>(s.group()) * s.Ho() * s.Wo();
  return static_cast<int64_t>(s.Cin) * s.k * s.k * gp + static_cast<int64_t>(s.Cout) * gp;
}

void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) {
  const int P = s.Ho() * s.Wo(), CK = s.Cin * s.k * s.k, Gmax = s.group();
  for (int n0 = 0; n0 < s.N; n0 += Gmax) {
    const int G = std::min(Gmax, s.N - n0);
    float* cols = ws;
    float* out = ws + static_cast<int64_t>(CK) * G * P;
    im2col_group(s, x, n0, G, cols);
    // out (Cout, G*P) = w (Cout, CK) x cols (CK, G*P)
    sgemm(false, false, s.Cout, G * P, CK, 1.f, w, CK, cols, G * P, 0.f, out, G * P);
    cgp_to_nchw(out, y + static_cast<int64_t>(n0) * s.Cout * P, G, s.Cout, P);
  }
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, int dw_cout, int dw_cin, float* ws) {
  const int P = s.Ho() * s.Wo(), kk = s.k * s.k, CK = s.Cin * kk, Gmax = s.group();
  if (dx) std::memset(dx, 0, sizeof(float) * static_cast<int64_t>(s.N) * s.Cin * s.H * s.W);
  for (int n0 = 0; n0 < s.N; n0 += Gmax) {
    const int G = std::min(Gmax, s.N - n0);
    float* cols = ws;
    float* dyg = ws + static_cast<int64_t>(CK) * G * P;  // (Cout, G*P)
    nchw_to_cgp(dy + static_cast<int64_t>(n0) * s.Cout * P, dyg, G, s.Cout, P);
    if (dw && dw_cout > 0 && dw_cin > 0) {
      im2col_group(s, x, n0, G, cols);
      // dw[:dw_cout, :dw_cin*kk] += dyg[:dw_cout] (dw_cout, G*P) x cols[:dw_cin*kk]^T
      sgemm(false, true, dw_cout, dw_cin * kk, G * P, 1.f, dyg, G * P, cols, G * P, 1.f, dw,
            dw_cin * kk);
    }
    if (dx) {
      // dcols (CK, G*P) = w^T (CK, Cout) x dyg (Cout, G*P); reuses the columns buffer.
      sgemm(true, false, CK, G * P, s.Cout, 1.f, w, CK, dyg, G * P, 0.f, cols, G * P);
      col2im_group(s, cols, n0, G, dx);
    }
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

void max_pool_forward(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W,
                      int k, int s) {
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

void max_pool_backward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H,
                       int W, int Ho, int Wo) {
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < static_cast<int64_t>(N) * C; ++nc) {
    float* img = dx + nc * H * W;
    std::memset(img, 0, sizeof(float) * H * W);
    for (int o = 0; o < Ho * Wo; ++o) img[argmax[nc * Ho * Wo + o]] += dy[nc * Ho * Wo + o];
  }
}

}  // namespace subdp::cpu
