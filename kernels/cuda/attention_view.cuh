// Where a head's rows sit in the packed qkv and the (B, T, C) outputs, for the attention
// kernels (attention.cu on CUDA cores, attention_tc.cu on tensor cores).
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace subdp::cuda {

/// Where query head h of sequence b sits: qkv rows of ld = (H + 2 KV) hd values of type In
/// (float, or bf16 for the tensor-core kernels reading a kept bf16 copy) with h's q at column
/// h*hd and its key / value head g = h / (H / KV) at H*hd + g*hd (k) and (H + KV)*hd + g*hd
/// (v); dy / y rows of C = H*hd floats with head h at h*hd.
template <class In>
struct HeadViewOf {
  int64_t ld, C;
  const In* q;    // row 0 of head h's q
  const In* k;    // row 0 of its key head
  const In* v;    // row 0 of its value head
  int64_t y_off;  // offset of row 0, column h*hd in (B, T, C) tensors
  int64_t stat;   // offset of row 0 in (B, H, T) statistics
};
using HeadView = HeadViewOf<float>;

/// The view of query head h of sequence b (HeadViewOf above). KV: the key / value heads,
/// AttentionShape::kv_heads() (never 0: H / KV divides).
template <class In>
__device__ inline HeadViewOf<In> head_view(const In* qkv, int T, int H, int KV, int hd, int b, int h) {
  const int64_t C = static_cast<int64_t>(H) * hd, ld = static_cast<int64_t>(H + 2 * KV) * hd;
  const int64_t g = h / (H / KV);
  const In* row0 = qkv + static_cast<int64_t>(b) * T * ld;
  return {ld,
          C,
          row0 + static_cast<int64_t>(h) * hd,
          row0 + C + g * hd,
          row0 + C + (KV + g) * hd,
          static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hd,
          (static_cast<int64_t>(b) * H + h) * T};
}

/// The view of the query head of block (blockIdx.x, blockIdx.y = b * H + h).
template <class In>
__device__ inline HeadViewOf<In> query_view(const In* qkv, int T, int H, int KV, int hd) {
  const int b = static_cast<int>(blockIdx.y) / H, h = static_cast<int>(blockIdx.y) % H;
  return head_view(qkv, T, H, KV, hd, b, h);
}

}  // namespace subdp::cuda
