// Causal self-attention that never stores a (T, T) matrix: a flash-style forward and backward
// (Dao et al., "FlashAttention", arXiv:2205.14135, algorithms 1 and 2) in float32 on CUDA
// cores. One thread (two or four at head widths 64 and 128, each with a share of the columns,
// their dot products summed across the lanes) owns one query (or key) row of one (sequence,
// head); the block's 64 rows share each tile of the other side's rows in shared memory, and
// tiles that the causal mask hides wholly are never loaded. Softmax is online (a running max
// and sum per row), so the forward keeps only its output and each row's log-sum-exp, and the
// backward recomputes probabilities from it (and, given the kept output, forms delta in one
// pass: attention_delta; without them it runs the forward again). Grouped-query attention: a query head reads its
// key / value head's rows, and a key / value head's dk, dv sum its query heads in order.
// Every sum runs in a fixed order and no kernel uses atomics: a run repeats bit for bit. The
// CPU attention (kernels/cpu/attention.cpp) is the reference. A row's lanes deal its columns
// in groups of four (lane_col), so that they read different banks of a shared tile row.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_view.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

constexpr int kRowsPerBlock = 64;  // rows per block, row_lanes<HD>() threads each

/// Rows of the shared tile: two (rows, HD) float tiles fill 32 KiB of the 48 KiB a block
/// gets without an opt-in.
template <int HD>
__host__ __device__ constexpr int tile_rows() {
  return HD <= 64 ? 64 : 32;
}

/// tile[r][d] = src[(r0 + r) * ld + d], zero past row T and past column hd: the zero columns
/// add exact zeros to every dot product, so a head narrower than HD computes as itself.
template <int HD, int ROWS>
__device__ void load_tile(float (*tile)[HD], const float* src, int64_t ld, int r0, int T, int hd) {
  for (int e = threadIdx.x; e < ROWS * HD; e += blockDim.x) {
    const int r = e / HD, d = e % HD;
    tile[r][d] = r0 + r < T && d < hd ? src[static_cast<int64_t>(r0 + r) * ld + d] : 0.f;
  }
}

/// Lanes that share one row in every kernel here: each holds HD / row_lanes columns of the
/// row's vectors (at most 32 floats each, so they fit in registers: with one lane a row, the
/// dk / dv kernel at head width 64 held 256 floats and spilled 420 bytes a thread, 3,704 at 128).
template <int HD>
__host__ __device__ constexpr int row_lanes() {
  return HD > 32 ? HD / 32 : 1;
}

/// The column that register d of lane `slot` (of a row's LANES lanes) holds: groups of four
/// columns dealt in turn (lane s: 4s..4s+3, then 4(s + LANES)..., ...). Every lane of a warp
/// reads the same shared tile row at once, and contiguous slices put a row's lanes on the same
/// banks (a 2-way conflict at head width 64, 4-way at 128, on every load); dealt groups of four
/// put them on different ones. One lane a row: column d.
template <int LANES>
__device__ constexpr int lane_col(int slot, int d) {
  return (d / 4 * LANES + slot) * 4 + d % 4;
}

/// row[d] = src[lane_col(slot, d)] for those columns below n, zero beyond (n = 0: all zero,
/// src unread).
template <int LANES, int W>
__device__ void load_row(float (&row)[W], const float* src, int slot, int n) {
#pragma unroll
  for (int d = 0; d < W; ++d) {
    const int c = lane_col<LANES>(slot, d);
    row[d] = c < n ? src[c] : 0.f;
  }
}

/// This lane's part of a . b over the row's columns: a holds them in register order, b is the
/// whole row.
template <int LANES, int W>
__device__ float dot(const float (&a)[W], const float* b, int slot) {
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < W; ++d) s += a[d] * b[lane_col<LANES>(slot, d)];
  return s;
}

