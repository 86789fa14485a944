// One LLaMA block (llama.h): pre-RMSNorm attention with RoPE and a SwiGLU MLP, no biases.
// Internal to models/llama.cpp.
#pragma once
#include <memory>

#include "engine/layers/attention.h"
#include "engine/layers/linear.h"
#include "engine/layers/rmsnorm.h"
#include "models/model.h"

namespace subdp {

/// What a block keeps from its forward pass for its backward, besides its output: mid
/// (rows, C), the SwiGLU inputs gate and up (rows, H each; bf16 under [device] precision =
/// "bf16", kept_activation_dtype()), qkv (rows, 3C; bf16 only in a block's own set,
/// kept_qkv_dtype()), the stored attention output attn_y (rows, C) and the two RMSNorms' rstd
/// (rows each). Each block owns a
/// set unless train.recompute = "blocks", where every block views the model's one set.
struct LlamaActivations {
  Tensor mid, gate, up, qkv, attn_y, rstd1, rstd2;
  /// Allocates the shared set (recompute) for rows rows of width C and SwiGLU width H
  /// (activations), gate and up of kept_type, qkv float32.
  static LlamaActivations allocate(int64_t rows, int64_t C, int64_t H, DType kept_type);
};

/// Backward scratch shared by the blocks, for B*T rows.
struct LlamaScratch {
  Tensor dln;  // (B, T, C): a branch's input gradient, then its RMSNorm output's gradient
  // flat: the SwiGLU output (recomputed), then its gradient (B, T, H) (with bf16 gate and up:
  // then d(gate) there and d(up) in the next H columns); later attention's grads
  Tensor work;
  Tensor ln_out;  // (B, T, C): an RMSNorm output recomputed for the weight gradient that reads it
  AttentionScratch attn;
};

/// The model-wide inputs of a block's layers.
struct LlamaBlockSpec {
  int64_t max_rows = 0;
  // flat, max_rows * llama_scratch_width(C, local H, local attention width) floats at least
  const Tensor* forward_scratch = nullptr;
  const LlamaActivations* shared = nullptr;  // recompute: the model's one set; null: its own
  const Tensor* rope_cos = nullptr;          // (context, hd/2) tables, backend memory
  const Tensor* rope_sin = nullptr;
};

/// Floats per row of the LLaMA's one shared scratch, the blocks' forward and backward scratch
/// (the widest local SwiGLU width H and attention width A): the head's norm output and a
/// block's norm output (C), the SwiGLU output (H; under bf16 after the norm output: C + H),
/// its gradient (H; under bf16 with d(up): 2H), attention's scratch
/// (AttentionScratch::floats_per_row).
/// recompute: train.recompute = "blocks" (q, k, v kept float32: kept_qkv_dtype).
int64_t llama_scratch_width(int64_t C, int64_t H, int64_t A, bool recompute);

class LlamaBlock {
 public:
  /// Block `index` of model c: registers its parameters in ps under "layers.<index>." (the
  /// usual LLaMA names), none when forward masking drops it, and under neuron masking only the
  /// heads and SwiGLU neurons the mask gives this rank. Allocates its kept activations unless
  /// spec.shared is set.
  LlamaBlock(ParamSet& ps, const SubnetMask& mask, const ModelConfig& c, int index, const LlamaBlockSpec& spec);
  /// False when forward masking drops the block (identity, no parameters).
  bool present() const { return norm1_ != nullptr; }
  /// Stochastic depth for the next forward and backward (as TransformerBlock::set_step).
  void set_step(bool skipped, float scale) {
    skipped_ = skipped;
    step_scale_ = scale;
  }
  /// True when the block computes in this step: present and not skipped by stochastic depth.
  bool runs() const { return present() && !skipped_; }
  /// x (B, T, C) -> block output (B, T, C); x itself when the block does not run.
  const float* forward(const float* x, int B, int T, LlamaScratch& s);
  /// dres (B, T, C): gradient of the block output on entry, of its input x on exit. Overwrites
  /// the stored gate and up: once per forward.
  void backward(const float* x, float* dres, int B, int T, LlamaScratch& s) const;
  /// Local SwiGLU width H (kept neurons under neuron masking); 0 for a dropped block.
  int64_t hidden() const { return present() ? w1_->out() : 0; }
  /// Local attention width A = local query heads * head dim; 0 for a dropped block.
  int64_t attn_width() const { return present() ? static_cast<int64_t>(attn_->local_heads()) * (C_ / heads_) : 0; }

 private:
  /// The MLP half of forward: out = w2(neuron_scale * swiglu(w1(norm_out), w3(norm_out))).
  void mlp_forward(float* out, int64_t rows);
  /// The MLP half of backward: dres = d(out) on entry, d(mid) on exit.
  void mlp_backward(float* dres, int64_t rows, LlamaScratch& s) const;
  bool half_mlp() const { return gate_.dtype() == DType::bf16; }
  /// dres times the branch scale: dres itself, or a scaled copy in s.dln.
  const float* branch_grad(float* dres, int64_t n, LlamaScratch& s) const;
  float branch_scale() const { return branch_scale_ * step_scale_; }
  std::unique_ptr<RMSNorm> norm1_, norm2_;
  std::unique_ptr<CausalSelfAttention> attn_;
  std::unique_ptr<Linear> w1_, w3_, w2_;
  // (B, T, C), (B, T, H): views of the forward scratch; act_ after norm_out_ with bf16 gate
  // and up (it holds w1's, then w3's float output before SwiGLU), else over it.
  Tensor norm_out_, act_;
  Tensor mid_, gate_, up_, out_;  // (B, T, C), (B, T, H) twice (kept_activation_dtype()), (B, T, C)
  int C_, heads_;
  float branch_scale_ = 1.f, neuron_scale_ = 1.f;
  bool skipped_ = false;
  float step_scale_ = 1.f;
};

}  // namespace subdp
