// Causal self-attention forward on tensor cores (precision = "bf16"): the flash forward of
// attention.cu (Dao et al., arXiv:2205.14135, algorithm 1; online softmax, causal tiles
// skipped, no (T, T) matrix) arranged as FlashAttention-2 (attention_tc.cuh): each warp keeps
// its 16 query rows' Q, scores, probabilities and output in registers, and shared memory holds
// only the block's Q (read once), a key tile and a value tile, as bf16 rows, which ldmatrix
// loads into operands (the value tile transposed on the way, for P V). The
// rounded probabilities of two adjacent 8-key tiles of S are, register for register, the A
// operand of P V over those 16 keys, so P never leaves the registers.
//
// Q, K and V are rounded to bf16 as they are loaded (or read as bf16, from the layer's kept
// copy); P is rounded to bf16 before P V, and the row sums that normalise the output add the
// same rounded values, so each output row is a convex combination of the value rows. Sums run
// in a fixed order: a run repeats bit for bit.
#include <cmath>

#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/attention_view.cuh"

namespace subdp::cuda {

namespace tc {

namespace {

/// The forward block: 64 query rows (4 warps of 16) against key tiles of BC rows. A row stride
/// of (HD + 8) bf16 puts the 8 rows an ldmatrix phase reads, 16 bytes each, on 8 disjoint sets
/// of 4 banks (stride 4, 12 or 20 words mod 32), so they do not conflict.
template <int HD>
struct ForwardLayout {
  static constexpr int BR = 64;
  static constexpr int BC = HD <= 64 ? 64 : 32;  // 32 at width 128 bounds registers and shared memory
  static constexpr int LD = HD + 8;              // q (BR, LD), k and v (BC, LD), bf16
  static constexpr int q_bytes = BR * LD * 2, k_bytes = BC * LD * 2;
  static constexpr int bytes = q_bytes + 2 * k_bytes;
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(q_bytes % 16 == 0 && k_bytes % 16 == 0, "16-byte aligned arrays");
};

/// The warp's running state for its 16 rows: this lane's rows g and g + 8 ([0], [1]).
template <int HD>
struct RowState {
  float o[HD / 8][4];  // output accumulators: 8-column tile n, the mma's c layout
  float m[2];          // running max of the scaled scores, base 2
  float l[2];          // this lane's share of the running sum of the rounded probabilities
};

/// The online softmax step for one key tile (keys j0 ..): scales s to base-2 scores (scale2
/// = log2(e) / sqrt(hd)), masks them unless `interior` (every key of the tile visible to every
/// row of the warp), updates the running max, rescales o and l, and returns the rounded
/// probabilities in pa as the A operands of P V. i0: this lane's first row (the second is
/// i0 + 8).
template <int HD>
__device__ void tile_softmax(float (&s)[ForwardLayout<HD>::BC / 8][4], RowState<HD>& st, int i0, int j0, int T,
                             float scale2, bool interior, uint32_t (&pa)[ForwardLayout<HD>::BC / 16][4]) {
  constexpr int NT = ForwardLayout<HD>::BC / 8;
  const int t = lane_place().t;
  float mx[2] = {-INFINITY, -INFINITY};
  for (int nt = 0; nt < NT; ++nt)
    for (int e = 0; e < 4; ++e) {
      const int i = i0 + (e < 2 ? 0 : 8), j = j0 + nt * 8 + 2 * t + (e & 1);
      s[nt][e] = interior || (i < T && j <= i) ? s[nt][e] * scale2 : -INFINITY;
      mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
    }
  float alpha[2], m_new[2];
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    m_new[r] = fmaxf(st.m[r], mx[r]);
    alpha[r] = st.m[r] == -INFINITY ? 0.f : exp2f(st.m[r] - m_new[r]);
    st.m[r] = m_new[r];
    st.l[r] *= alpha[r];
  }
  for (int n = 0; n < HD / 8; ++n)
    for (int e = 0; e < 4; ++e) st.o[n][e] *= alpha[e / 2];
  for (int nt = 0; nt < NT; ++nt) {
    __nv_bfloat16 p[4];
    for (int e = 0; e < 4; ++e) {
      p[e] = __float2bfloat16(s[nt][e] == -INFINITY ? 0.f : exp2f(s[nt][e] - m_new[e / 2]));
      st.l[e / 2] += __bfloat162float(p[e]);
    }
    to_a_operand(pa, nt, p);
  }
}

/// Writes this lane's two rows: y and (unless null) the rows' log-sum-exp, natural or in base 2
/// (lse_base2: the backward kernels' form, kept for them), or with kForBackward the rows'
/// base-2 log-sum-exp lse2 (of the base-2 scores), delta = rowsum(dy * y) and dy16 (unless
/// null), dy rounded to bf16. The head width is a multiple of 16 (supported), so a lane's
/// column pairs 2t, 2t + 1 are whole.
template <int HD, bool kForBackward, class In>
__device__ void finish_rows(RowState<HD>& st, const HeadViewOf<In>& v, const float* dy, float* y, float* lse,
                            float* delta, __nv_bfloat16* dy16, int i0, int T, int hd, bool lse_base2) {
  const int t = lane_place().t;
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + 8 * r;
    const float l = group_sum(st.l[r]), inv = 1.f / l;
    const int d_end = i < T ? hd : 0;  // a row past T writes nothing
    const int64_t at = v.y_off + static_cast<int64_t>(i) * v.C;
    float part = 0.f;
    for (int n = 0; n < HD / 8; ++n) {
      const int d = n * 8 + 2 * t;
      if (d >= d_end) continue;
      const float o0 = st.o[n][2 * r] * inv, o1 = st.o[n][2 * r + 1] * inv;
      if constexpr (kForBackward) {
        const float g0 = dy[at + d], g1 = dy[at + d + 1];
        part += g0 * o0;
        part += g1 * o1;
        // (The null test costs nothing and, measured with ptxas, keeps the bf16 kernel at width
        // 64 at 127 registers, 4 blocks an SM, against 144 and 3 without it.)
        if (dy16) mma::store_pair(dy16 + at + d, mma::pack(__float2bfloat16(g0), __float2bfloat16(g1)));
      } else {
        y[at + d] = o0;
        y[at + d + 1] = o1;
      }
    }
    if constexpr (kForBackward) part = group_sum(part);
    if (i >= T || t != 0) continue;
    if constexpr (kForBackward) {
      lse[v.stat + i] = st.m[r] + log2f(l);  // base 2: the backward kernels' form
      delta[v.stat + i] = part;
    } else if (lse) {
      const float lse2 = st.m[r] + log2f(l);               // as the statistics pass's, bit for bit
      lse[v.stat + i] = lse_base2 ? lse2 : lse2 / kLog2e;  // else the natural log
    }
  }
}

template <int HD, bool kForBackward, class In>
__global__ void __launch_bounds__(128)
    flash_forward_tc_kernel(const In* qkv, const float* dy, float* y, float* lse, float* delta, __nv_bfloat16* dy16,
                            int T, int H, int KV, int hd, float scale, bool lse_base2) {
  using L = ForwardLayout<HD>;
  alignas(16) __shared__ unsigned char smem[L::bytes];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes + L::k_bytes);

