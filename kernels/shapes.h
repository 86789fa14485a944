// Geometry structs shared by every backend's kernels and by the layers that call them
// (backend-neutral: no device, no allocation), and the run an optimizer update walks.
#pragma once
#include <cstdint>

namespace subdp {

/// Geometry of one conv2d call: input (N, Cin, H, W), weight (Cout, Cin, k, k), square
/// kernel, stride and zero padding as in torch.nn.Conv2d; output (N, Cout, Ho, Wo).
struct ConvShape {
  int N = 0, Cin = 0, H = 0, W = 0, Cout = 0, k = 3, stride = 1, pad = 1;
  int Ho() const { return (H + 2 * pad - k) / stride + 1; }
  int Wo() const { return (W + 2 * pad - k) / stride + 1; }
};

/// Geometry of one attention call: B sequences of T positions, H query heads of hd channels
/// and KV key / value heads (grouped-query attention, Ainslie et al. 2023, arXiv:2305.13245:
/// query head h reads key / value head h / (H / KV); KV = 0 means H, multi-head attention).
/// A qkv row holds the H q heads, then the KV k heads, then the KV v heads.
struct AttentionShape {
  int B = 0, T = 0, H = 0, hd = 0, KV = 0;
  int kv_heads() const { return KV > 0 ? KV : H; }
  int group() const { return H / kv_heads(); }                    // query heads per key / value head
  int64_t width() const { return static_cast<int64_t>(H) * hd; }  // C of y (and of the q section)
  int64_t qkv_width() const { return static_cast<int64_t>(H + 2 * kv_heads()) * hd; }
};

/// What an attention forward keeps for its backward, so that the backward need not run the
/// forward again for its statistics (FlashAttention-2's L and O: Dao, arXiv:2307.08691,
/// algorithm 2): lse (B, H, T) floats, each query row's log-sum-exp as the backend's forward
/// wrote it (in the backend's own form: CUDA's tensor-core kernels keep it in base 2), and y,
/// the forward's output as kept, (B, T, H*hd) rows of float32 or bf16 (y_bf16) whose values
/// times y_scale are the attention output (a layer keeps head_scale times it: y_scale =
/// 1 / head_scale). The backward then forms delta = rowsum(dy * output) from them.
struct AttentionKept {
  const float* lse = nullptr;
  const void* y = nullptr;
  bool y_bf16 = false;
  float y_scale = 1.f;
};

/// Widest head the CUDA attention kernels are compiled for (their per-thread rows are that many
/// floats); the config rules refuse a wider one on device.type = "cuda" before a run starts.
constexpr int kCudaMaxAttentionHeadDim = 128;

/// One contiguous run of an optimizer update, n floats each, in backend memory: values w,
/// gradient g, and the state: s0 (SGD's momentum buffer, null without momentum; AdamW's
/// first moment m) and s1 (AdamW's second moment v; null for SGD).
struct UpdateRun {
  float* w;
  const float* g;
  float* s0;
  float* s1;
  int64_t n;
};

}  // namespace subdp
