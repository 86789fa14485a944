// What the tensor-core attention kernels share (attention_tc.cu: the forward;
// attention_tc_backward.cu: dk, dv and dq): the bf16 staging of q, k, v and dy rows into
// shared memory and the warp's products on mma.sync.m16n8k16 (kernels/cuda/mma_sync.cuh).
// Every kernel is arranged as FlashAttention-2 (Dao, arXiv:2307.08691): a warp owns 16 rows,
// keeps its operands and accumulators in registers for the whole kernel, and does the per-row
// work (mask, softmax, dS) on the accumulators in place. The lane of group g = lane / 4 and
// place t = lane % 4 holds, of each 8-column tile of an accumulator, rows g and g + 8, columns
// 2t and 2t + 1; a row's reductions combine the four lanes of its group.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/mma_sync.cuh"

namespace subdp::cuda::tc {

constexpr int kTile = 16;  // rows a warp owns, and the k of one mma
/// log2(e): the softmaxes run on exp2f (one MUFU.EX2 and a multiply folded into the scale)
/// with scores and log-sum-exps in base 2.
constexpr float kLog2e = 1.4426950408889634f;

/// True when the tensor-core kernels take shape s: head widths that are multiples of 16 up
/// to kMaxAttentionHeadDim, and KV dividing H.
inline bool supported(const AttentionShape& s) {
  return s.hd > 0 && s.hd % kTile == 0 && s.hd <= kMaxAttentionHeadDim && s.kv_heads() > 0 && s.H % s.kv_heads() == 0;
}

/// Calls f(std::integral_constant<int, HD>{}) with the compiled width HD >= s.hd.
template <class F>
void with_width(int hd, F&& f) {
  if (hd <= 16) return f(std::integral_constant<int, 16>{});
  if (hd <= 32) return f(std::integral_constant<int, 32>{});
  if (hd <= 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}

/// dst[r][d] = bf16(src[(r0 + r) * ld + d]) for r < rows, d < HD, dst rows dld apart; zero
/// past row T and past column hd (zero columns add exact zeros to every product). src is float
/// (rounded here) or bf16 (copied: a kept copy loads the values its float conversion would).
/// Every thread of the block takes part. Where src, ld and hd allow (src 16-byte aligned, ld
/// and hd multiples of a 16-byte vector, as the packed qkv and dy rows of a head width that is
/// a multiple of 16 are), each thread moves 16 bytes of src at a time and stores them two bf16
/// at a time; a warp's lanes take consecutive columns of a row (coalesced reads).
template <int HD, class Src>
__device__ void load_bf16(__nv_bfloat16* dst, int dld, const Src* src, int64_t ld, int r0, int rows, int T, int hd) {
  static_assert(std::is_same_v<Src, float> || std::is_same_v<Src, __nv_bfloat16>, "float or bf16 rows");
  constexpr int V = 16 / sizeof(Src);  // elements of a 16-byte load
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0 || ld % V != 0 || hd % V != 0) {
    for (int e = threadIdx.x; e < rows * HD; e += blockDim.x) {
      const int r = e / HD, d = e % HD;
      const bool inside = r0 + r < T && d < hd;
      dst[r * dld + d] = inside
                             ? detail::from_f<__nv_bfloat16>(detail::to_f(src[static_cast<int64_t>(r0 + r) * ld + d]))
                             : __float2bfloat16(0.f);
    }
    return;
  }
  for (int e = threadIdx.x; e < rows * (HD / V); e += blockDim.x) {
    const int r = e / (HD / V), d0 = e % (HD / V) * V;
    uint32_t w[4] = {0, 0, 0, 0};  // the 16 bytes: zeros past T or hd
    if (r0 + r < T && d0 < hd) mma::load16(w, src + static_cast<int64_t>(r0 + r) * ld + d0);  // hd % V == 0
    uint32_t pairs[V / 2];  // the V values as bf16 pairs
    if constexpr (std::is_same_v<Src, __nv_bfloat16>) {
      for (int k = 0; k < V / 2; ++k) pairs[k] = w[k];
    } else {
      float f[4];
      std::memcpy(f, w, 16);
      pairs[0] = mma::pack(__float2bfloat16(f[0]), __float2bfloat16(f[1]));
      pairs[1] = mma::pack(__float2bfloat16(f[2]), __float2bfloat16(f[3]));
    }
    for (int k = 0; k < V / 2; ++k) mma::store_pair(dst + r * dld + d0 + 2 * k, pairs[k]);
  }
}

/// load_bf16's rows, but a bf16 src that allows 16-byte moves (as load_bf16's vector path) is
/// copied asynchronously (cp.async, kernels/cuda/cp_async.cuh): the caller commits and waits
/// (then a __syncthreads) before any thread reads dst. A float src, which must be rounded, and
/// an unaligned one are loaded synchronously, so the caller's waits then have nothing to wait for.
template <int HD, class Src>
__device__ void stage_bf16(__nv_bfloat16* dst, int dld, const Src* src, int64_t ld, int r0, int rows, int T, int hd) {
  constexpr int V = 8;  // bf16 a 16-byte copy
  if constexpr (std::is_same_v<Src, __nv_bfloat16>) {
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && ld % V == 0 && hd % V == 0) {
      for (int e = threadIdx.x; e < rows * (HD / V); e += blockDim.x) {
        const int r = e / (HD / V), d0 = e % (HD / V) * V;
        const bool inside = r0 + r < T && d0 < hd;  // else 16 zero bytes
        async::copy16(dst + r * dld + d0, inside ? src + static_cast<int64_t>(r0 + r) * ld + d0 : src, inside ? 16 : 0);
      }
      return;
    }
  }
  load_bf16<HD>(dst, dld, src, ld, r0, rows, T, hd);
}

