// Causal self-attention backward on tensor cores (precision = "bf16"): FlashAttention's
// backward (Dao et al., arXiv:2205.14135, algorithm 2) split as attention.cu splits it, into a
// dk / dv kernel over key rows and a dq kernel over query rows, so nothing is summed with
// atomics and a run repeats bit for bit. The statistics come from the tensor-core forward
// (tc::attention_stats: each row's log-sum-exp and delta = rowsum(dy * y)).
//
// Each warp keeps its 16 rows' operands (K and V, or Q and dy) and its accumulators (dK and
// dV, or dQ) as fragments for the whole kernel. Per tile of the other side's rows it forms
// S (= Q K^T) and dP (= dy V^T) by warp matrix products, then, two lanes a row on the floats
// in shared memory, P = exp(scale S - lse) under the causal mask and dS = P (dP - delta),
// rounded to bf16, and accumulates dV += P^T dy, dK += dS^T Q, dQ += dS K. dK and dQ are
// scaled by 1 / sqrt(hd) once, at the end. A key / value head sums its query heads in order.
#include <cmath>

#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/attention_view.cuh"

namespace subdp::cuda {

namespace tc {

namespace {

/// The dk / dv block's shared memory: query and dy tiles (kQueries, QLD) bf16 (together they
/// first stage the block's K, then V, BK rows), S^T and dP^T (BK, SLD) floats, P^T and dS^T
/// (BK, PLD) bf16, the tile's lse and delta; after the loop, the output staging (BK, OLD)
/// floats over all of it.
template <int HD>
struct DkdvLayout {
  static constexpr int BK = block_rows<HD>();
  static constexpr int QLD = HD + 8, SLD = kQueries + 4, PLD = kQueries + 8, OLD = HD + 4;
  static constexpr int q_bytes = kQueries * QLD * 2, s_bytes = BK * SLD * 4, p_bytes = BK * PLD * 2;
  static constexpr int loop_bytes = 2 * q_bytes + 2 * s_bytes + 2 * p_bytes + 2 * kQueries * 4;
  static constexpr int bytes = loop_bytes > BK* OLD * 4 ? loop_bytes : BK* OLD * 4;
  static_assert(BK <= 2 * kQueries, "K and V are staged in the q and dy tiles");
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(q_bytes % 32 == 0 && s_bytes % 32 == 0 && p_bytes % 32 == 0, "32-byte aligned arrays");
};

/// The dq block's shared memory: key and value tiles (kKeys, KLD) bf16, S and dP (BR, SLD)
/// floats, dS (BR, PLD) bf16; before the loop Q and dy staged (2 BR, QLD) bf16, after it the
/// output staging (BR, OLD) floats, each over all of it.
template <int HD>
struct DqLayout {
  static constexpr int BR = block_rows<HD>();
  static constexpr int KLD = HD + 8, QLD = HD + 8, SLD = kKeys + 4, PLD = kKeys + 8, OLD = HD + 4;
  static constexpr int k_bytes = kKeys * KLD * 2, s_bytes = BR * SLD * 4, p_bytes = BR * PLD * 2;
  static constexpr int loop_bytes = 2 * k_bytes + 2 * s_bytes + p_bytes;
  static constexpr int stage_bytes = 2 * BR * QLD * 2, out_bytes = BR * OLD * 4;
  static constexpr int bytes = loop_bytes > stage_bytes  ? (loop_bytes > out_bytes ? loop_bytes : out_bytes)
                               : stage_bytes > out_bytes ? stage_bytes
                                                         : out_bytes;
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(k_bytes % 32 == 0 && s_bytes % 32 == 0 && (BR * QLD * 2) % 32 == 0, "32-byte aligned arrays");
};

static_assert(kQueries == 2 * kTile, "accumulate takes tiles of 32 rows");

/// acc (16 x HD, HD / 16 fragments) += p (16 x 32 bf16, rows pld apart) times 32 bf16 rows of
/// width HD (rows bld apart) at b.
template <int HD>
__device__ void accumulate(FragAcc (&acc)[HD / kTile], const __nv_bfloat16* p, int pld, const __nv_bfloat16* b,
                           int bld) {
  for (int kk = 0; kk < 2; ++kk) {
    FragA pf;
    wmma::load_matrix_sync(pf, p + kk * kTile, pld);
    for (int n = 0; n < HD / kTile; ++n) {
      FragBRow bf;
      wmma::load_matrix_sync(bf, b + kk * kTile * bld + n * kTile, bld);
      wmma::mma_sync(acc[n], pf, bf, acc[n]);
    }
  }
}

/// dk and dv of the BK key rows of block (blockIdx.x, b * KV + g).
template <int HD, class In>
__global__ void __launch_bounds__(128)
    flash_backward_dkdv_tc_kernel(const In* qkv, const float* dy, const float* lse, const float* delta, float* dqkv,
                                  int T, int H, int KV, int hd, float scale) {
  using L = DkdvLayout<HD>;
  alignas(32) __shared__ unsigned char smem[L::bytes];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* gs = reinterpret_cast<__nv_bfloat16*>(smem + L::q_bytes);
  float* st = reinterpret_cast<float*>(smem + 2 * L::q_bytes);
  float* dpt = reinterpret_cast<float*>(smem + 2 * L::q_bytes + L::s_bytes);
  auto* pt = reinterpret_cast<__nv_bfloat16*>(smem + 2 * L::q_bytes + 2 * L::s_bytes);
  auto* dst = reinterpret_cast<__nv_bfloat16*>(smem + 2 * L::q_bytes + 2 * L::s_bytes + L::p_bytes);
  float* ls = reinterpret_cast<float*>(smem + 2 * L::q_bytes + 2 * L::s_bytes + 2 * L::p_bytes);
  float* ds = ls + kQueries;

  const int b = static_cast<int>(blockIdx.y) / KV, g = static_cast<int>(blockIdx.y) % KV, G = H / KV;
  const HeadViewOf<In> kv = head_view(qkv, T, H, KV, hd, b, g * G);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int j0 = static_cast<int>(blockIdx.x) * L::BK, w0 = warp * kTile;
  const int rr = w0 + lane / 2, half = lane % 2, j = j0 + rr;  // this lane's key row

  FragA kf[HD / kTile], vf[HD / kTile];
  load_bf16<HD>(qs, L::QLD, kv.k, kv.ld, j0, L::BK, T, hd);
  __syncthreads();
  load_row_fragments<HD>(kf, qs, L::QLD, w0);
  __syncthreads();
  load_bf16<HD>(qs, L::QLD, kv.v, kv.ld, j0, L::BK, T, hd);
  __syncthreads();
  load_row_fragments<HD>(vf, qs, L::QLD, w0);
  FragAcc dka[HD / kTile], dva[HD / kTile];
  for (int n = 0; n < HD / kTile; ++n) {
    wmma::fill_fragment(dka[n], 0.f);
    wmma::fill_fragment(dva[n], 0.f);
  }
  for (int h = g * G; h < (g + 1) * G; ++h) {
    const HeadViewOf<In> v = head_view(qkv, T, H, KV, hd, b, h);
    for (int i0 = j0; i0 < T; i0 += kQueries) {  // causal: queries i >= j
      __syncthreads();                           // every warp is done with the previous tile
      load_bf16<HD>(qs, L::QLD, v.q, v.ld, i0, kQueries, T, hd);
      load_bf16<HD>(gs, L::QLD, dy + v.y_off, v.C, i0, kQueries, T, hd);
      for (int r = threadIdx.x; r < kQueries; r += blockDim.x) {
        ls[r] = i0 + r < T ? lse[v.stat + i0 + r] : 0.f;
        ds[r] = i0 + r < T ? delta[v.stat + i0 + r] : 0.f;
      }
      __syncthreads();
      if (j0 + w0 >= T || i0 + kQueries - 1 < j0 + w0) continue;             // no key of the warp, or no query sees one
      times_rows_transposed<HD>(kf, qs, L::QLD, st + w0 * L::SLD, L::SLD);   // S^T = K Q^T
      times_rows_transposed<HD>(vf, gs, L::QLD, dpt + w0 * L::SLD, L::SLD);  // dP^T = V dy^T
      __syncwarp();
      for (int c = half; c < kQueries; c += 2) {  // even / odd columns: 2-way bank conflicts, not 4-way
        const int i = i0 + c;
        const float p = j < T && i < T && i >= j ? expf(scale * st[rr * L::SLD + c] - ls[c]) : 0.f;
        pt[rr * L::PLD + c] = __float2bfloat16(p);
        dst[rr * L::PLD + c] = __float2bfloat16(p * (dpt[rr * L::SLD + c] - ds[c]));
      }
      __syncwarp();
      accumulate<HD>(dva, pt + w0 * L::PLD, L::PLD, gs, L::QLD);   // dV += P^T dy
      accumulate<HD>(dka, dst + w0 * L::PLD, L::PLD, qs, L::QLD);  // dK += dS^T Q
    }
  }
  __syncthreads();  // the output staging covers every array
  float* stage = reinterpret_cast<float*>(smem);
  const bool row = j < T;
  const int64_t at = static_cast<int64_t>(j) * kv.ld;
  write_rows<HD>(dva, stage, L::OLD, w0, row ? dqkv + (kv.v - qkv) + at : nullptr, hd, 1.f);
  __syncwarp();
  write_rows<HD>(dka, stage, L::OLD, w0, row ? dqkv + (kv.k - qkv) + at : nullptr, hd, scale);
}

/// dq of the BR query rows of block (blockIdx.x, b * H + h).
template <int HD, class In>
__global__ void __launch_bounds__(128)
    flash_backward_dq_tc_kernel(const In* qkv, const float* dy, const float* lse, const float* delta, float* dqkv,
                                int T, int H, int KV, int hd, float scale) {
  using L = DqLayout<HD>;
  alignas(32) __shared__ unsigned char smem[L::bytes];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::k_bytes);
  float* s = reinterpret_cast<float*>(smem + 2 * L::k_bytes);
  float* dp = reinterpret_cast<float*>(smem + 2 * L::k_bytes + L::s_bytes);
  auto* dsb = reinterpret_cast<__nv_bfloat16*>(smem + 2 * L::k_bytes + 2 * L::s_bytes);

