// Causal self-attention backward on tensor cores (precision = "bf16"): FlashAttention's
// backward (Dao et al., arXiv:2205.14135, algorithm 2) split as attention.cu splits it, into a
// dk / dv kernel over key rows and a dq kernel over query rows, so nothing is summed with
// atomics and a run repeats bit for bit. The statistics come from the tensor-core forward:
// each row's log-sum-exp in base 2 as it kept it, with delta = rowsum(dy * y) from its kept
// output (attention_delta), or both from the forward run again (tc::attention_stats); and dy
// is rounded to bf16 once, so that the kernels stage its tiles with cp.async as they do q, k, v.
//
// Each warp keeps its 16 rows' operands (K and V, or Q and dy) and its accumulators (dK and
// dV, or dQ) in registers for the whole kernel (attention_tc.cuh). Per tile of the other
// side's rows it forms S (= Q K^T, or S^T = K Q^T) and dP (= dy V^T, or dP^T = V dy^T) as
// mma.sync accumulators, then in place P = exp(scale S - lse) under the causal mask and
// dS = P (dP - delta), rounded to bf16 into A operands, and accumulates dV += P^T dy,
// dK += dS^T Q, dQ += dS K against the same tile's rows in shared memory, which ldmatrix
// transposes on the way into B operands (each tile is read from global memory once). dK and dQ are
// scaled by 1 / sqrt(hd) once, at the end. A key / value head sums its query heads in order.
#include <cmath>

#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/attention_view.cuh"

namespace subdp::cuda {

namespace tc {

namespace {

/// The dk / dv block: BK = 64 key rows (4 warps of 16) against query tiles of BQ rows. Shared
/// memory holds two query tiles (the next lands while this one is used), each its Q and dy as
/// bf16 rows (read as they are for S^T and dP^T, transposed by ldmatrix for dK and dV) and its
/// base-2 log-sum-exps and deltas; before the loop K and V are staged over the same bytes. A
/// row stride of (HD + 8) bf16 keeps an ldmatrix's 8 rows off each other's banks.
template <int HD>
struct DkdvLayout {
  static constexpr int BK = 64;
  static constexpr int BQ = HD <= 32 ? 64 : HD <= 64 ? 32 : 16;  // bounds the registers
  static constexpr int LD = HD + 8;
  static constexpr int rows_bytes = BQ * LD * 2;
  static constexpr int tile_bytes = 2 * rows_bytes + 2 * BQ * 4;  // Q, dy, lse2, delta
  static constexpr int loop_bytes = 2 * tile_bytes;
  static constexpr int stage_bytes = 2 * BK * LD * 2;
  static constexpr int bytes = loop_bytes > stage_bytes ? loop_bytes : stage_bytes;
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(rows_bytes % 16 == 0 && tile_bytes % 16 == 0 && BK * LD * 2 % 16 == 0, "16-byte aligned arrays");
};

/// The dq block: BR = 64 query rows (4 warps of 16) against key tiles of BC rows. Shared
/// memory holds the tile's K and V as bf16 rows (for S and dP; K transposed by ldmatrix for
/// dQ), twice (the next tile's land while this one is used); before the loop Q and dy are
/// staged over the same bytes.
template <int HD>
struct DqLayout {
  static constexpr int BR = 64;
  static constexpr int BC = HD <= 64 ? 64 : 32;
  static constexpr int LD = HD + 8;
  static constexpr int rows_bytes = BC * LD * 2;
  static constexpr int loop_bytes = 4 * rows_bytes;
  static constexpr int stage_bytes = 2 * BR * LD * 2;
  static constexpr int bytes = loop_bytes > stage_bytes ? loop_bytes : stage_bytes;
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(rows_bytes % 16 == 0 && BR * LD * 2 % 16 == 0, "16-byte aligned arrays");
};

/// The backward kernels' minimum resident blocks an SM (their __launch_bounds__), which caps
/// ptxas's registers: 4 at width 16 and 3 at 32 and 64 (at most 128 and 168 registers, a few
/// bytes spilled at 32 and 64), no cap at 128 (the kernels need more than 168).
template <int HD>
constexpr int kMinBlocksPerSm = HD <= 16   ? 4
                                : HD <= 64 ? 3
                                           : 1;

/// P (or P^T) and dS (or dS^T) of one tile from the accumulators s and dp, rounded to bf16
/// into A operands: pa (with kWithP) and dsa. Element e of 8-column tile n is the lane's row r
/// = e / 2 (of its two) and the tile's column c = 8 n + 2t + (e & 1); unless `interior` (every
/// element visible), visible(r, c) says whether the causal mask keeps it; lse_of(r, c) /
/// delta_of(r, c) give its query's statistics, the log-sum-exp in base 2 (P = 2^(scale2 S -
/// lse2), scale2 = log2(e) / sqrt(hd)).
template <bool kWithP, int N, class Visible, class Lse, class Delta>
__device__ void probabilities_and_score_grads(const float (&s)[N][4], const float (&dp)[N][4], float scale2,
                                              bool interior, Visible visible, Lse lse_of, Delta delta_of,
                                              uint32_t (&pa)[N / 2][4], uint32_t (&dsa)[N / 2][4]) {
  const int t = lane_place().t;
  for (int n = 0; n < N; ++n) {
    __nv_bfloat16 p[4], ds[4];
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2, c = n * 8 + 2 * t + (e & 1);
      const float pe = interior || visible(r, c) ? exp2f(fmaf(scale2, s[n][e], -lse_of(r, c))) : 0.f;
      p[e] = __float2bfloat16(pe);
      ds[e] = __float2bfloat16(pe * (dp[n][e] - delta_of(r, c)));
    }
    if constexpr (kWithP) to_a_operand(pa, n, p);
    to_a_operand(dsa, n, ds);
  }
}

/// One query tile of the dk / dv kernel in shared memory (DkdvLayout::tile_bytes at `at`).
template <int HD>
struct DkdvTile {
  __nv_bfloat16 *q, *dy;  // (BQ, LD) each
  float *lse2, *delta;    // BQ each

