// Causal self-attention forward on tensor cores (precision = "bf16"): the flash forward of
// attention.cu (Dao et al., arXiv:2205.14135, algorithm 1; online softmax, causal tiles
// skipped, no (T, T) matrix) with the two products S = Q K^T and O += P V as warp matrix
// operations (nvcuda::wmma, m16n16k16, bf16 operands, float accumulators).
//
// A block takes BR query rows of one (sequence, head), one warp per 16 rows, and walks the
// key tiles of BC = 32 rows up to its last row. Q, K and V are rounded to bf16 as they are
// loaded into shared memory (or read as bf16, from the layer's kept copy); P is rounded to
// bf16 before P V, and the row sums that normalise the output add the same rounded values, so
// each output row is a convex combination of the value rows. Fragments' element layouts are
// unspecified, so everything done per row (the causal mask, the running max and sum, the
// rescale of O) runs on the scores and the output kept in shared memory as floats, two lanes
// per row, which take its even and its odd columns: with row strides of 4 words (mod 32) the
// 16 rows of a warp then fall on 16 bank pairs, a 2-way conflict, where a lane taking a
// contiguous half put 32 lanes on 8 banks (4-way). A row's sums run in a fixed order: a run
// repeats bit for bit.
#include <cmath>

#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/attention_view.cuh"

namespace subdp::cuda {

namespace tc {

namespace {

/// The forward block's shared memory; leading dimensions padded by 16 bytes (the wmma loads
/// need multiples of 16 bytes, and the padding spreads the banks).
template <int HD>
struct ForwardLayout {
  static constexpr int BR = block_rows<HD>();
  static constexpr int OLD = HD + 4;  // o: (BR, OLD) floats; first holds Q as bf16 (BR, QLD)
  static constexpr int QLD = HD + 8;
  static constexpr int KLD = HD + 8;     // k, v: (kKeys, KLD) bf16
  static constexpr int SLD = kKeys + 4;  // s: (BR, SLD) float scores
  static constexpr int PLD = kKeys + 8;  // p: (BR, PLD) bf16 probabilities
  static constexpr int o_bytes = BR * OLD * 4, kv_bytes = kKeys * KLD * 2;
  static constexpr int s_bytes = BR * SLD * 4, p_bytes = BR * PLD * 2;
  static constexpr int bytes = o_bytes + 2 * kv_bytes + s_bytes + p_bytes;
  static_assert(BR * QLD * 2 <= o_bytes, "Q is staged in o's space");
  static_assert(bytes <= 48 * 1024, "static shared memory above 48 KiB");
  static_assert(o_bytes % 32 == 0 && kv_bytes % 32 == 0 && s_bytes % 32 == 0, "32-byte aligned arrays");
};

/// Writes y, or with kForBackward the row's log-sum-exp and delta = rowsum(dy * y) instead.
template <int HD, bool kForBackward, class In>
__global__ void __launch_bounds__(128)
    flash_forward_tc_kernel(const In* qkv, const float* dy, float* y, float* lse, float* delta, int T, int H, int KV,
                            int hd, float scale) {
  using L = ForwardLayout<HD>;
  constexpr int BR = L::BR;
  alignas(32) __shared__ unsigned char smem[L::bytes];
  float* o = reinterpret_cast<float*>(smem);
  auto* q_stage = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem + L::o_bytes);
  auto* vs = reinterpret_cast<__nv_bfloat16*>(smem + L::o_bytes + L::kv_bytes);
  float* s = reinterpret_cast<float*>(smem + L::o_bytes + 2 * L::kv_bytes);
  auto* p = reinterpret_cast<__nv_bfloat16*>(smem + L::o_bytes + 2 * L::kv_bytes + L::s_bytes);

  const HeadViewOf<In> v = query_view(qkv, T, H, KV, hd);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int q0 = static_cast<int>(blockIdx.x) * BR, w0 = warp * kTile;  // block's and warp's first row
  // This lane's row (two lanes a row) and its half of the score and output columns (every other one).
  const int rr = w0 + lane / 2, half = lane % 2, i = q0 + rr;

  load_bf16<HD>(q_stage, L::QLD, v.q, v.ld, q0, BR, T, hd);
  __syncthreads();
  FragA qf[HD / kTile];
  load_row_fragments<HD>(qf, q_stage, L::QLD, w0);
  __syncthreads();  // every warp holds its Q before o overwrites the staging
  for (int e = threadIdx.x; e < BR * L::OLD; e += blockDim.x) o[e] = 0.f;

