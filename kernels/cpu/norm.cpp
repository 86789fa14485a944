// BatchNorm2d and LayerNorm kernels.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace subdp::cpu {

namespace {

// Mean and M2 (sum of squared deviations) of channel c over (N, HW): each plane's own mean
// and centred M2 in float SIMD lanes, merged across planes in double in a fixed order
// (deterministic for a given build).
void channel_moments(const float* x, int N, int C, int HW, int c, double& mean, double& m2) {
  double count = 0;
  mean = 0, m2 = 0;
  for (int n = 0; n < N; ++n) {
    const float* p = x + (static_cast<int64_t>(n) * C + c) * HW;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < HW; ++i) sum += p[i];
    const float pm = sum / static_cast<float>(HW);
    float pm2 = 0.f;
#pragma omp simd reduction(+ : pm2)
    for (int i = 0; i < HW; ++i) pm2 += (p[i] - pm) * (p[i] - pm);
    const double merged = count + HW, delta = pm - mean;
    mean += delta * HW / merged;
    m2 += pm2 + delta * delta * count * HW / merged;
    count = merged;
  }
}

// y = relu?(x * a + b + residual) over the (N, HW) planes of channel c.
template <bool Relu, bool Residual>
void normalise_channel(const float* x, float* y, const float* residual, int N, int C, int HW, int c, float a,
                       float b) {
  for (int n = 0; n < N; ++n) {
    const int64_t off = (static_cast<int64_t>(n) * C + c) * HW;
    const float* __restrict p = x + off;
    float* __restrict q = y + off;
    const float* __restrict r = Residual ? residual + off : nullptr;
#pragma omp simd
    for (int i = 0; i < HW; ++i) {
      float v = p[i] * a + b;
      if constexpr (Residual) v += r[i];
      q[i] = Relu ? std::max(v, 0.f) : v;
    }
  }
}

}  // namespace

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* rstd, float* running_mean, float* running_var, int N,
                       int C, int HW, bool training, float momentum, float eps,
                       const BatchNormEpilogue& epilogue) {
  const int64_t M = static_cast<int64_t>(N) * HW;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    float mu, rs;
    if (training) {
      double m, m2;
      channel_moments(x, N, C, HW, c, m, m2);
      const double var = m2 / M;
      mu = static_cast<float>(m);
      rs = static_cast<float>(1.0 / std::sqrt(var + eps));
      mean[c] = mu;
      rstd[c] = rs;
      const double unbiased = M > 1 ? m2 / (M - 1) : var;
      running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mu;
      running_var[c] = (1 - momentum) * running_var[c] + momentum * static_cast<float>(unbiased);
    } else {
      mu = running_mean[c];
      rs = 1.f / std::sqrt(running_var[c] + eps);
    }
    // scale * (gamma * (x - mu) * rs + beta) = x * a + b
    const float ga = gamma[c] * rs, a = epilogue.scale * ga, b = epilogue.scale * (beta[c] - mu * ga);
    const float* r = epilogue.residual;
    if (epilogue.relu)
      r ? normalise_channel<true, true>(x, y, r, N, C, HW, c, a, b) : normalise_channel<true, false>(x, y, r, N, C, HW, c, a, b);
    else
      r ? normalise_channel<false, true>(x, y, r, N, C, HW, c, a, b) : normalise_channel<false, false>(x, y, r, N, C, HW, c, a, b);
  }
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int N, int C,
                        int HW, int grad_channels) {
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

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* rstd, int64_t rows, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    float* q = y + r * C;
    float m = 0.f;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; ++i) m += p[i];
    m /= C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; ++i) v += (p[i] - m) * (p[i] - m);
    v /= C;
    const float rs = 1.f / std::sqrt(v + eps);
    for (int i = 0; i < C; ++i) q[i] = (p[i] - m) * rs * gamma[i] + beta[i];
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows,
                        int C) {
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

}  // namespace subdp::cpu
