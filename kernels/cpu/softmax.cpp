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

namespace {
/// Row r's loss term and argmax hit; writes its dlogits row when d is not null (may be l).
double cross_entropy_row(const float* l, int32_t t, float* d, int V, float scale, char* hit) {
  int arg = 0;
  for (int i = 1; i < V; ++i)
    if (l[i] > l[arg]) arg = i;
  const float mx = l[arg];
  const bool valid = t >= 0 && t < V;   // an invalid target poisons the loss instead of reading out of range
  const float lt = valid ? l[t] : 0.f;  // before d (which may be l) is written
  *hit = arg == t;
  double s = 0;
  if (d == nullptr) {
    for (int i = 0; i < V; ++i) s += exp_approx(l[i] - mx);
  } else {
#pragma omp simd
    for (int i = 0; i < V; ++i) d[i] = exp_approx(l[i] - mx);
    for (int i = 0; i < V; ++i) s += d[i];
    const float inv = static_cast<float>(1.0 / s);
    for (int i = 0; i < V; ++i) d[i] = d[i] * inv * scale;  // softmax, then times scale
    if (valid) d[t] -= scale;
  }
  return valid ? std::log(s) - (lt - mx) : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

double cross_entropy_sum(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V, float scale,
                         int64_t* correct) {
  std::vector<double> row_loss(rows);
  std::vector<char> row_hit(rows);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    row_loss[r] =
        cross_entropy_row(logits + r * V, targets[r], dlogits ? dlogits + r * V : nullptr, V, scale, &row_hit[r]);
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < rows; ++r) {  // fixed order: deterministic
    total += row_loss[r];
    hits += row_hit[r];
  }
  if (correct) *correct = hits;
  return total;
}

double cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V, float scale,
                     int64_t* correct) {
  const double total = cross_entropy_sum(logits, targets, dlogits, rows, V, scale, correct);
  return rows ? total / rows : 0.0;
}

}  // namespace subdp::cpu
