// Causal multi-head self-attention kernels (float32, OpenMP over (batch, head), one
// single-threaded OpenBLAS GEMM per (batch, head) product).
// Layout as torch_ref.py's Block: qkv (B, T, (H + 2 KV)*hd) holds the q (H heads), k and v
// (KV heads each) sections side by side, head h of a section at its columns [h*hd, (h+1)*hd);
// the output y (B, T, H*hd) puts query head h at the same columns as its q. Query head h
// attends with key / value head h / (H / KV) (grouped-query attention; KV = H: multi-head).
// att = softmax(q k^T / sqrt(hd)) with a causal mask (key j <= query i).
#pragma once
#include <cstdint>

#include "kernels/shapes.h"

namespace subdp::cpu {

using ::subdp::AttentionShape;

/// Floats of workspace attention_forward / attention_backward need: two (T, T) matrices per
/// thread slot (the probabilities when they are not stored, and their gradient).
int64_t attention_workspace_floats(const AttentionShape& s, int slots);

/// y (B, T, H*hd) = softmax_causal(q k^T * scale) v, scale = 1/sqrt(hd), from
/// qkv (B, T, s.qkv_width()). When att is non-null, att (B, H, T, T) receives the probabilities
/// (zero above the diagonal) for the backward pass; when null they are formed one (T, T)
/// matrix at a time in ws (attention_workspace_floats(s, slots) floats, at most `slots`
/// threads) and attention_backward recomputes them.
void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y, float* ws = nullptr,
                       int slots = 1);

/// Backward of attention_forward: dqkv (B, T, s.qkv_width()) written from dy (B, T, H*hd), the
/// forward's qkv and att, or, with att null, probabilities recomputed from qkv with the
/// forward's arithmetic (bit-identical). ws: attention_workspace_floats(s, slots) floats;
/// at most `slots` threads run.
void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy, float* dqkv,
                        float* ws, int slots);

}  // namespace subdp::cpu
