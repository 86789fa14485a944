// Softmax cross-entropy kernels.
#include "kernels/cpu/softmax.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/fast_math.h"

namespace subdp::cpu {

void softmax_rows(float* x, int64_t rows, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * V;
    float mx = p[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, p[i]);
#pragma omp simd
    for (int i = 0; i < V; ++i) p[i] = exp_approx(p[i] - mx);
    float s = 0.f;
    for (int i = 0; i < V; ++i) s += p[i];
    const float inv = 1.f / s;
    for (int i = 0; i < V; ++i) p[i] *= inv;
  }
}

double cross_entropy_forward(const float* logits, const int32_t* targets, float* probs, int64_t rows, int V,
                             int64_t* correct) {
  std::vector<double> row_loss(rows);
  std::vector<char> row_hit(rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * V;
    float* p = probs + r * V;
    int arg = 0;
    for (int i = 1; i < V; ++i)
      if (l[i] > l[arg]) arg = i;
    const float mx = l[arg];
#pragma omp simd
    for (int i = 0; i < V; ++i) p[i] = exp_approx(l[i] - mx);
    double s = 0;
    for (int i = 0; i < V; ++i) s += p[i];
    const float inv = static_cast<float>(1.0 / s);
    for (int i = 0; i < V; ++i) p[i] *= inv;
    const int32_t t = targets[r];
    const bool valid = t >= 0 && t < V;  // an invalid target poisons the loss instead of reading out of range
    row_loss[r] = valid ? std::log(s) - (l[t] - mx) : std::numeric_limits<double>::quiet_NaN();
    row_hit[r] = arg == t;
  }
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {  // fixed order: deterministic
    total += row_loss[r];
    hits += row_hit[r];
  }
  if (correct) *correct = hits;
  return rows ? total / rows : 0.0;
}

void cross_entropy_backward(const float* probs, const int32_t* targets, float* dlogits, int64_t rows, int V,
                            float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < V; ++i) dlogits[r * V + i] = probs[r * V + i] * scale;
    if (targets[r] >= 0 && targets[r] < V) dlogits[r * V + targets[r]] -= scale;
  }
}

}  // namespace subdp::cpu