  const HeadViewOf<In> v = query_view(qkv, T, H, KV, hd);
  const int warp = static_cast<int>(threadIdx.x) / 32, g = lane_place().g;
  // The last query tiles see the most keys: they start first.
  const int q0 = (static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x)) * L::BR, w0 = warp * 16;
  const int i0 = q0 + w0 + g;  // this lane's rows: i0 and i0 + 8

  // Key and value tiles are staged asynchronously where they can be (stage_bf16): K(0) while
  // Q loads, then V(j) while the warps compute S = Q K(j)^T and its softmax, K(j + 1) while
  // they compute P V(j).
  const int keys = min(T, q0 + L::BR);  // no row of the block sees past it
  stage_bf16<HD>(ks, L::LD, v.k, v.ld, 0, L::BC, T, hd);
  async::commit();
  load_bf16<HD>(qs, L::LD, v.q, v.ld, q0, L::BR, T, hd);
  __syncthreads();
  uint32_t qa[HD / kTile][4];
  load_a_rows(qa, qs, L::LD, w0);
  RowState<HD> st;
  zero(st.o);
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.f;

  for (int j0 = 0; j0 < keys; j0 += L::BC) {
    async::wait<0>();
    __syncthreads();  // K(j) has landed; every warp is done with V(j - 1)
    stage_bf16<HD>(vs, L::LD, v.v, v.ld, j0, L::BC, T, hd);
    async::commit();
    // The warp's rows are below T and see a key of this tile.
    const bool active = q0 + w0 < T && j0 <= q0 + w0 + kTile - 1;
    uint32_t pa[L::BC / 16][4];
    if (active) {
      float s[L::BC / 8][4];
      zero(s);
      mma_rows(s, qa, ks, L::LD);  // S = Q K^T
      const bool interior = j0 + L::BC - 1 <= q0 + w0 && q0 + w0 + kTile <= T;
      tile_softmax<HD>(s, st, i0, j0, T, scale * kLog2e, interior, pa);
    }
    __syncthreads();  // every warp is done with K(j)
    if (j0 + L::BC < keys) stage_bf16<HD>(ks, L::LD, v.k, v.ld, j0 + L::BC, L::BC, T, hd);
    async::commit();  // (an empty group after the last tile)
    async::wait<1>();
    __syncthreads();                            // V(j) has landed
    if (active) mma_cols(st.o, pa, vs, L::LD);  // O += P V
  }
  finish_rows<HD, kForBackward>(st, v, dy, y, lse, delta, dy16, i0, T, hd, lse_base2);
}

