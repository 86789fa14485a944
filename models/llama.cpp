// LLaMA model: units, construction, forward and backward (see llama.h).
#include "models/llama.h"

#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/layers/embedding.h"
#include "engine/layers/rope.h"
#include "models/classifier_head.h"
#include "models/llama_block.h"
#include "models/transformer_units.h"

namespace subdp {

namespace {

/// Local SwiGLU width and attention width of block `index` (transformer_units.h).
std::pair<int64_t, int64_t> local_widths(const ModelConfig& c, const SubnetMask& mask, int index) {
  return local_block_widths(mask, index, llama_ffn_width(c), c.width, c.heads);
}

class Llama : public Model {
 public:
  Llama(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute, ParamLayout layout);
  /// batch.x, batch.y: (B, T) int32 tokens and next tokens, T <= context.
  void enqueue_forward(const Batch& batch, bool training) override;
  void backward() override;
  int64_t positions_per_example() const override { return T_; }
  int residual_blocks() const override { return static_cast<int>(blocks_.size()); }
  std::vector<float> read_logits(int64_t first, int64_t rows) const override { return head_->read_logits(first, rows); }
  void keep_logits() override { head_->keep_logits(); }

 private:
  /// The blocks and the shared scratch they are sized for.
  void build_blocks(const ModelConfig& c, int64_t rows);
  std::unique_ptr<Embedding> tok_;
  std::vector<std::unique_ptr<LlamaBlock>> blocks_;
  std::unique_ptr<RMSNorm> norm_;
  std::unique_ptr<Linear> output_;
  std::unique_ptr<CrossEntropyHead> head_;  // logits (B, T, V), then dlogits over them
  /// One flat scratch of B*T rows: the blocks' forward scratch (RMSNorm and SwiGLU outputs);
  /// from the end of the forward, the final norm's output (B, T, C); the blocks' backward
  /// scratch (LlamaScratch::work).
  Tensor shared_;
  std::unique_ptr<RopeTables> rope_;
  Tensor x0_, norm_out_, dres_;
  LlamaScratch scratch_;
  LlamaActivations shared_block_;  // under recompute: the one set every block views
  BlockTrace trace_;               // the blocks' inputs in the last forward
  bool recompute_;
  const float* last_ = nullptr;  // (B, T, C) input of the final norm
  const int32_t* tokens_ = nullptr;
  int B_ = 0, Tcur_ = 0, T_, V_, C_, hd_, max_batch_;
};

Llama::Llama(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute,
             ParamLayout layout)
    : Model(mask, seed, layout),
      recompute_(recompute),
      T_(c.context),
      V_(c.vocab),
      C_(c.width),
      hd_(c.width / c.heads),
      max_batch_(max_batch) {
  llama_units(c);  // validates the sizes
  const int64_t rows = static_cast<int64_t>(max_batch) * T_;
  tok_ = std::make_unique<Embedding>(params_, "tok_embeddings", V_, C_, kTransformerWeight);
  rope_ = std::make_unique<RopeTables>(T_, hd_, c.rope_theta);
  build_blocks(c, rows);
  norm_ = std::make_unique<RMSNorm>(params_, "norm", C_);
  norm_->allocate_stats(rows);
  output_ = std::make_unique<Linear>(params_, "output", C_, V_, false, UnitRef{}, UnitRef{}, -1, kTransformerWeight);
  x0_ = Tensor::empty({rows, int64_t{C_}}, MemCategory::activations);
  norm_out_ = shared_.slice0(0, rows * C_).view({rows, int64_t{C_}});
  head_ = std::make_unique<CrossEntropyHead>(rows, V_, C_);
  dres_ = Tensor::empty({rows, int64_t{C_}}, MemCategory::activations);
}

void Llama::build_blocks(const ModelConfig& c, int64_t rows) {
  int64_t hidden = 0, width = 0;
  for (int b = 0; b < c.depth; ++b) {
    const auto [h, w] = local_widths(c, mask_, b);
    hidden = std::max(hidden, h);
    width = std::max(width, w);
  }
  shared_ = Tensor::empty({rows * llama_scratch_width(C_, hidden, width, recompute_)}, MemCategory::activations);
  if (recompute_) shared_block_ = LlamaActivations::allocate(rows, C_, hidden, kept_activation_dtype());
  LlamaBlockSpec spec;
  spec.max_rows = rows;
  spec.forward_scratch = &shared_;
  spec.shared = recompute_ ? &shared_block_ : nullptr;
  spec.rope_cos = &rope_->cos;
  spec.rope_sin = &rope_->sin;
  for (int b = 0; b < c.depth; ++b) {
    blocks_.push_back(std::make_unique<LlamaBlock>(params_, mask_, c, b, spec));
    const auto [h, w] = local_widths(c, mask_, b);
    SUBDP_ASSERT(blocks_.back()->hidden() == h && blocks_.back()->attn_width() == w);
  }
  scratch_.dln = Tensor::empty({rows, int64_t{C_}}, MemCategory::activations);
  scratch_.ln_out = Tensor::empty({rows, int64_t{C_}}, MemCategory::activations);
  scratch_.work = shared_;
  scratch_.attn.bind(shared_, rows, C_, width, T_, hd_, omp_get_max_threads(),
                     kept_qkv_dtype(recompute_) == DType::bf16);
}

void Llama::enqueue_forward(const Batch& batch, bool training) {
  SUBDP_CHECK(batch.x.ndim() == 2 && batch.x.dtype() == DType::i32 && batch.y.numel() == batch.x.numel(),
              "LLaMA expects (B, T) int32 tokens and targets, got x {}", shape_str(batch.x.shape()));
  const int B = static_cast<int>(batch.n), T = static_cast<int>(batch.x.dim(1));
  SUBDP_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= T_,
              "LLaMA: batch of {} sequences of {} tokens exceeds the model's {} x context {}", B, T, max_batch_, T_);
  rope_->fill();
  const int64_t rows = static_cast<int64_t>(B) * T;
  B_ = B;
  Tcur_ = T;
  tokens_ = batch.x.i32();
  tok_->forward(tokens_, x0_.f32(), rows, false);
  last_ = run_blocks(blocks_, x0_.f32(), B, T, scratch_, training, trace_);
  norm_->forward(last_, norm_out_.f32(), rows);
  head_->project(norm_out_.f32(), output_->weight->value.f32(), rows);  // logits (rows, V)
  head_->loss(batch.y.i32(), rows, training);
}

void Llama::backward() {
  const int64_t rows = static_cast<int64_t>(B_) * Tcur_;
  float* dln = scratch_.dln.f32();
  const Param& w = *output_->weight;  // d output.weight; dln (rows, C)
  head_->project_backward(norm_out_.f32(), w.value.f32(), w.grad.defined() ? w.grad.f32() : nullptr, dln, rows);
  float* dres = dres_.f32();
  backend().fill(dres, 0.f, rows * C_);
  norm_->backward(last_, dln, dres, rows);
  backprop_blocks(blocks_, dres, B_, Tcur_, scratch_, recompute_, trace_);
  tok_->backward(tokens_, dres, rows);
}

}  // namespace

