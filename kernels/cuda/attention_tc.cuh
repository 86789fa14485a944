// What the tensor-core attention kernels share (attention_tc.cu: the forward;
// attention_tc_backward.cu: dk, dv and dq): the m16n16k16 warp tiles of bf16 operands and
// float accumulators (nvcuda::wmma), the bf16 staging of q, k, v and dy rows into shared
// memory, and the convention that two lanes share a row of the per-row work (the row's mask,
// softmax and statistics), one its even and one its odd columns, because a fragment's element layout
// is unspecified and per-row work runs on floats in shared memory instead.
#pragma once
#include <mma.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda::tc {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 16;     // the m16n16k16 tile: 16 rows a warp
constexpr int kKeys = 32;     // key rows per tile (forward, dq)
constexpr int kQueries = 32;  // query rows per tile (dk, dv)
static_assert(kKeys == kQueries, "times_rows_transposed takes tiles of either");

using FragA = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __nv_bfloat16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float>;

/// Rows a block owns: 64 (4 warps), 32 at head width 128, so that each kernel's shared
/// memory stays under the 48 KiB a block gets without an opt-in.
template <int HD>
__host__ __device__ constexpr int block_rows() {
  return HD <= 64 ? 64 : 32;
}

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

/// dst[r][d] = bf16(src[(r0 + r) * ld + d]) for r < rows, d < HD, dst rows dld apart; zero past
/// row T and past column hd (zero columns add exact zeros to every product). src is float
/// (rounded here) or bf16 (copied: a kept copy loads the values its float conversion would).
/// Every thread of the block takes part.
template <int HD, class Src>
__device__ void load_bf16(__nv_bfloat16* dst, int dld, const Src* src, int64_t ld, int r0, int rows, int T, int hd) {
  static_assert(std::is_same_v<Src, float> || std::is_same_v<Src, __nv_bfloat16>, "float or bf16 rows");
  for (int e = threadIdx.x; e < rows * HD; e += blockDim.x) {
    const int r = e / HD, d = e % HD;
    const bool inside = r0 + r < T && d < hd;
    if constexpr (std::is_same_v<Src, float>)
      dst[r * dld + d] = __float2bfloat16(inside ? src[static_cast<int64_t>(r0 + r) * ld + d] : 0.f);
    else
      dst[r * dld + d] = inside ? src[static_cast<int64_t>(r0 + r) * ld + d] : __float2bfloat16(0.f);
  }
}

/// The warp's HD / 16 fragments of rows w0 .. w0 + 15 of a bf16 (rows, ld) array.
template <int HD>
__device__ void load_row_fragments(FragA (&f)[HD / kTile], const __nv_bfloat16* a, int ld, int w0) {
  for (int kk = 0; kk < HD / kTile; ++kk) wmma::load_matrix_sync(f[kk], a + w0 * ld + kk * kTile, ld);
}

/// out (16 x 32, floats, rows ld apart) = the warp's 16 rows of `a` (HD / 16 fragments) times
/// the transpose of 32 bf16 rows (rows bld apart) at b: S = Q K^T and dP = dy V^T, a
/// warp's 16 rows against a tile of kKeys (or kQueries) rows.
template <int HD>
__device__ void times_rows_transposed(const FragA (&a)[HD / kTile], const __nv_bfloat16* b, int bld, float* out,
                                      int ld) {
  for (int n = 0; n < kKeys / kTile; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.f);
    for (int kk = 0; kk < HD / kTile; ++kk) {
      FragBCol bf;  // row j of b is column j of b^T
      wmma::load_matrix_sync(bf, b + n * kTile * bld + kk * kTile, bld);
      wmma::mma_sync(acc, a[kk], bf, acc);
    }
    wmma::store_matrix_sync(out + n * kTile, acc, ld, wmma::mem_row_major);
  }
}

/// out[d] = scale * acc rows (the warp's 16 rows as HD / 16 accumulators), through the float
/// staging area `stage` (rows ld apart, the warp's rows from w0): this lane writes row
/// w0 + lane / 2 (to `out`, null for a row past T), its even or odd columns below hd.
template <int HD>
__device__ void write_rows(const FragAcc (&acc)[HD / kTile], float* stage, int ld, int w0, float* out, int hd,
                           float scale) {
  for (int n = 0; n < HD / kTile; ++n)
    wmma::store_matrix_sync(stage + w0 * ld + n * kTile, acc[n], ld, wmma::mem_row_major);
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x) % 32, r = w0 + lane / 2, half = lane % 2;
  if (out)
    for (int d = half; d < hd; d += 2) out[d] = scale * stage[r * ld + d];  // even / odd columns: 2-way banks
}

/// The float32 statistics the backward kernels read, on tensor cores (attention_tc.cu):
/// lse (B, H, T), each row's log-sum-exp of the scaled scores over the rounded
/// probabilities, and delta (B, H, T) = rowsum(dy * y). qkv: float or bf16 rows (In).
template <class In>
void attention_stats(const AttentionShape& s, const In* qkv, const float* dy, float* lse, float* delta,
                     cudaStream_t stream);

}  // namespace subdp::cuda::tc
