// SGD and AdamW element loops.
#include "kernels/cpu/optimizer.h"

#include <cfloat>
#include <cmath>

namespace subdp::cpu {

namespace {

/// 1 when x is inf or NaN. Written as a comparison (NaN compares false) so the update loops
/// stay vectorised with it.
inline int not_finite(float x) { return std::fabs(x) <= FLT_MAX ? 0 : 1; }

}  // namespace

int64_t sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float weight_decay,
                   bool nesterov, bool first) {
  int64_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > 65536)
  for (int64_t k = 0; k < n; ++k) {
    float d = g[k] + weight_decay * w[k];
    if (buf) {
      float& b = buf[k];
      b = first ? d : momentum * b + d;
      d = nesterov ? d + momentum * b : b;
      bad += not_finite(b);
    }
    w[k] -= lr * d;
    bad += not_finite(w[k]);
  }
  return bad;
}

int64_t adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float bc2_sqrt,
                     float decay, float eps, float beta1, float beta2) {
  int64_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (n > 65536)
  for (int64_t k = 0; k < n; ++k) {
    const float gk = g[k];
    m[k] = beta1 * m[k] + (1.f - beta1) * gk;
    v[k] = beta2 * v[k] + (1.f - beta2) * gk * gk;
    const float denom = std::sqrt(v[k]) / bc2_sqrt + eps;
    w[k] = w[k] * decay - step_size * m[k] / denom;
    bad += not_finite(w[k]) + not_finite(m[k]) + not_finite(v[k]);
  }
  return bad;
}

}  // namespace subdp::cpu