  const HeadViewOf<In> v = query_view(qkv, T, H, KV, hd);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int q0 = static_cast<int>(blockIdx.x) * L::BR, w0 = warp * kTile;
  const int rr = w0 + lane / 2, half = lane % 2, i = q0 + rr;  // this lane's query row

  auto* q_stage = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* g_stage = q_stage + L::BR * L::QLD;
  load_bf16<HD>(q_stage, L::QLD, v.q, v.ld, q0, L::BR, T, hd);
  load_bf16<HD>(g_stage, L::QLD, dy + v.y_off, v.C, q0, L::BR, T, hd);
  __syncthreads();
  FragA qf[HD / kTile], gf[HD / kTile];
  load_row_fragments<HD>(qf, q_stage, L::QLD, w0);
  load_row_fragments<HD>(gf, g_stage, L::QLD, w0);
  FragAcc dqa[HD / kTile];
  for (int n = 0; n < HD / kTile; ++n) wmma::fill_fragment(dqa[n], 0.f);
  const float lse_i = i < T ? lse[v.stat + i] : 0.f, delta_i = i < T ? delta[v.stat + i] : 0.f;
  const int keys = min(T, q0 + L::BR);  // no row of the block sees past it
  for (int j0 = 0; j0 < keys; j0 += kKeys) {
    __syncthreads();  // every warp is done with the previous tile (or the staging)
    load_bf16<HD>(ks, L::KLD, v.k, v.ld, j0, kKeys, T, hd);
    load_bf16<HD>(vs, L::KLD, v.v, v.ld, j0, kKeys, T, hd);
    __syncthreads();
    if (q0 + w0 >= T || j0 > q0 + w0 + kTile - 1) continue;  // the warp's rows are past T or see no key here
    times_rows_transposed<HD>(qf, ks, L::KLD, s + w0 * L::SLD, L::SLD);   // S = Q K^T
    times_rows_transposed<HD>(gf, vs, L::KLD, dp + w0 * L::SLD, L::SLD);  // dP = dy V^T
    __syncwarp();
    for (int c = half; c < kKeys; c += 2) {  // even / odd columns, as in the dK / dV kernel
      const int jj = j0 + c;
      const float p = i < T && jj <= i ? expf(scale * s[rr * L::SLD + c] - lse_i) : 0.f;
      dsb[rr * L::PLD + c] = __float2bfloat16(p * (dp[rr * L::SLD + c] - delta_i));
    }
    __syncwarp();
    accumulate<HD>(dqa, dsb + w0 * L::PLD, L::PLD, ks, L::KLD);  // dQ += dS K
  }
  __syncthreads();  // the output staging covers every array
  float* out = i < T ? dqkv + (v.q - qkv) + static_cast<int64_t>(i) * v.ld : nullptr;
  write_rows<HD>(dqa, reinterpret_cast<float*>(smem), L::OLD, w0, out, hd, scale);
}

template <int HD, class In>
void launch_backward(const AttentionShape& s, const In* qkv, const float* dy, float* dqkv, float* lse, float* delta,
                     cudaStream_t stream) {
  constexpr int rows = block_rows<HD>();
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  const unsigned tiles = static_cast<unsigned>((s.T + rows - 1) / rows);
  SUBDP_LAUNCH(dim3(tiles, static_cast<unsigned>(s.B * s.kv_heads())), rows * 2, 0, stream,
               flash_backward_dkdv_tc_kernel<HD, In>)
  (qkv, dy, lse, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
  CUDA_CHECK_LAUNCH();
  SUBDP_LAUNCH(dim3(tiles, static_cast<unsigned>(s.B * s.H)), rows * 2, 0, stream, flash_backward_dq_tc_kernel<HD, In>)
  (qkv, dy, lse, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
  CUDA_CHECK_LAUNCH();
}

template <class In>
bool backward(const AttentionShape& s, const In* qkv, const float* dy, float* dqkv, float* ws, cudaStream_t stream) {
  if (!supported(s)) return false;
  if (s.B <= 0 || s.T <= 0 || s.H <= 0) return true;
  float* lse = ws;
  float* delta = ws + static_cast<int64_t>(s.B) * s.H * s.T;
  attention_stats(s, qkv, dy, lse, delta, stream);
  with_width(s.hd, [&](auto tag) { launch_backward<decltype(tag)::value>(s, qkv, dy, dqkv, lse, delta, stream); });
  return true;
}

}  // namespace

}  // namespace tc

bool attention_backward_tc(const AttentionShape& s, const float* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream) {
  return tc::backward(s, qkv, dy, dqkv, ws, stream);
}

bool attention_backward_tc(const AttentionShape& s, const bf16* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream) {
  return tc::backward(s, qkv, dy, dqkv, ws, stream);
}

}  // namespace subdp::cuda