/// The calling lane's group g (rows g and g + 8 of its warp's 16) and place t in it.
struct LanePlace {
  int g, t;
};
__device__ __forceinline__ LanePlace lane_place() {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  return {lane / 4, lane % 4};
}

/// The calling lane's row address for an ldmatrix_x4 of four 8 x 8 blocks of a bf16 array m
/// (rows ld apart): lane 8 i + k gives row k of block i, which starts at row r0 + 8 * (i % 2),
/// column c0 + 8 * (i / 2) when kRowsFirst, else at row r0 + 8 * (i / 2), column c0 + 8 * (i % 2).
template <bool kRowsFirst>
__device__ __forceinline__ const __nv_bfloat16* block_row(const __nv_bfloat16* m, int ld, int r0, int c0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, i = lane / 8, k = lane % 8;
  const int down = kRowsFirst ? i % 2 : i / 2, right = kRowsFirst ? i / 2 : i % 2;
  return m + (r0 + 8 * down + k) * ld + c0 + 8 * right;
}

/// a = rows w0 .. w0 + 15 of a bf16 array in shared memory (rows ld apart, 16-byte aligned),
/// columns 0 .. 16 K - 1, as the K A operands of mma::m16n8k16 (a warp's Q, dy, K or V, read
/// once into registers): one ldmatrix per operand, its blocks in the A register order.
template <int K>
__device__ void load_a_rows(uint32_t (&a)[K][4], const __nv_bfloat16* m, int ld, int w0) {
  for (int kk = 0; kk < K; ++kk) mma::ldmatrix_x4(a[kk], block_row<true>(m, ld, w0, kk * kTile));
}

/// c (16 x 8 N floats, accumulator layout) += a (16 x 16 K bf16, A operands) times the
/// transpose of the 8 N bf16 rows of m (16 K columns each, rows ld apart, in shared memory):
/// the warp's rows against a tile's rows (S = Q K^T, dP = dy V^T). Each ldmatrix gives the B
/// operands of two 8-row tiles.
template <int K, int N>
__device__ void mma_rows(float (&c)[N][4], const uint32_t (&a)[K][4], const __nv_bfloat16* m, int ld) {
  static_assert(N % 2 == 0, "8-row tiles in pairs");
  for (int n = 0; n < N; n += 2)
    for (int kk = 0; kk < K; ++kk) {
      uint32_t b[4];  // B[k][n] = m[n][k]: rows n .. n + 7 at k, k + 8, then rows n + 8 ..
      mma::ldmatrix_x4(b, block_row<false>(m, ld, n * 8, kk * kTile));
      mma::m16n8k16(c[n], a[kk], {b[0], b[1]}, c[n]);
      mma::m16n8k16(c[n + 1], a[kk], {b[2], b[3]}, c[n + 1]);
    }
}