ModelUnits llama_units(const ModelConfig& c) {
  SUBDP_CHECK(c.heads > 0 && c.width % c.heads == 0, "[model] width = {} must be divisible by heads = {}", c.width,
              c.heads);
  SUBDP_CHECK((c.width / c.heads) % 2 == 0, "[model] width / heads = {} / {}: RoPE needs an even head width", c.width,
              c.heads);
  SUBDP_CHECK(c.depth >= 1 && c.context >= 1 && c.vocab >= 1,
              "[model] llama needs depth, context and vocab >= 1 (got {}, {}, {})", c.depth, c.context, c.vocab);
  const int kv = llama_kv_heads(c);
  SUBDP_CHECK(kv >= 1 && kv <= c.heads && c.heads % kv == 0, "[model] kv_heads = {} must divide heads = {}", kv,
              c.heads);
  const int64_t C = c.width, hd = C / c.heads, H = llama_ffn_width(c), qkv = (c.heads + 2 * int64_t{kv}) * hd * C;
  ModelUnits u;
  for (int b = 0; b < c.depth; ++b) {
    const std::string name = "layers." + std::to_string(b);
    // Heads as units: multi-head attention only (the config refuses neuron level for grouped heads).
    u.layers.push_back({name + ".heads", c.heads, 3 * hd * C + hd * C});
    u.layers.push_back({name + ".mlp", static_cast<int>(H), 3 * C});
    // attention_norm, ffn_norm (C each), wqkv ((heads + 2 kv_heads) hd C), wo (C^2), w1, w3 (HC each), w2 (HC)
    u.blocks.push_back({name, 0, 2 * C + qkv + C * C + 3 * H * C, true});
  }
  return u;
}

std::unique_ptr<Model> make_llama(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                  bool recompute_blocks, ParamLayout layout) {
  return std::make_unique<Llama>(c, mask, max_batch, seed, recompute_blocks, layout);
}

}  // namespace subdp
