// GPT: decoder-only transformer as torch_ref.py's GPT. Token embedding wte (vocab, C) and
// position embedding wpe (context, C); blocks of pre-LayerNorm
//   x = x + proj(attn(ln1(x)));  x = x + fc2(gelu_tanh(fc(ln2(x))));
// final LayerNorm lnf; logits = lnf(x) wte^T (tied head); mean cross-entropy over B*T
// positions. GPT-2 initialisation: N(0, 0.02) for Linear and Embedding weights, zero biases.
// Units (neuron level), two maskable layers per block (ids 2i, 2i+1):
//   heads: head h = its rows of q, k, v (+ biases) and its columns of proj (attention.h);
//   mlp:   hidden neuron j = row j of fc (+ bias entry) and column j of fc2.
// Dense at neuron level: wte, wpe, lnf and each block's ln1, ln2, proj.bias, fc2.bias.
// Block level: each block with all of its parameters (norms included) is a unit; every block
// is droppable, one stage. A forward-masked dropped block is the identity (absent).
// Forward masking scales kept units by mask.scale: per head on the attention output before
// proj and per neuron after GELU (neuron level), or each kept block's two branch outputs
// (block level; pinned blocks are not scaled).
#pragma once
#include <memory>
#include <vector>

#include "engine/layers/attention.h"
#include "engine/layers/embedding.h"
#include "engine/layers/layernorm.h"
#include "engine/layers/linear.h"
#include "models/classifier_head.h"
#include "models/model.h"

namespace subdp {

/// Units: attention heads and MLP hidden neurons per block (neuron level); whole blocks
/// (block level). Errors name the [model] key (width not divisible by heads, ...).
ModelUnits gpt_units(const ModelConfig& c);
/// The GPT for `mask` with activations for max_batch sequences of model.context tokens;
/// batches are (B, T) int32 tokens and next tokens. recompute_blocks: train.recompute =
/// "blocks". Errors as gpt_units, naming the [model] key.
std::unique_ptr<Model> make_gpt(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                bool recompute_blocks = false, ParamLayout layout = ParamLayout::per_param);

/// What a block keeps from its forward pass for its backward, besides its output: mid
/// (rows, C), fc_pre (rows, H; bf16 under [device] precision = "bf16",
/// kept_activation_dtype()), qkv (rows, 3C; bf16 only in a block's own set, kept_qkv_dtype()),
/// the stored attention output attn_y (rows, C) and ln1 / ln2 statistics (rows each). Each block owns one by default;
/// under train.recompute = "blocks" the model allocates one set for its widest block and every block views it, and the
/// backward pass recomputes a block's set from its input.
struct BlockActivations {
  Tensor mid, fc_pre, qkv, attn_y, ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
  /// Allocates the shared set (recompute) for rows rows of width C and MLP width H
  /// (activations), fc_pre of kept_type (kept_activation_dtype()), qkv float32.
  static BlockActivations allocate(int64_t rows, int64_t C, int64_t H, DType kept_type);
};

/// Backward scratch shared by every block, for B*T rows.
struct GptScratch {
  /// (B, T, C): the gradient entering a branch (dres times the block-level branch scale),
  /// then, once the branch's output layer has read it, the gradient of its LayerNorm output.
  Tensor dln;
  /// Flat view of Gpt's shared scratch: the MLP hidden gradient dh (B, T, H) (widest local H);
  /// attention's dy and dqkv (attn.grads) are in the same floats, used after dh is dead.
  Tensor work;
  AttentionScratch attn;
  /// (B, T, C): ln1's or ln2's output recomputed for the weight gradient that reads it (the
  /// blocks do not store LayerNorm outputs).
  Tensor ln_out;
};

class TransformerBlock {
 public:
  /// forward_scratch: flat, at least max_rows * max(C, local hidden width) floats shared by
  /// the blocks. The ln1 and ln2 outputs and the GELU output are always computed there and
  /// not stored: backward recomputes them (LayerNorm from its stored statistics, GELU from
  /// its stored input), bit for bit. Under backward masking the attention output is computed
  /// there too and not stored when the block is dropped; at neuron level only the kept
  /// heads' columns of it (the columns proj's weight gradient reads) are stored.
  /// shared: the model's one BlockActivations under recompute, null for a set of its own.
  TransformerBlock(ParamSet& ps, const SubnetMask& mask, const ModelConfig& c, int index, int64_t max_rows,
                   const Tensor& forward_scratch, const BlockActivations* shared = nullptr);
  /// False when forward masking drops the block (identity, no parameters).
  bool present() const { return ln1_ != nullptr; }
  /// Stochastic depth for the next forward and backward: skip the block (identity), or
  /// multiply both branch outputs by `scale` on top of the mask's block scale.
  void set_step(bool skipped, float scale) {
    skipped_ = skipped;
    step_scale_ = scale;
  }
  /// True when the block computes in this step: present and not skipped.
  bool runs() const { return present() && !skipped_; }
  /// x (B, T, C) -> block output (B, T, C); returns x itself when the block is absent.
  /// Attention forms its probabilities in s.attn's workspace.
  const float* forward(const float* x, int B, int T, GptScratch& s);
  /// dres (B, T, C): gradient of the block output on entry, of its input x on exit.
  void backward(const float* x, float* dres, int B, int T, GptScratch& s) const;
  /// Local MLP hidden width and attention width as built (Gpt checks them against the widths
  /// it sized the shared scratch with before building the blocks).
  int64_t hidden() const { return present() ? fc_->out() : 0; }
  int64_t attn_width() const { return present() ? static_cast<int64_t>(attn_->local_heads()) * (C_ / heads_) : 0; }