/// Sum of x over the LANES lanes of a row (adjacent lanes; a butterfly, so each lane ends
/// with the same bits: the same partial sums meet in either order).
template <int LANES>
__device__ float row_sum(float x) {
  const unsigned lane = threadIdx.x & 31u;
  const unsigned mask = LANES == 1 ? 0u : ((1u << LANES) - 1u) << (lane & ~static_cast<unsigned>(LANES - 1));
#pragma unroll
  for (int o = 1; o < LANES; o *= 2) x += __shfl_xor_sync(mask, x, o);
  return x;
}

/// This thread's row within the block, its lane among the row's lanes (lane_col) and the
/// columns it may read and write: hd, or 0 for a row past T.
struct RowLane {
  int row, slot, cols;
};

template <int HD>
__device__ RowLane row_lane(int T, int hd) {
  constexpr int LANES = row_lanes<HD>();
  const int row = static_cast<int>(blockIdx.x) * kRowsPerBlock + static_cast<int>(threadIdx.x) / LANES;
  return {row, static_cast<int>(threadIdx.x) % LANES, row < T ? hd : 0};
}

/// Calls visit(k_j, v_j) for every key j <= i (causal) of query row i, in order of j, for the
/// (sequence, head) of view v; k_j and v_j are HD-float rows in shared memory. Every thread
/// of the block must call it (they load each tile of keys and values together); a thread
/// with i >= T visits nothing, and a row's lanes visit the same keys.
template <int HD, class Visit>
__device__ void for_each_causal_key(const HeadView& v, int T, int hd, int i, Visit&& visit) {
  constexpr int BC = tile_rows<HD>();
  alignas(16) __shared__ float ks[BC][HD];
  alignas(16) __shared__ float vs[BC][HD];
  const int keys = min(T, static_cast<int>(blockIdx.x + 1) * kRowsPerBlock);  // no row of the block sees past it
  for (int j0 = 0; j0 < keys; j0 += BC) {
    __syncthreads();  // every thread is done with the previous tile
    load_tile<HD, BC>(ks, v.k, v.ld, j0, T, hd);
    load_tile<HD, BC>(vs, v.v, v.ld, j0, T, hd);
    __syncthreads();
    const int n = i < T ? min(BC, i - j0 + 1) : 0;
    for (int jj = 0; jj < n; ++jj) visit(ks[jj], vs[jj]);
  }
}

/// Forward for the query rows of block (blockIdx.x, blockIdx.y = b * H + h). Writes y, or
/// with kForBackward the row's log-sum-exp and delta = rowsum(dy * y) (the backward's D)
/// instead of y. lse may be null in the plain forward.
template <int HD, bool kForBackward>
__global__ void __launch_bounds__(kRowsPerBlock* row_lanes<HD>())
    flash_forward_kernel(const float* qkv, const float* dy, float* y, float* lse, float* delta, int T, int H, int KV,
                         int hd, float scale) {
  constexpr int LANES = row_lanes<HD>(), W = HD / LANES;
  const HeadView v = query_view(qkv, T, H, KV, hd);
  const RowLane rl = row_lane<HD>(T, hd);
  const int i = rl.row, slot = rl.slot, cols = rl.cols;  // not a structured binding: lambdas capture slot
  float q[W], o[W];
  load_row<LANES>(q, v.q + static_cast<int64_t>(i) * v.ld, slot, cols);
  load_row<LANES>(o, nullptr, slot, 0);
  float m = -INFINITY, l = 0.f;
  for_each_causal_key<HD>(v, T, hd, i, [&](const float* k, const float* vj) {
    const float s = scale * row_sum<LANES>(dot<LANES>(q, k, slot));
    if (s > m) {  // a new running max: rescale what was summed under the old one
      const float c = expf(m - s);
      l *= c;
#pragma unroll
      for (int d = 0; d < W; ++d) o[d] *= c;
      m = s;
    }
    const float p = expf(s - m);
    l += p;
#pragma unroll
    for (int d = 0; d < W; ++d) o[d] += p * vj[lane_col<LANES>(slot, d)];
  });
  if (i >= T) return;
  const float inv = 1.f / l;
  if (lse && slot == 0) lse[v.stat + i] = m + logf(l);
  const int64_t at = v.y_off + static_cast<int64_t>(i) * v.C;
  if constexpr (kForBackward) {
    float part = 0.f;
    for (int d = 0; d < W; ++d)
      if (const int c = lane_col<LANES>(slot, d); c < cols) part += dy[at + c] * (o[d] * inv);
    const float sum = row_sum<LANES>(part);
    if (slot == 0) delta[v.stat + i] = sum;
  } else {
    for (int d = 0; d < W; ++d)
      if (const int c = lane_col<LANES>(slot, d); c < cols) y[at + c] = o[d] * inv;
  }
}

