// Causal self-attention forward/backward: per (batch, head) GEMMs on strided views of qkv.
#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/gemm.h"

namespace subdp::cpu {

namespace {

/// Causal softmax of the rows of a (T, T) score matrix in place: row i over columns j <= i,
/// columns j > i set to 0.
void causal_softmax(float* a, int T) {
  for (int i = 0; i < T; ++i) {
    float* row = a + static_cast<int64_t>(i) * T;
    // simd reductions: GCC keeps a float max or sum scalar unless told it may reorder it (and
    // std::max, whose NaN rule is order-dependent, scalar even then).
    float mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= i; ++j) {
      row[j] = exp_approx(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.f / sum;
#pragma omp simd
    for (int j = 0; j <= i; ++j) row[j] *= inv;
    for (int j = i + 1; j < T; ++j) row[j] = 0.f;
  }
}

/// Softmax backward in place: d (T, T) holds d(att) on entry and d(scores) on exit,
/// dS_ij = att_ij (dA_ij - sum_k att_ik dA_ik); zero above the diagonal (att is zero there).
void causal_softmax_backward(const float* att, float* d, int T) {
  for (int i = 0; i < T; ++i) {
    const float* p = att + static_cast<int64_t>(i) * T;
    float* g = d + static_cast<int64_t>(i) * T;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= i; ++j) dot += p[j] * g[j];
#pragma omp simd
    for (int j = 0; j <= i; ++j) g[j] = p[j] * (g[j] - dot);
    for (int j = i + 1; j < T; ++j) g[j] = 0.f;
  }
}

int thread_count(int slots) { return std::max(1, std::min(slots, omp_get_max_threads())); }

/// True when a call is worth spreading over threads: waking a team costs more than a tiny
/// problem (and under an oversubscribed CPU, far more).
bool worth_threads(const AttentionShape& s) { return static_cast<int64_t>(s.B) * s.H * s.T * s.T * s.hd >= (1 << 15); }

}  // namespace

int64_t attention_workspace_floats(const AttentionShape& s, int slots) {
  return 2 * static_cast<int64_t>(std::max(slots, 1)) * s.T * s.T;
}

namespace {

/// a (T, T) = causal softmax of q (T, hd) . k^T (hd, T) * scale; q and k with row stride ld.
/// The forward pass and the backward's recomputation both call this: same arithmetic.
void probabilities(const float* q, const float* k, int T, int hd, int ld, float scale, float* a) {
  sgemm(false, true, T, T, hd, scale, q, ld, k, ld, 0.f, a, T);
  causal_softmax(a, T);
}

/// Thread th's two (T, T) workspace matrices: [0] probabilities, [1] their gradient.
float* slot(float* ws, int T, int which) {
  return ws + (2 * static_cast<int64_t>(omp_get_thread_num()) + which) * T * T;
}

/// Where query head h of sequence b reads its q, k and v (row stride s.qkv_width()).
struct HeadRows {
  int64_t q, k, v;
};

HeadRows head_rows(const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t ld = s.qkv_width(), row0 = b * s.T * ld, g = h / s.group();
  return {row0 + h * s.hd, row0 + s.width() + g * s.hd, row0 + s.width() + (s.kv_heads() + g) * s.hd};
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y, float* ws, int slots) {
  if (!att && !ws) throw std::invalid_argument("attention_forward: probabilities need att or a workspace");
  const int T = s.T, hd = s.hd, C = static_cast<int>(s.width()), ld = static_cast<int>(s.qkv_width());
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int64_t pairs = static_cast<int64_t>(s.B) * s.H;
  // Stored probabilities use no workspace slot, so every thread may run.
  const int team = att ? omp_get_max_threads() : thread_count(slots);
#pragma omp parallel for schedule(static) num_threads(team) if (worth_threads(s))
  for (int64_t bh = 0; bh < pairs; ++bh) {
    const int64_t b = bh / s.H, h = bh % s.H;
    const HeadRows at = head_rows(s, b, h);              // (T, hd) each, row stride ld
    float* a = att ? att + bh * T * T : slot(ws, T, 0);  // (T, T)
    probabilities(qkv + at.q, qkv + at.k, T, hd, ld, scale, a);
    // y_bh (T, hd) = a (T, T) . v (T, hd), row stride C
    sgemm(false, false, T, hd, T, 1.f, a, T, qkv + at.v, ld, 0.f, y + b * T * C + h * hd, C);
  }
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy, float* dqkv,
                        float* ws, int slots) {
  const int T = s.T, hd = s.hd, C = static_cast<int>(s.width()), ld = static_cast<int>(s.qkv_width());
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int G = s.group();
  // One task per (sequence, key / value head): its query heads run in order, the first writing
  // dk and dv and the rest adding to them, so no two threads write the same rows.
  const int64_t tasks = static_cast<int64_t>(s.B) * s.kv_heads();
#pragma omp parallel for schedule(static) num_threads(thread_count(slots)) if (worth_threads(s))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / s.kv_heads();
    for (int64_t h = task % s.kv_heads() * G, first = h; h < first + G; ++h) {
      const HeadRows at = head_rows(s, b, h);
      const float* q = qkv + at.q;  // (T, hd), row stride ld; likewise k, v and their gradients
      const float* k = qkv + at.k;
      const float* v = qkv + at.v;
      float* dq = dqkv + at.q;
      float* dk = dqkv + at.k;
      float* dv = dqkv + at.v;
      const float beta = h == first ? 0.f : 1.f;
      const int64_t bh = b * s.H + h;
      const float* a = att ? att + bh * T * T : nullptr;  // (T, T)
      if (!a) {
        float* recomputed = slot(ws, T, 0);
        probabilities(q, k, T, hd, ld, scale, recomputed);
        a = recomputed;
      }
      const float* g = dy + b * T * C + h * hd;  // (T, hd), row stride C
      float* da = slot(ws, T, 1);                // (T, T)
      // da (T, T) = g (T, hd) . v^T (hd, T);  dv (T, hd) (+)= a^T (T, T) . g (T, hd)
      sgemm(false, true, T, T, hd, 1.f, g, C, v, ld, 0.f, da, T);
      sgemm(true, false, T, hd, T, 1.f, a, T, g, C, beta, dv, ld);
      causal_softmax_backward(a, da, T);  // da now holds d(scores / scale)
      // dq (T, hd) = da (T, T) . k (T, hd) * scale;  dk (T, hd) (+)= da^T (T, T) . q (T, hd) * scale
      sgemm(false, false, T, hd, T, scale, da, T, k, ld, 0.f, dq, ld);
      sgemm(true, false, T, hd, T, scale, da, T, q, ld, beta, dk, ld);
    }
  }
}

}  // namespace subdp::cpu