 private:
  std::unique_ptr<LayerNorm> ln1_, ln2_;
  std::unique_ptr<CausalSelfAttention> attn_;
  std::unique_ptr<Linear> fc_, fc2_;
  // (B, T, C or H); ln1_out_, ln2_out_ and fc_act_ are views of the forward scratch. fc_pre_
  // is bf16 under precision bf16 (kept_activation_dtype()).
  Tensor ln1_out_, mid_, ln2_out_, fc_pre_, fc_act_, out_;
  bool half_mlp() const { return fc_pre_.dtype() == DType::bf16; }
  /// fc_pre_ and fc_act_ = gelu(fc_pre_) (rows, H) from ln2_out_.
  void mlp_forward(int64_t rows);
  /// fc2's backward from dout (rows, C): its weight gradients, and dh (rows, H) = d(fc_pre)
  /// before the neuron scale (dh first holds the recomputed GELU output fc2's dW reads).
  void mlp_backward_through_gelu(float* dh, const float* dout, int64_t rows) const;
  int64_t fc2_grad_cols_ = 0;  // leading fc_act columns fc2's weight gradient reads (0: none)
  int C_, heads_;
  float branch_scale() const { return branch_scale_ * step_scale_; }
  float branch_scale_ = 1.f, neuron_scale_ = 1.f;
  bool skipped_ = false;    // stochastic depth: skipped in this step
  float step_scale_ = 1.f;  // stochastic depth: 1/keep for a kept block in a training step
};

class Gpt : public Model {
 public:
  /// recompute_blocks: train.recompute = "blocks" (BlockActivations).
  Gpt(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute_blocks = false,
      ParamLayout layout = ParamLayout::per_param);
  /// batch.x, batch.y: (B, T) int32 tokens and next tokens, T <= context.
  void enqueue_forward(const Batch& batch, bool training) override;
  void backward() override;
  int64_t positions_per_example() const override { return T_; }
  int residual_blocks() const override { return static_cast<int>(blocks_.size()); }
  /// Logits (B*T, vocab) of the last forward.
  std::vector<float> read_logits(int64_t first, int64_t rows) const override { return head_->read_logits(first, rows); }
  void keep_logits() override { head_->keep_logits(); }
  /// Logits (B*T, vocab), copied to the host, of host tokens (B, T) int32, B <= max_batch,
  /// T <= context (generation: the tokens are staged into backend memory).
  std::vector<float> logits(const int32_t* tokens, int B, int T);
  int context() const { return T_; }
  int vocab() const { return V_; }

 private:
  /// Throws Error unless 1 <= B <= max_batch and 1 <= T <= context.
  void check_batch(int B, int T) const;
  /// training: stochastic depth applies (set_dropped_blocks).
  void run_forward(const int32_t* tokens, int B, int T, bool training);
  std::unique_ptr<Embedding> wte_, wpe_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<LayerNorm> lnf_;
  /// One flat scratch of B*T rows, used in turn by (1) the blocks' forward scratch (ln1, ln2
  /// and GELU outputs; under backward masking also attention outputs, TransformerBlock);
  /// (2) from the end of the forward pass, lnf's output (B, T, C), read by the head's backward
  /// (the head writes its dlogits over the logits); (3) the blocks' backward
  /// (GptScratch::work). Nothing written in one phase is read in a later one.
  Tensor shared_;
  Tensor x0_;       // (B, T, C) embeddings
  Tensor lnf_out_;  // (B, T, C) view of shared_
  Tensor pos_ids_;  // (B, T) int32 positions
  int pos_T_ = 0;   // the T pos_ids_ was last written for (every row then holds 0 .. T - 1)
  Tensor dres_;     // (B, T, C) residual-stream gradient
  GptScratch scratch_;
  std::unique_ptr<CrossEntropyHead> head_;  // logits (B, T, V), then dlogits over them
  BlockTrace trace_;                        // the blocks' inputs in the last forward
  BlockActivations shared_block_;           // under recompute: the one set every block views
  bool recompute_ = false;
  const float* last_ = nullptr;  // (B, T, C) input of lnf
  const int32_t* tokens_ = nullptr;
  int B_ = 0, Tcur_ = 0, T_, V_, C_, max_batch_;
};

}  // namespace subdp