  __device__ explicit DkdvTile(unsigned char* at) {
    using L = DkdvLayout<HD>;
    q = reinterpret_cast<__nv_bfloat16*>(at);
    dy = q + L::BQ * L::LD;
    lse2 = reinterpret_cast<float*>(at + 2 * L::rows_bytes);
    delta = lse2 + L::BQ;
  }

  /// Issues the copies of query rows i0 .. i0 + BQ - 1 of view v (q from qkv, dy from the bf16
  /// dy16, the statistics), asynchronously where they can be (stage_bf16), zeros past T. Every
  /// thread of the block takes part; the caller commits and waits.
  template <class In>
  __device__ void stage(const HeadViewOf<In>& v, const __nv_bfloat16* dy16, const float* lse2_rows,
                        const float* delta_rows, int i0, int T, int hd) {
    using L = DkdvLayout<HD>;
    stage_bf16<HD>(q, L::LD, v.q, v.ld, i0, L::BQ, T, hd);
    stage_bf16<HD>(dy, L::LD, dy16 + v.y_off, v.C, i0, L::BQ, T, hd);
    for (int r = threadIdx.x; r < L::BQ; r += blockDim.x) {
      const bool row = i0 + r < T;
      const int64_t at = v.stat + (row ? i0 + r : 0);
      async::copy4(lse2 + r, lse2_rows + at, row ? 4 : 0);
      async::copy4(delta + r, delta_rows + at, row ? 4 : 0);
    }
  }
};

/// dk and dv of the BK key rows of block (blockIdx.x, b * KV + g).
template <int HD, class In>
__global__ void __launch_bounds__(128, kMinBlocksPerSm<HD>)
    flash_backward_dkdv_tc_kernel(const In* qkv, const __nv_bfloat16* dy16, const float* lse2, const float* delta,
                                  float* dqkv, int T, int H, int KV, int hd, float scale) {
  using L = DkdvLayout<HD>;
  constexpr int K = HD / kTile, NQ = L::BQ / 8;
  alignas(16) __shared__ unsigned char smem[L::bytes];
  const auto tile = [&](int u) { return DkdvTile<HD>(smem + u % 2 * L::tile_bytes); };

  const int b = static_cast<int>(blockIdx.y) / KV, kvh = static_cast<int>(blockIdx.y) % KV, G = H / KV;
  const HeadViewOf<In> kv = head_view(qkv, T, H, KV, hd, b, kvh * G);
  const int warp = static_cast<int>(threadIdx.x) / 32, g = lane_place().g;
  const int j0 = static_cast<int>(blockIdx.x) * L::BK, w0 = warp * kTile;
  const int j = j0 + w0 + g;  // this lane's key rows: j and j + 8

  uint32_t ka[K][4], va[K][4];
  auto* k_stage = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* v_stage = k_stage + L::BK * L::LD;
  load_bf16<HD>(k_stage, L::LD, kv.k, kv.ld, j0, L::BK, T, hd);
  load_bf16<HD>(v_stage, L::LD, kv.v, kv.ld, j0, L::BK, T, hd);
  __syncthreads();
  load_a_rows(ka, k_stage, L::LD, w0);
  load_a_rows(va, v_stage, L::LD, w0);
  float dk[HD / 8][4], dv[HD / 8][4];
  zero(dk);
  zero(dv);
  // Query tiles u = 0 .. tiles - 1: the group's heads in order, each from row j0 (causal:
  // queries i >= j). Tile u + 1 (Q, dy and the statistics) lands while the warps work on tile u.
  const int per_head = (T - j0 + L::BQ - 1) / L::BQ, tiles = G * per_head;
  int head = kvh * G, i0 = j0;  // tile u's head and first query row
  // The tile after (h, row): the next BQ rows of head h, or row j0 of head h + 1.
  const auto next_head = [&](int h, int row) { return row + L::BQ < T ? h : h + 1; };
  const auto next_row = [&](int row) { return row + L::BQ < T ? row + L::BQ : j0; };
  const auto stage = [&](int u, int h, int row) {
    tile(u).stage(head_view(qkv, T, H, KV, hd, b, h), dy16, lse2, delta, row, T, hd);
  };
  __syncthreads();  // every warp has its K and V operands: the staging is overwritten next
  stage(0, head, i0);
  async::commit();
  for (int u = 0; u < tiles; ++u) {
    async::wait<0>();
    __syncthreads();  // tile u has landed; every warp is done with tile u - 1, whose buffer is next
    if (u + 1 < tiles) stage(u + 1, next_head(head, i0), next_row(i0));
    async::commit();  // (an empty group after the last tile)
    const DkdvTile<HD> x = tile(u);
    if (j0 + w0 < T && i0 + L::BQ - 1 >= j0 + w0) {  // a key of the warp, seen by a query of the tile
      float st[NQ][4], dpt[NQ][4];
      zero(st);
      zero(dpt);
      mma_rows(st, ka, x.q, L::LD);    // S^T = K Q^T
      mma_rows(dpt, va, x.dy, L::LD);  // dP^T = V dy^T
      uint32_t pa[NQ / 2][4], dsa[NQ / 2][4];
      const auto visible = [&](int r, int c) {
        const int key = j + 8 * r, query = i0 + c;
        return key < T && query < T && query >= key;
      };
      const auto lse_of = [&](int, int c) { return x.lse2[c]; };
      const auto delta_of = [&](int, int c) { return x.delta[c]; };
      const bool interior = i0 >= j0 + w0 + kTile - 1 && i0 + L::BQ <= T;  // every query sees every key
      probabilities_and_score_grads<true>(st, dpt, scale * kLog2e, interior, visible, lse_of, delta_of, pa, dsa);
      mma_cols(dv, pa, x.dy, L::LD);  // dV += P^T dy
      mma_cols(dk, dsa, x.q, L::LD);  // dK += dS^T Q
    }
    head = next_head(head, i0);
    i0 = next_row(i0);
  }
  const int64_t at = static_cast<int64_t>(j) * kv.ld, next = 8 * kv.ld;
  float* dv_rows = dqkv + (kv.v - qkv) + at;
  float* dk_rows = dqkv + (kv.k - qkv) + at;
  write_rows(dv, j < T ? dv_rows : nullptr, j + 8 < T ? dv_rows + next : nullptr, hd, 1.f);
  write_rows(dk, j < T ? dk_rows : nullptr, j + 8 < T ? dk_rows + next : nullptr, hd, scale);
}

/// dq of the BR query rows of block (blockIdx.x, b * H + h).
template <int HD, class In>
__global__ void __launch_bounds__(128, kMinBlocksPerSm<HD>)
    flash_backward_dq_tc_kernel(const In* qkv, const __nv_bfloat16* dy16, const float* lse2, const float* delta,
                                float* dqkv, int T, int H, int KV, int hd, float scale) {
  using L = DqLayout<HD>;
  constexpr int K = HD / kTile, NK = L::BC / 8;
  alignas(16) __shared__ unsigned char smem[L::bytes];
  // Tile t's K and V, (BC, LD) each, in buffer t % 2.
  const auto k_buffer = [&](int t) { return reinterpret_cast<__nv_bfloat16*>(smem + t % 2 * 2 * L::rows_bytes); };
  const auto v_buffer = [&](int t) { return k_buffer(t) + L::BC * L::LD; };

  const HeadViewOf<In> v = query_view(qkv, T, H, KV, hd);
  const int warp = static_cast<int>(threadIdx.x) / 32, g = lane_place().g;
  // The last query tiles see the most keys: they start first.
  const int q0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * L::BR, w0 = warp * kTile;
  const int i = q0 + w0 + g;  // this lane's query rows: i and i + 8

  uint32_t qa[K][4], ga[K][4];
  auto* q_stage = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* g_stage = q_stage + L::BR * L::LD;
  stage_bf16<HD>(q_stage, L::LD, v.q, v.ld, q0, L::BR, T, hd);
  stage_bf16<HD>(g_stage, L::LD, dy16 + v.y_off, v.C, q0, L::BR, T, hd);
  async::commit();
  float lse_r[2], delta_r[2];  // lse in base 2; loaded while the copies land
  for (int r = 0; r < 2; ++r) {
    const bool row = i + 8 * r < T;
    lse_r[r] = row ? lse2[v.stat + i + 8 * r] : 0.f;
    delta_r[r] = row ? delta[v.stat + i + 8 * r] : 0.f;
  }
  async::wait<0>();
  __syncthreads();
  load_a_rows(qa, q_stage, L::LD, w0);
  load_a_rows(ga, g_stage, L::LD, w0);
  float dq[HD / 8][4];
  zero(dq);
  // Key tiles t = 0 .. tiles - 1, staged asynchronously where they can be (stage_bf16):
  // K(t + 1) and V(t + 1) land while the warps work on tile t.
  const int keys = min(T, q0 + L::BR);  // no row of the block sees past it
  const int tiles = (keys + L::BC - 1) / L::BC;
  __syncthreads();  // every warp has its Q and dy operands: the staging is overwritten next
  stage_bf16<HD>(k_buffer(0), L::LD, v.k, v.ld, 0, L::BC, T, hd);
  stage_bf16<HD>(v_buffer(0), L::LD, v.v, v.ld, 0, L::BC, T, hd);
  async::commit();
  for (int t = 0; t < tiles; ++t) {
    const int j0 = t * L::BC;
    async::wait<0>();
    __syncthreads();  // tile t has landed; every warp is done with tile t - 1, whose buffer is next
    if (t + 1 < tiles) {
      stage_bf16<HD>(k_buffer(t + 1), L::LD, v.k, v.ld, j0 + L::BC, L::BC, T, hd);
      stage_bf16<HD>(v_buffer(t + 1), L::LD, v.v, v.ld, j0 + L::BC, L::BC, T, hd);
    }
    async::commit();
    if (q0 + w0 >= T || j0 > q0 + w0 + kTile - 1) continue;  // the warp's rows are past T or see no key here
    const __nv_bfloat16* ks = k_buffer(t);
    float s[NK][4], dp[NK][4];
    zero(s);
    zero(dp);
    mma_rows(s, qa, ks, L::LD);            // S = Q K^T
    mma_rows(dp, ga, v_buffer(t), L::LD);  // dP = dy V^T
    uint32_t dsa[NK / 2][4], unused[NK / 2][4];
    const auto visible = [&](int r, int c) {
      const int query = i + 8 * r, key = j0 + c;
      return query < T && key <= query;
    };
    const auto lse_of = [&](int r, int) { return lse_r[r]; };
    const auto delta_of = [&](int r, int) { return delta_r[r]; };
    const bool interior = j0 + L::BC - 1 <= q0 + w0 && q0 + w0 + kTile <= T;  // every row sees every key
    probabilities_and_score_grads<false>(s, dp, scale * kLog2e, interior, visible, lse_of, delta_of, unused, dsa);
    mma_cols(dq, dsa, ks, L::LD);  // dQ += dS K
  }
  float* rows = dqkv + (v.q - qkv) + static_cast<int64_t>(i) * v.ld;
  write_rows(dq, i < T ? rows : nullptr, i + 8 < T ? rows + 8 * v.ld : nullptr, hd, scale);
}

template <int HD, class In>
void launch_backward(const AttentionShape& s, const In* qkv, const __nv_bfloat16* dy16, float* dqkv, const float* lse2,
                     const float* delta, cudaStream_t stream) {
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  const auto tiles = [&](int rows) { return static_cast<unsigned>((s.T + rows - 1) / rows); };
  SUBDP_LAUNCH(dim3(tiles(DkdvLayout<HD>::BK), static_cast<unsigned>(s.B * s.kv_heads())), 128, 0, stream,
               flash_backward_dkdv_tc_kernel<HD, In>)
  (qkv, dy16, lse2, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
  CUDA_CHECK_LAUNCH();
  SUBDP_LAUNCH(dim3(tiles(DqLayout<HD>::BR), static_cast<unsigned>(s.B * s.H)), 128, 0, stream,
               flash_backward_dq_tc_kernel<HD, In>)
  (qkv, dy16, lse2, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
  CUDA_CHECK_LAUNCH();
}

/// Where the backward's workspace holds lse2 and delta ((B, H, T) floats each) and dy16
/// ((B, T, H*hd) bf16, 16-byte aligned when ws is).
struct BackwardWorkspace {
  float *lse2, *delta;
  __nv_bfloat16* dy16;
  static int64_t stats_floats(const AttentionShape& s) {
    return (2 * static_cast<int64_t>(s.B) * s.H * s.T + 3) / 4 * 4;  // a multiple of 16 bytes
  }
  static int64_t floats(const AttentionShape& s) {
    return stats_floats(s) + (static_cast<int64_t>(s.B) * s.T * s.H * s.hd + 1) / 2;
  }
  explicit BackwardWorkspace(const AttentionShape& s, float* ws)
      : lse2(ws),
        delta(ws + static_cast<int64_t>(s.B) * s.H * s.T),
        dy16(reinterpret_cast<__nv_bfloat16*>(ws + stats_floats(s))) {}
};

/// kept: the forward's base-2 log-sum-exp and its kept output stand in for the statistics
/// pass (the forward's products again): delta and dy16 from one pass over y and dy.
template <class In>
bool backward(const AttentionShape& s, const In* qkv, const float* dy, float* dqkv, float* ws, cudaStream_t stream,
              const AttentionKept* kept) {
  if (!supported(s)) return false;
  if (s.B <= 0 || s.T <= 0 || s.H <= 0) return true;
  const BackwardWorkspace w(s, ws);
  if (kept)
    attention_delta(s, *kept, dy, w.delta, w.dy16, stream);
  else
    attention_stats(s, qkv, dy, w.lse2, w.delta, w.dy16, stream);
  const float* lse2 = kept ? kept->lse : w.lse2;
  with_width(s.hd,
             [&](auto tag) { launch_backward<decltype(tag)::value>(s, qkv, w.dy16, dqkv, lse2, w.delta, stream); });
  return true;
}

}  // namespace

}  // namespace tc

int64_t attention_tc_workspace_floats(const AttentionShape& s) { return tc::BackwardWorkspace::floats(s); }

bool attention_backward_tc(const AttentionShape& s, const float* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream, const AttentionKept* kept) {
  return tc::backward(s, qkv, dy, dqkv, ws, stream, kept);
}

bool attention_backward_tc(const AttentionShape& s, const bf16* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream, const AttentionKept* kept) {
  return tc::backward(s, qkv, dy, dqkv, ws, stream, kept);
}

}  // namespace subdp::cuda