  float m = -INFINITY, l = 0.f;
  const int keys = min(T, q0 + BR);  // no row of the block sees past it
  for (int j0 = 0; j0 < keys; j0 += kKeys) {
    __syncthreads();  // every warp is done with the previous tile (and o is zeroed)
    load_bf16<HD>(ks, L::KLD, v.k, v.ld, j0, kKeys, T, hd);
    load_bf16<HD>(vs, L::KLD, v.v, v.ld, j0, kKeys, T, hd);
    __syncthreads();
    if (q0 + w0 >= T || j0 > q0 + w0 + kTile - 1) continue;  // the warp's rows are past T or see no key here

    times_rows_transposed<HD>(qf, ks, L::KLD, s + w0 * L::SLD, L::SLD);  // S = Q K^T, the warp's 16 rows
    __syncwarp();

    // Online softmax of the row (two lanes, kKeys / 2 columns each): masked, rescaled, P in bf16.
    constexpr int kHalfKeys = kKeys / 2;
    float tile_max = -INFINITY;
    float sc[kHalfKeys];
    for (int c = 0; c < kHalfKeys; ++c) {
      const int col = 2 * c + half, j = j0 + col;
      sc[c] = i < T && j <= i ? s[rr * L::SLD + col] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, sc[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = m == -INFINITY ? 0.f : expf(m - m_new);
    float sum = 0.f;
    for (int c = 0; c < kHalfKeys; ++c) {
      const __nv_bfloat16 pb = __float2bfloat16(sc[c] == -INFINITY ? 0.f : expf(sc[c] - m_new));
      p[rr * L::PLD + 2 * c + half] = pb;
      sum += __bfloat162float(pb);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // both lanes add the same two halves
    l = l * alpha + sum;
    m = m_new;
    for (int d = half; d < HD; d += 2) o[rr * L::OLD + d] *= alpha;
    __syncwarp();

    // O += P V: p is (rows, keys) row-major, v (keys, HD) row-major.
    for (int n = 0; n < HD / kTile; ++n) {
      FragAcc acc;
      wmma::load_matrix_sync(acc, o + w0 * L::OLD + n * kTile, L::OLD, wmma::mem_row_major);
      for (int kk = 0; kk < kKeys / kTile; ++kk) {
        FragA pf;
        FragBRow vf;
        wmma::load_matrix_sync(pf, p + w0 * L::PLD + kk * kTile, L::PLD);
        wmma::load_matrix_sync(vf, vs + kk * kTile * L::KLD + n * kTile, L::KLD);
        wmma::mma_sync(acc, pf, vf, acc);
      }
      wmma::store_matrix_sync(o + w0 * L::OLD + n * kTile, acc, L::OLD, wmma::mem_row_major);
    }
    __syncwarp();
  }
  const float inv = 1.f / l;
  const int d_end = i < T ? hd : 0;  // a row past T writes nothing
  const int64_t at = v.y_off + static_cast<int64_t>(i) * v.C;
  if constexpr (kForBackward) {
    float part = 0.f;
    for (int d = half; d < d_end; d += 2) part += dy[at + d] * (o[rr * L::OLD + d] * inv);
    part += __shfl_xor_sync(0xffffffffu, part, 1);  // every lane: the two halves, in either lane's order
    if (i < T && half == 0) {
      lse[v.stat + i] = m + logf(l);
      delta[v.stat + i] = part;
    }
  } else {
    if (lse && i < T && half == 0) lse[v.stat + i] = m + logf(l);
    for (int d = half; d < d_end; d += 2) y[at + d] = o[rr * L::OLD + d] * inv;
  }
}

template <int HD, bool kForBackward, class In>
void launch(const AttentionShape& s, const In* qkv, const float* dy, float* y, float* lse, float* delta,
            cudaStream_t stream) {
  constexpr int BR = block_rows<HD>();
  const dim3 grid(static_cast<unsigned>((s.T + BR - 1) / BR), static_cast<unsigned>(s.B * s.H));
  SUBDP_LAUNCH(grid, BR * 2, 0, stream, flash_forward_tc_kernel<HD, kForBackward, In>)
  (qkv, dy, y, lse, delta, s.T, s.H, s.kv_heads(), s.hd, 1.f / std::sqrt(static_cast<float>(s.hd)));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class In>
void attention_stats(const AttentionShape& s, const In* qkv, const float* dy, float* lse, float* delta,
                     cudaStream_t stream) {
  with_width(s.hd, [&](auto tag) { launch<decltype(tag)::value, true>(s, qkv, dy, nullptr, lse, delta, stream); });
}

template void attention_stats(const AttentionShape&, const float*, const float*, float*, float*, cudaStream_t);
template void attention_stats(const AttentionShape&, const bf16*, const float*, float*, float*, cudaStream_t);

namespace {

template <class In>
bool forward(const AttentionShape& s, const In* qkv, float* y, float* lse, cudaStream_t stream) {
  if (!supported(s)) return false;
  if (s.B <= 0 || s.T <= 0 || s.H <= 0) return true;
  with_width(s.hd, [&](auto tag) { launch<decltype(tag)::value, false>(s, qkv, nullptr, y, lse, nullptr, stream); });
  return true;
}

}  // namespace

}  // namespace tc

bool attention_tc_supported(const AttentionShape& s) { return tc::supported(s); }

bool attention_forward_tc(const AttentionShape& s, const float* qkv, float* y, float* lse, cudaStream_t stream) {
  return tc::forward(s, qkv, y, lse, stream);
}

bool attention_forward_tc(const AttentionShape& s, const bf16* qkv, float* y, float* lse, cudaStream_t stream) {
  return tc::forward(s, qkv, y, lse, stream);
}

}  // namespace subdp::cuda