template <int HD, bool kForBackward, class In>
void launch(const AttentionShape& s, const In* qkv, const float* dy, float* y, float* lse, float* delta,
            __nv_bfloat16* dy16, cudaStream_t stream, bool lse_base2 = false) {
  constexpr int BR = ForwardLayout<HD>::BR;
  const dim3 grid(static_cast<unsigned>((s.T + BR - 1) / BR), static_cast<unsigned>(s.B * s.H));
  SUBDP_LAUNCH(grid, 128, 0, stream, flash_forward_tc_kernel<HD, kForBackward, In>)
  (qkv, dy, y, lse, delta, dy16, s.T, s.H, s.kv_heads(), s.hd, 1.f / std::sqrt(static_cast<float>(s.hd)), lse_base2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class In>
void attention_stats(const AttentionShape& s, const In* qkv, const float* dy, float* lse2, float* delta,
                     __nv_bfloat16* dy16, cudaStream_t stream) {
  with_width(s.hd,
             [&](auto tag) { launch<decltype(tag)::value, true>(s, qkv, dy, nullptr, lse2, delta, dy16, stream); });
}

template void attention_stats(const AttentionShape&, const float*, const float*, float*, float*, bf16*, cudaStream_t);
template void attention_stats(const AttentionShape&, const bf16*, const float*, float*, float*, bf16*, cudaStream_t);

namespace {

template <class In>
bool forward(const AttentionShape& s, const In* qkv, float* y, float* lse, cudaStream_t stream, bool lse_base2) {
  if (!supported(s)) return false;
  if (s.B <= 0 || s.T <= 0 || s.H <= 0) return true;
  with_width(s.hd, [&](auto tag) {
    launch<decltype(tag)::value, false>(s, qkv, nullptr, y, lse, nullptr, nullptr, stream, lse_base2);
  });
  return true;
}

}  // namespace

}  // namespace tc

bool attention_tc_supported(const AttentionShape& s) { return tc::supported(s); }

bool attention_forward_tc(const AttentionShape& s, const float* qkv, float* y, float* lse, cudaStream_t stream,
                          bool lse_base2) {
  return tc::forward(s, qkv, y, lse, stream, lse_base2);
}

bool attention_forward_tc(const AttentionShape& s, const bf16* qkv, float* y, float* lse, cudaStream_t stream,
                          bool lse_base2) {
  return tc::forward(s, qkv, y, lse, stream, lse_base2);
}

}  // namespace subdp::cuda