/// dk and dv of the key rows of block (blockIdx.x, blockIdx.y = b * KV + g): each sums over
/// the query heads of key / value head g in order, and for each over the query rows i >= j,
/// query tiles from the block's first key on.
template <int HD>
__global__ void __launch_bounds__(kRowsPerBlock* row_lanes<HD>())
    flash_backward_dkdv_kernel(const float* qkv, const float* dy, const float* lse, const float* delta, float* dqkv,
                               int T, int H, int KV, int hd, float scale) {
  constexpr int BQ = tile_rows<HD>();  // divides kRowsPerBlock, so the first tile starts at j0
  constexpr int LANES = row_lanes<HD>(), W = HD / LANES;
  alignas(16) __shared__ float qs[BQ][HD];
  alignas(16) __shared__ float gs[BQ][HD];
  __shared__ float ls[BQ];
  __shared__ float ds[BQ];
  const int b = static_cast<int>(blockIdx.y) / KV, g = static_cast<int>(blockIdx.y) % KV, G = H / KV;
  const HeadView kv = head_view(qkv, T, H, KV, hd, b, g * G);
  const int j0 = static_cast<int>(blockIdx.x) * kRowsPerBlock;
  const RowLane rl = row_lane<HD>(T, hd);
  const int j = rl.row, slot = rl.slot, cols = rl.cols;
  const bool active = j < T;
  float k[W], vv[W], dk[W], dv[W];
  load_row<LANES>(k, kv.k + static_cast<int64_t>(j) * kv.ld, slot, cols);
  load_row<LANES>(vv, kv.v + static_cast<int64_t>(j) * kv.ld, slot, cols);
  load_row<LANES>(dk, nullptr, slot, 0);
  load_row<LANES>(dv, nullptr, slot, 0);
  for (int h = g * G; h < (g + 1) * G; ++h) {
    const HeadView v = head_view(qkv, T, H, KV, hd, b, h);
    for (int i0 = j0; i0 < T; i0 += BQ) {
      __syncthreads();
      load_tile<HD, BQ>(qs, v.q, v.ld, i0, T, hd);
      load_tile<HD, BQ>(gs, dy + v.y_off, v.C, i0, T, hd);
      for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
        ls[r] = i0 + r < T ? lse[v.stat + i0 + r] : 0.f;
        ds[r] = i0 + r < T ? delta[v.stat + i0 + r] : 0.f;
      }
      __syncthreads();
      const int n = active ? min(BQ, T - i0) : 0;    // the same for a row's lanes: they shuffle together
      for (int ii = max(0, j - i0); ii < n; ++ii) {  // causal: queries i >= j
        const float p = expf(scale * row_sum<LANES>(dot<LANES>(k, qs[ii], slot)) - ls[ii]);
        const float dsc = p * (row_sum<LANES>(dot<LANES>(vv, gs[ii], slot)) - ds[ii]);  // d(score), before the scale
#pragma unroll
        for (int d = 0; d < W; ++d) {
          dv[d] += p * gs[ii][lane_col<LANES>(slot, d)];
          dk[d] += dsc * qs[ii][lane_col<LANES>(slot, d)];
        }
      }
    }
  }
  if (!active) return;
  const int64_t row = static_cast<int64_t>(j) * kv.ld;
  float* dk_out = dqkv + (kv.k - qkv) + row;
  float* dv_out = dqkv + (kv.v - qkv) + row;
  for (int d = 0; d < W; ++d)
    if (const int c = lane_col<LANES>(slot, d); c < cols) {
      dk_out[c] = scale * dk[d];
      dv_out[c] = dv[d];
    }
}

