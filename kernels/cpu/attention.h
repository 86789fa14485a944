// Causal multi-head self-attention kernels (float32, OpenMP over (batch, head), one
// single-threaded OpenBLAS GEMM per (batch, head) product).
// Layout as torch_ref.py's Block: qkv (B, T, 3*H*hd) holds the q, k and v sections side by
// side, head h of a section at columns [h*hd, (h+1)*hd); the output y (B, T, H*hd) puts head
// h at the same columns. att = softmax(q k^T / sqrt(hd)) with a causal mask (key j <= query i).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// Geometry of one attention call: B sequences of T positions, H heads of hd channels.
struct AttentionShape {
  int B = 0, T = 0, H = 0, hd = 0;
  int64_t width() const { return static_cast<int64_t>(H) * hd; }  // C of y, a third of qkv
};

/// Floats of workspace attention_backward needs: one (T, T) matrix per thread slot.
int64_t attention_workspace_floats(const AttentionShape& s, int slots);

/// y (B, T, H*hd) = softmax_causal(q k^T * scale) v, scale = 1/sqrt(hd), from
/// qkv (B, T, 3*H*hd). att (B, H, T, T) receives the probabilities (zero above the diagonal),
/// kept for the backward pass.
void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y);

/// Backward of attention_forward: dqkv (B, T, 3*H*hd) written from dy (B, T, H*hd), the
/// forward's qkv and att. ws: attention_workspace_floats(s, slots) floats; at most `slots`
/// threads run.
void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy,
                        float* dqkv, float* ws, int slots);

}  // namespace subdp::cpu