/// c (16 x 8 N floats) += a (16 x 16 K bf16, A operands) times the 16 K rows of m (8 N
/// columns each, rows ld apart, in shared memory): the product by a tile stored as rows
/// (O += P V, dV += P^T dy, dK += dS^T Q, dQ += dS K), its B operands transposed by ldmatrix.
template <int K, int N>
__device__ void mma_cols(float (&c)[N][4], const uint32_t (&a)[K][4], const __nv_bfloat16* m, int ld) {
  static_assert(N % 2 == 0, "8-column tiles in pairs");
  for (int n = 0; n < N; n += 2)
    for (int kk = 0; kk < K; ++kk) {
      uint32_t b[4];  // B[k][n] = m[k][n]: rows k .. k + 7, k + 8 .. at column n, then n + 8
      mma::ldmatrix_x4<true>(b, block_row<true>(m, ld, kk * kTile, n * 8));
      mma::m16n8k16(c[n], a[kk], {b[0], b[1]}, c[n]);
      mma::m16n8k16(c[n + 1], a[kk], {b[2], b[3]}, c[n + 1]);
    }
}

/// c = 0 (an accumulator of N 8-column tiles).
template <int N>
__device__ void zero(float (&c)[N][4]) {
  for (auto& tile : c)
    for (float& x : tile) x = 0.f;
}

/// Stores accumulator tile n's values x, rounded to bf16, as A operand registers: tile n's
/// rows g and g + 8 are registers 0 and 1 of operand n / 2 for an even n, registers 2 and 3
/// for an odd one (the accumulator and A layouts coincide), so a product's result feeds the
/// next product without leaving the registers.
template <int K>
__device__ __forceinline__ void to_a_operand(uint32_t (&a)[K][4], int n, const __nv_bfloat16 (&x)[4]) {
  a[n / 2][(n % 2) * 2] = mma::pack(x[0], x[1]);
  a[n / 2][(n % 2) * 2 + 1] = mma::pack(x[2], x[3]);
}

/// Sum over the four lanes of a group; every lane of the group gets the same bits (each
/// addition is commutative, and both rounds pair the same partial sums).
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// Writes the warp's accumulators times scale as float rows: this lane's two rows (g and
/// g + 8 of the warp's 16) at out0 and out1 (null for a row past T), columns below hd.
template <int N>
__device__ void write_rows(const float (&acc)[N][4], float* out0, float* out1, int hd, float scale) {
  const int t = lane_place().t;
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < 4; ++e) {
      float* out = e < 2 ? out0 : out1;
      const int d = n * 8 + 2 * t + (e & 1);
      if (out && d < hd) out[d] = scale * acc[n][e];
    }
}

/// What the backward kernels read, from the tensor-core forward recomputed (attention_tc.cu):
/// lse2 (B, H, T) floats, each row's log-sum-exp in base 2 (of the scores times log2(e) /
/// sqrt(hd), over the rounded probabilities: P = 2^(scale2 S - lse2)); delta (B, H, T) =
/// rowsum(dy * y); dy16 (B, T, H*hd), dy rounded to bf16, which the kernels can then stage
/// with cp.async (the rounding load_bf16 would do on a float dy, so the same bits). qkv:
/// float or bf16 rows (In). dy16 must be 4-byte aligned (16-byte for the asynchronous copies).
template <class In>
void attention_stats(const AttentionShape& s, const In* qkv, const float* dy, float* lse2, float* delta,
                     __nv_bfloat16* dy16, cudaStream_t stream);

}  // namespace subdp::cuda::tc
