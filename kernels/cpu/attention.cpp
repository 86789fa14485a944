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

/// Causal softmax in place of `rows` score rows (row r is query i0 + r, ld floats apart):
/// over columns j <= i0 + r, columns above that up to zero_to set to 0.
void causal_softmax(float* a, int ld, int i0, int rows, int zero_to) {
  for (int r = 0; r < rows; ++r) {
    const int i = i0 + r;
    float* row = a + static_cast<int64_t>(r) * ld;
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
    for (int j = i + 1; j < zero_to; ++j) row[j] = 0.f;
  }
}

/// Softmax backward in place of `rows` rows (query i0 + r, ld floats apart): d holds d(att) on
/// entry and d(scores) on exit, dS_ij = att_ij (dA_ij - sum_k att_ik dA_ik); zero above the
/// diagonal up to cols (att is zero there).
void causal_softmax_backward(const float* att, float* d, int ld, int i0, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const int i = i0 + r;
    const float* p = att + static_cast<int64_t>(r) * ld;
    float* g = d + static_cast<int64_t>(r) * ld;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= i; ++j) dot += p[j] * g[j];
#pragma omp simd
    for (int j = 0; j <= i; ++j) g[j] = p[j] * (g[j] - dot);
    for (int j = i + 1; j < cols; ++j) g[j] = 0.f;
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

/// Causal attention works in blocks of kRowBlock query rows: block [i0, i0 + rows) needs
/// only keys [0, i0 + rows), so the products skip the square's upper blocks (at T = 128, 10 of
/// its 16 blocks of 32 x 32 are computed).
constexpr int kRowBlock = 32;

/// Query rows [i0, i0 + rows) of a block and the keys they see, [0, keys).
struct RowBlock {
  int i0, rows, keys;
};
RowBlock row_block(int b, int T) {
  const int i0 = b * kRowBlock, rows = std::min(kRowBlock, T - i0);
  return {i0, rows, i0 + rows};
}
int row_blocks(int T) { return (T + kRowBlock - 1) / kRowBlock; }

/// Rows [i0, i0 + rows) of a (T, T) = causal softmax of q (T, hd) . k^T (hd, T) * scale, their
/// columns up to zero_to (>= keys) written; q and k with row stride ld, a's rows at a + i0 T.
/// The forward pass and the backward's recomputation both call this: same arithmetic.
void probabilities(const float* q, const float* k, const RowBlock& rb, int T, int hd, int ld, float scale, float* a,
                   int zero_to) {
  float* rows = a + static_cast<int64_t>(rb.i0) * T;
  sgemm(false, true, rb.rows, rb.keys, hd, scale, q + static_cast<int64_t>(rb.i0) * ld, ld, k, ld, 0.f, rows, T);
  causal_softmax(rows, T, rb.i0, rb.rows, zero_to);
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
    for (int blk = 0; blk < row_blocks(T); ++blk) {
      const RowBlock rb = row_block(blk, T);
      // Stored probabilities are whole rows (zero above the diagonal); a workspace's only the
      // columns the products read.
      probabilities(qkv + at.q, qkv + at.k, rb, T, hd, ld, scale, a, att ? T : rb.keys);
      // y rows (rows, hd) = a rows (rows, keys) . v (keys, hd), row stride C
      sgemm(false, false, rb.rows, hd, rb.keys, 1.f, a + static_cast<int64_t>(rb.i0) * T, T, qkv + at.v, ld, 0.f,
            y + (b * T + rb.i0) * C + h * hd, C);
    }
  }
}

namespace {

/// The pointers of one query head's backward: its q, k, v and their gradients (row stride ld),
/// dy (row stride C), probabilities and their gradient ((T, T), row stride T).
struct HeadGrads {
  const float *q, *k, *v, *g, *a;
  float *dq, *dk, *dv, *da;
};

/// One row block (query rows [i0, i0 + rows), keys [0, keys)) of a query head's backward:
/// dq's rows of the block written; dk's and dv's rows [0, keys) written (beta 0) or added to
/// (beta 1); the block's rows of p.da are scratch. p.a holds the block's probabilities.
void backward_block(const HeadGrads& p, const RowBlock& rb, int T, int hd, int ld, int C, float scale, float beta) {
  const int64_t r0 = rb.i0;
  const float* a = p.a + r0 * T;
  float* da = p.da + r0 * T;
  const float* g = p.g + r0 * C;
  // da (rows, keys) = g (rows, hd) . v^T;  dv (keys, hd) (+)= a^T (keys, rows) . g (rows, hd)
  sgemm(false, true, rb.rows, rb.keys, hd, 1.f, g, C, p.v, ld, 0.f, da, T);
  sgemm(true, false, rb.keys, hd, rb.rows, 1.f, a, T, g, C, beta, p.dv, ld);
  causal_softmax_backward(a, da, T, rb.i0, rb.rows, rb.keys);  // da now holds d(scores / scale)
  // dq rows (rows, hd) = da . k * scale;  dk (keys, hd) (+)= da^T . q rows * scale
  sgemm(false, false, rb.rows, hd, rb.keys, scale, da, T, p.k, ld, 0.f, p.dq + r0 * ld, ld);
  sgemm(true, false, rb.keys, hd, rb.rows, scale, da, T, p.q + r0 * ld, ld, beta, p.dk, ld);
}

}  // namespace

void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy, float* dqkv,
                        float* ws, int slots) {
  const int T = s.T, hd = s.hd, C = static_cast<int>(s.width()), ld = static_cast<int>(s.qkv_width());
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const int G = s.group();
  // One task per (sequence, key / value head): its query heads run in order, the first head's
  // last row block writing dk and dv and every other block adding to them, so no two threads
  // write the same rows.
  const int64_t tasks = static_cast<int64_t>(s.B) * s.kv_heads();
#pragma omp parallel for schedule(static) num_threads(thread_count(slots)) if (worth_threads(s))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t b = task / s.kv_heads();
    for (int64_t h = task % s.kv_heads() * G, first = h; h < first + G; ++h) {
      const HeadRows at = head_rows(s, b, h);
      const int64_t bh = b * s.H + h;
      float* recomputed = att ? nullptr : slot(ws, T, 0);
      const HeadGrads p{
          qkv + at.q,  qkv + at.k,  qkv + at.v,  dy + b * T * C + h * hd, att ? att + bh * T * T : recomputed,
          dqkv + at.q, dqkv + at.k, dqkv + at.v, slot(ws, T, 1)};
      // The last block sees every key, so taken first it writes (or, after the group's first
      // head, adds to) all of dk and dv; the others add to their keys' rows.
      for (int blk = row_blocks(T) - 1; blk >= 0; --blk) {
        const RowBlock rb = row_block(blk, T);
        if (recomputed) probabilities(p.q, p.k, rb, T, hd, ld, scale, recomputed, rb.keys);
        const bool writes = blk == row_blocks(T) - 1 && h == first;
        backward_block(p, rb, T, hd, ld, C, scale, writes ? 0.f : 1.f);
      }
    }
  }
}

}  // namespace subdp::cpu
