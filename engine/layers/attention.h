// Causal multi-head self-attention of a transformer block (torch_ref.py Block):
// qkv = x Wqkv^T + bqkv (C -> 3C), y = softmax_causal(q k^T / sqrt(hd)) v per head,
// out = proj(y) (C -> C). LLaMA's form (AttentionSpec): no biases, q and k rotated by RoPE
// after the projection. Parameter names follow the torch state_dict: <prefix>.qkv.* and
// <prefix>.proj.*.
// Heads as units (neuron level): head h is rows [h*hd, (h+1)*hd) of each of the q, k, v
// sections of qkv.weight / qkv.bias plus the same columns of proj.weight. The qkv tensors
// are then shaped (3, C, C) / (3, C) with the unit axis 1, same memory layout as torch's
// (3C, C) / (3C); unmasked they keep torch's shapes. Locally, heads are ordered kept-first
// (LayerMask::order), so a forward-masked layer holds Hk heads and computes on them only,
// and a backward-masked layer takes weight gradients for the first Hk heads of each section.
// Grouped-query attention (AttentionSpec::kv_heads < heads, LLaMA): qkv.weight is
// ((heads + 2 kv_heads) * hd, C), the q heads then the k and v heads; heads are not maskable.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "engine/layers/linear.h"
#include "engine/subnet/param.h"
#include "kernels/shapes.h"

namespace subdp {

/// Backward scratch shared by the attention layers of a model (sized for the widest one).
struct AttentionScratch {
  Tensor grads;  // flat: dy (B, T, Ck), the attention output's gradient, then dqkv (B, T, 3 Ck)
  Tensor ws;     // attention_workspace_floats: per thread slot the probabilities (forward and
                 // backward) and their gradient (backward), (T, T) each
  /// With bf16 q, k, v kept (AttentionSpec::qkv_type): flat, (B, T, 3 Ck) floats, their
  /// float32 values for the kernels, after the layer's input (forward) and after dqkv
  /// (backward). Undefined otherwise.
  Tensor qkv_f32;
  int slots = 1;
  /// Floats per row of the area bind() takes for layers of width C and local width Ck:
  /// 4 Ck (dy, dqkv), and with bf16 q, k, v kept max(C, 4 Ck) + 3 Ck (then qkv_f32).
  static int64_t floats_per_row(int64_t C, int64_t Ck, bool kept_bf16);
  /// Allocates dy and dqkv for rows = B*T rows of width Ck = heads * head_dim (activations) and
  /// the backend's workspace for that shape and `slots` threads.
  void allocate(int64_t rows, int64_t Ck, int T, int head_dim, int slots);
  /// Places dy, dqkv (and, kept_bf16, qkv_f32) in the first rows * floats_per_row(C, Ck,
  /// kept_bf16) floats of `area` (flat, a scratch the model reuses outside attention) and
  /// allocates only the workspace.
  void bind(const Tensor& area, int64_t rows, int64_t C, int64_t Ck, int T, int head_dim, int slots,
            bool kept_bf16 = false);
};

/// What a CausalSelfAttention layer is built from (named: most fields have defaults).
struct AttentionSpec {
  std::string prefix;           // parameter names <prefix>.qkv.weight, <prefix>.proj.bias, ...
  int C = 0, heads = 0, T = 0;  // width, heads, context
  int kv_heads = 0;             // key / value heads (grouped-query attention); 0: heads
  int64_t max_rows = 0;         // B * T rows at most
  int head_layer = -1;          // maskable layer whose units are the heads; -1: heads not maskable
  int block = -1;               // residual block holding the layer; -1: none
  float head_scale = 1.f;       // neuron-level forward masking: 1/keep on the kept heads' output
  InitSpec weight_init;         // qkv weight, and proj weight unless proj_weight_init is set
  std::optional<InitSpec> proj_weight_init;
  const Tensor* y_scratch = nullptr;  // see the constructor; null: y_ is the layer's own
  int64_t y_kept_cols = 0;
  const Tensor* qkv_area = nullptr;                  // see the constructor; null: a tensor of its own
  const Tensor* y_area = nullptr;                    // see the constructor; null: a tensor of its own
  DType qkv_type = DType::f32;                       // storage of the kept q, k, v: f32, or bf16 (precision bf16)
  bool bias = true;                                  // qkv and proj biases (GPT); LLaMA has none
  std::string qkv_name = "qkv", proj_name = "proj";  // <prefix>.<qkv_name>.weight, ...
  // Rotary position embeddings on q and k (LLaMA): cos / sin tables (context, hd/2) in backend
  // memory (kernels/cpu/rope.h), owned by the model; null: no rotation (GPT).
  const Tensor* rope_cos = nullptr;
  const Tensor* rope_sin = nullptr;
};

class CausalSelfAttention {
 public:
  /// prefix: "blocks.<i>". head_layer: maskable layer id of the heads, -1 = not masked.
  /// head_scale multiplies the attention output y before proj (forward masking, 1/keep).
  /// Weights drawn per `weight_init` (proj's per `*proj_weight_init` when non-null), biases zero.
  /// Activations for max_rows = B*T rows.
  /// y_scratch: when non-null, the attention output y (read again only by proj's weight
  /// gradient) is computed in this flat scratch of at least max_rows * C floats, and only
  /// its first y_kept_cols columns (the kept heads' prefix: proj's weight-gradient columns)
  /// are stored, none when proj has no weight gradient (backward masking).
  /// qkv_area, y_area: when non-null, flat areas of at least max_rows * 3C values of qkv_type
  /// and max_rows * C floats that hold qkv and the stored attention output instead of tensors
  /// of the layer's own (shared under recompute).
  /// qkv_type bf16: q, k, v (after RoPE) are kept in bf16, and both passes run the attention
  /// kernels on the kept values, so the forward computes from the values the backward reads:
  /// read as bf16 where the backend's kernels take them (Backend::attention_reads_bf16), else
  /// as their float32 values in the scratch's qkv_f32. The attention output y is then computed in the scratch's
  /// first rows * Ck floats (where the input x may be: the qkv GEMM reads it first) and its
  /// columns proj's weight gradient reads (y_kept_cols with y_scratch, else all) kept in bf16
  /// (proj's GEMMs round y to bf16 anyway); not with y_area (recompute keeps float32).
  CausalSelfAttention(ParamSet& ps, const AttentionSpec& spec);

