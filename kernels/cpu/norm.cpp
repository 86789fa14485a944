// BatchNorm2d and LayerNorm kernels.
#include "kernels/cpu/norm.h"

#include <cmath>
#include <vector>

namespace subdp::cpu {

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                       float eps, bool relu) {
  const int64_t M = static_cast<int64_t>(N) * HW;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    float mu, rs;
    if (training) {
      // Each (n, c) plane is summed in float SIMD lanes, planes in double: vectorised, and
      // still one fixed order of additions (deterministic for a given build).
      double s = 0, ss = 0;
      for (int n = 0; n < N; ++n) {
        const float* p = x + (static_cast<int64_t>(n) * C + c) * HW;
        float plane = 0.f;
#pragma omp simd reduction(+ : plane)
        for (int i = 0; i < HW; ++i) plane += p[i];
        s += plane;
      }
      const double m = s / M;
      const float fm = static_cast<float>(m);
      for (int n = 0; n < N; ++n) {
        const float* p = x + (static_cast<int64_t>(n) * C + c) * HW;
        float plane = 0.f;
#pragma omp simd reduction(+ : plane)
        for (int i = 0; i < HW; ++i) plane += (p[i] - fm) * (p[i] - fm);
        ss += plane;
      }
      const double var = ss / M;
      mu = static_cast<float>(m);
      rs = static_cast<float>(1.0 / std::sqrt(var + eps));
      mean[c] = mu;
      rstd[c] = rs;
      const double unbiased = M > 1 ? ss / (M - 1) : var;
      running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mu;
      running_var[c] = (1 - momentum) * running_var[c] + momentum * static_cast<float>(unbiased);
    } else {
      mu = running_mean[c];
      rs = 1.f / std::sqrt(running_var[c] + eps);
    }
    const float a = gamma[c] * rs, b = beta[c] - mu * a;
    for (int n = 0; n < N; ++n) {
      const float* p = x + (static_cast<int64_t>(n) * C + c) * HW;
      float* q = y + (static_cast<int64_t>(n) * C + c) * HW;
      if (relu) {
        for (int i = 0; i < HW; ++i) {
          const float v = p[i] * a + b;
          q[i] = v > 0.f ? v : 0.f;  // relu_forward's expression: the same bits as two passes
        }
      } else {
        for (int i = 0; i < HW; ++i) q[i] = p[i] * a + b;
      }
    }
  }
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels) {
  const int64_t M = static_cast<int64_t>(N) * HW;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    double sdy = 0, sdyx = 0;
    const float mu = mean[c], rs = rstd[c];
    for (int n = 0; n < N; ++n) {
      const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
      float plane_dy = 0.f, plane_dyx = 0.f;  // per-plane float SIMD sums, as in the forward
#pragma omp simd reduction(+ : plane_dy, plane_dyx)
      for (int i = 0; i < HW; ++i) {
        plane_dy += dy[off + i];
        plane_dyx += dy[off + i] * (x[off + i] - mu) * rs;
      }
      sdy += plane_dy;
      sdyx += plane_dyx;
    }
    if (c < grad_channels) {
      dgamma[c] += static_cast<float>(sdyx);
      dbeta[c] += static_cast<float>(sdy);
    }
    const float k = gamma[c] * rstd[c] / M;
    const float mdy = static_cast<float>(sdy), mdyx = static_cast<float>(sdyx);
    for (int n = 0; n < N; ++n) {
      const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
#pragma omp simd
      for (int i = 0; i < HW; ++i) {
        const float xhat = (x[off + i] - mu) * rs;
        dx[off + i] = k * (M * dy[off + i] - mdy - xhat * mdyx);
      }
    }
  }
}

namespace {
// One row of LayerNorm's output from its statistics. Forward and recompute both call it, so
// a recomputed output has the forward's bits.
inline void layernorm_row(const float* __restrict p, const float* __restrict gamma, const float* __restrict beta,
                          float m, float rs, float* __restrict q, int C) {
  for (int i = 0; i < C; ++i) q[i] = (p[i] - m) * rs * gamma[i] + beta[i];
}
}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    float m = 0.f;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; ++i) m += p[i];
    m /= C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; ++i) v += (p[i] - m) * (p[i] - m);
    v /= C;
    const float rs = 1.f / std::sqrt(v + eps);
    layernorm_row(p, gamma, beta, m, rs, y + r * C, C);
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                     float* y, int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) layernorm_row(x + r * C, gamma, beta, mean[r], rstd[r], y + r * C, C);
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    const float* g = dy + r * C;
    float dnorm_mean = 0.f, dnorm_norm_mean = 0.f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int i = 0; i < C; ++i) {
      const float xhat = (p[i] - mean[r]) * rstd[r];
      const float dn = gamma[i] * g[i];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * xhat;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int i = 0; i < C; ++i) {
      const float xhat = (p[i] - mean[r]) * rstd[r];
      const float dn = gamma[i] * g[i];
      dx[r * C + i] += (dn - dnorm_mean - xhat * dnorm_norm_mean) * rstd[r];
    }
  }
  if (dgamma == nullptr) return;
  // Parameter gradients summed row by row in a fixed order (deterministic).
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    const float* g = dy + r * C;
    for (int i = 0; i < C; ++i) {
      dgamma[i] += (p[i] - mean[r]) * rstd[r] * g[i];
      dbeta[i] += g[i];
    }
  }
}

namespace {
inline void rmsnorm_row(const float* __restrict p, const float* __restrict gamma, float rs, float* __restrict q,
                        int C) {
  for (int i = 0; i < C; ++i) q[i] = p[i] * rs * gamma[i];
}
}  // namespace

void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < C; ++i) ss += p[i] * p[i];
    const float rs = 1.f / std::sqrt(ss / C + eps);
    rmsnorm_row(p, gamma, rs, y + r * C, C);
    rstd[r] = rs;
  }
}

void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) rmsnorm_row(x + r * C, gamma, rstd[r], y + r * C, C);
}

void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx, float* dgamma,
                      int64_t rows, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    const float* g = dy + r * C;
    const float rs = rstd[r];
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < C; ++i) dot += gamma[i] * g[i] * (p[i] * rs);
    const float m = dot / C;
    for (int i = 0; i < C; ++i) dx[r * C + i] += (gamma[i] * g[i] - p[i] * rs * m) * rs;
  }
  if (dgamma == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {  // rows in order: deterministic
    const float* p = x + r * C;
    const float* g = dy + r * C;
    for (int i = 0; i < C; ++i) dgamma[i] += p[i] * rstd[r] * g[i];
  }
}

}  // namespace subdp::cpu