/// dq of the query rows of block (blockIdx.x, b * H + h): each sums over the keys j <= i.
template <int HD>
__global__ void __launch_bounds__(kRowsPerBlock* row_lanes<HD>())
    flash_backward_dq_kernel(const float* qkv, const float* dy, const float* lse, const float* delta, float* dqkv,
                             int T, int H, int KV, int hd, float scale) {
  constexpr int LANES = row_lanes<HD>(), W = HD / LANES;
  const HeadView v = query_view(qkv, T, H, KV, hd);
  const RowLane rl = row_lane<HD>(T, hd);
  const int i = rl.row, slot = rl.slot, cols = rl.cols;  // not a structured binding: lambdas capture slot
  const bool active = i < T;
  float q[W], g[W], dq[W];
  load_row<LANES>(q, v.q + static_cast<int64_t>(i) * v.ld, slot, cols);
  load_row<LANES>(g, dy + v.y_off + static_cast<int64_t>(i) * v.C, slot, cols);
  load_row<LANES>(dq, nullptr, slot, 0);
  const float L = active ? lse[v.stat + i] : 0.f, D = active ? delta[v.stat + i] : 0.f;
  for_each_causal_key<HD>(v, T, hd, i, [&](const float* k, const float* vj) {
    const float p = expf(scale * row_sum<LANES>(dot<LANES>(q, k, slot)) - L);
    const float dsc = p * (row_sum<LANES>(dot<LANES>(g, vj, slot)) - D);
#pragma unroll
    for (int d = 0; d < W; ++d) dq[d] += dsc * k[lane_col<LANES>(slot, d)];
  });
  if (!active) return;
  float* out = dqkv + (v.q - qkv) + static_cast<int64_t>(i) * v.ld;
  for (int d = 0; d < W; ++d)
    if (const int c = lane_col<LANES>(slot, d); c < cols) out[c] = scale * dq[d];
}

template <int N>
using HeadDim = std::integral_constant<int, N>;

/// Calls f(HeadDim<HD>{}) with the smallest compiled head width HD >= hd.
template <class F>
void with_head_dim(int hd, F&& f) {
  if (hd <= 0 || hd > kMaxAttentionHeadDim)
    throw std::invalid_argument("CUDA attention: head dimension " + std::to_string(hd) + " is outside 1.." +
                                std::to_string(kMaxAttentionHeadDim));
  if (hd <= 16) return f(HeadDim<16>{});
  if (hd <= 32) return f(HeadDim<32>{});
  if (hd <= 64) return f(HeadDim<64>{});
  return f(HeadDim<128>{});
}

/// Blocks of 64 rows over T, times B * heads (the query heads, or the key / value heads).
dim3 grid_of(const AttentionShape& s, int heads) {
  return dim3(static_cast<unsigned>((s.T + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(s.B * heads));
}

float scale_of(const AttentionShape& s) { return 1.f / std::sqrt(static_cast<float>(s.hd)); }

bool empty(const AttentionShape& s) { return s.B <= 0 || s.T <= 0 || s.H <= 0; }

void check_groups(const AttentionShape& s) {
  if (s.kv_heads() <= 0 || s.H % s.kv_heads() != 0)
    throw std::invalid_argument("CUDA attention: " + std::to_string(s.kv_heads()) +
                                " key / value heads do not divide " + std::to_string(s.H) + " query heads");
}

/// attention_delta's rows: row r = (b T + t) H + h of y and dy (hd values each) gives delta at
/// (b H + h) T + t. One warp a row (blockDim a multiple of 32), its lanes over the columns.
template <class Y>
__global__ void attention_delta_kernel(const Y* y, float y_scale, const float* dy, float* delta, bf16* dy16,
                                       int64_t rows, int T, int H, int hd) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t r = detail::grid_first() / 32; r < rows; r += detail::grid_stride() / 32) {  // the same r across a warp
    const int64_t at = r * hd;
    float part = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float g = dy[at + d];
      part += g * detail::to_f(y[at + d]);
      if (dy16) dy16[at + d] = __float2bfloat16(g);
    }
    const float sum = detail::warp_sum(part);
    if (lane != 0) continue;
    const int64_t bt = r / H, h = r % H, b = bt / T, t = bt % T;
    delta[(b * H + h) * T + t] = y_scale * sum;
  }
}

}  // namespace