  int channels() const { return C_; }
  /// Heads present locally (Hk; all heads unless forward-masked).
  int local_heads() const { return local_heads_; }
  /// Columns of the local qkv: (Hk + 2 KVk) * hd (3 Ck without grouped-query attention).
  int64_t qkv_cols() const { return static_cast<int64_t>(local_heads_ + 2 * local_kv_heads_) * hd_; }

  /// out (B, T, C) = proj(attention(x (B, T, C))), proj bias included. Stores qkv and y; the
  /// attention probabilities (B, Hk, T, T) are formed in s.ws and recomputed in backward, so
  /// they cost no activation memory (B*Hk*T*T floats, as many as the MLP's GELU input at
  /// T = 128, 8 heads, C = 256, mlp_ratio 4) for 2*B*Hk*T*T*hd more FLOPs. Where the backend
  /// keeps statistics (CUDA) and y is kept whole, also each row's log-sum-exp (B*Hk*T floats),
  /// which spares the backward the forward's products again.
  void forward(const float* x, float* out, int B, int T, AttentionScratch& s);
  /// dout (B, T, C) -> dx (B, T, C) written; accumulates held parameter gradients (kept prefix).
  /// dx may be dout: dout is read (by proj's backward) before dx is written.
  void backward(const float* x, const float* dout, float* dx, int B, int T, AttentionScratch& s) const;

  Param* qkv_weight = nullptr;   // (3, Ck, C) local, torch (3C, C); grouped-query ((H + 2 KV) hd, C)
  Param* qkv_bias = nullptr;     // (3, Ck); null without biases
  std::unique_ptr<Linear> proj;  // weight (C, Ck), bias (C) dense (none without biases)

 private:
  bool kept_bf16() const { return qkv_.dtype() == DType::bf16; }
  /// The kept q, k, v (rows, qkv_cols()) as floats: qkv_ itself, or (bf16 kept) converted into
  /// s.qkv_f32.
  const float* qkv_f32(int64_t rows, const AttentionScratch& s) const;
  /// What the forward kept for the backward's statistics (lse_ and the whole kept output); empty
  /// when lse_ is undefined.
  AttentionKept kept_statistics() const;
  /// RoPE on the q and k sections of qkv (rows, qkv_cols()), in place; inverse for their gradients.
  void rotate_qk(float* qkv, int64_t rows, int T, bool inverse) const;
  /// This call's geometry for the kernels.
  AttentionShape shape(int B, int T) const { return {B, T, local_heads_, hd_, local_kv_heads_}; }
  int C_, heads_, hd_, local_heads_, local_kv_heads_;
  float head_scale_;
  const Tensor *rope_cos_, *rope_sin_;
  Tensor qkv_;     // (B, T, qkv_cols())
  Tensor y_;       // (B, T, Ck) attention output (scaled); a view of the scratch when shared;
                   // undefined with bf16 q, k, v kept
  Tensor y_kept_;  // (B, T, y_kept_cols_) stored prefix of y when y_ is shared; bf16 with q, k, v
  int64_t y_kept_cols_ = 0;
  Tensor lse_;  // (B, Hk, T) the rows' log-sum-exp, where the backend keeps statistics and the
                // layer its whole output (y_ own, or y_kept_ of every column); else undefined
};

}  // namespace subdp