void attention_delta(const AttentionShape& s, const AttentionKept& kept, const float* dy, float* delta, bf16* dy16,
                     cudaStream_t stream) {
  if (empty(s)) return;
  if (!kept.lse || !kept.y) throw std::invalid_argument("attention_delta: the kept statistics need lse and y");
  const int64_t rows = static_cast<int64_t>(s.B) * s.T * s.H;
  const int blocks = detail::blocks_for(rows * 32);
  const auto launch = [&](auto* y) {
    using Y = std::remove_const_t<std::remove_pointer_t<decltype(y)>>;
    SUBDP_LAUNCH(blocks, detail::kThreads, 0, stream, attention_delta_kernel<Y>)
    (y, kept.y_scale, dy, delta, dy16, rows, s.T, s.H, s.hd);
    CUDA_CHECK_LAUNCH();
  };
  if (kept.y_bf16)
    launch(static_cast<const bf16*>(kept.y));
  else
    launch(static_cast<const float*>(kept.y));
}

int64_t attention_workspace_floats(const AttentionShape& s) {
  return 2 * static_cast<int64_t>(s.B) * s.H * s.T;  // lse and delta
}

void attention_forward(const AttentionShape& s, const float* qkv, float* y, float* lse, cudaStream_t stream) {
  if (empty(s)) return;
  check_groups(s);
  with_head_dim(s.hd, [&](auto tag) {
    constexpr int HD = decltype(tag)::value;
    SUBDP_LAUNCH(grid_of(s, s.H), kRowsPerBlock * row_lanes<HD>(), 0, stream, flash_forward_kernel<HD, false>)
    (qkv, nullptr, y, lse, nullptr, s.T, s.H, s.kv_heads(), s.hd, scale_of(s));
    CUDA_CHECK_LAUNCH();
  });
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* dy, float* dqkv, float* ws,
                        cudaStream_t stream, const AttentionKept* kept) {
  if (empty(s)) return;
  check_groups(s);
  float* stats_lse = ws;
  float* delta = ws + static_cast<int64_t>(s.B) * s.H * s.T;
  if (kept) attention_delta(s, *kept, dy, delta, nullptr, stream);
  const float* lse = kept ? kept->lse : stats_lse;
  with_head_dim(s.hd, [&](auto tag) {
    constexpr int HD = decltype(tag)::value;
    const float scale = scale_of(s);
    if (!kept) {  // the forward again, for the rows' log-sum-exp and delta
      SUBDP_LAUNCH(grid_of(s, s.H), kRowsPerBlock * row_lanes<HD>(), 0, stream, flash_forward_kernel<HD, true>)
      (qkv, dy, nullptr, stats_lse, delta, s.T, s.H, s.kv_heads(), s.hd, scale);
      CUDA_CHECK_LAUNCH();
    }
    SUBDP_LAUNCH(grid_of(s, s.kv_heads()), kRowsPerBlock * row_lanes<HD>(), 0, stream, flash_backward_dkdv_kernel<HD>)
    (qkv, dy, lse, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
    CUDA_CHECK_LAUNCH();
    SUBDP_LAUNCH(grid_of(s, s.H), kRowsPerBlock * row_lanes<HD>(), 0, stream, flash_backward_dq_kernel<HD>)
    (qkv, dy, lse, delta, dqkv, s.T, s.H, s.kv_heads(), s.hd, scale);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace subdp::cuda
