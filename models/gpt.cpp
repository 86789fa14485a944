// GPT forward/backward (see gpt.h).
#include "models/gpt.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/layers/flops.h"
#include "models/transformer_units.h"

namespace subdp {

namespace {

Tensor activation(int64_t rows, int64_t width) { return Tensor::empty({rows, width}, MemCategory::activations); }

/// y (rows, out) = l(x), also when l has no input column left (a subnetwork keeping no
/// hidden neuron): then y is the bias alone.
void linear_forward(const Linear& l, const float* x, float* y, int64_t rows) {
  if (l.in() > 0) return l.forward(x, y, rows);
  backend().fill(y, 0.f, rows * l.out());
  if (l.bias) backend().add_bias_rows(y, l.bias->value.f32(), rows, l.out());
}

}  // namespace

ModelUnits gpt_units(const ModelConfig& c) {
  SUBDP_CHECK(c.heads > 0 && c.width % c.heads == 0, "[model] width = {} must be divisible by heads = {}", c.width,
              c.heads);
  SUBDP_CHECK(c.depth >= 1 && c.context >= 1 && c.vocab >= 1 && c.mlp_ratio >= 1,
              "[model] gpt needs depth, context, vocab and mlp_ratio >= 1 (got {}, {}, {}, {})", c.depth, c.context,
              c.vocab, c.mlp_ratio);
  const int64_t C = c.width, hd = C / c.heads, H = static_cast<int64_t>(c.mlp_ratio) * C;
  ModelUnits u;
  for (int b = 0; b < c.depth; ++b) {
    const std::string name = "block" + std::to_string(b);
    u.layers.push_back({name + ".heads", c.heads, 3 * hd * (C + 1) + hd * C});
    u.layers.push_back({name + ".mlp", static_cast<int>(H), 2 * C + 1});
    // ln1, ln2 (2C each), qkv (3C^2 + 3C), proj (C^2 + C), fc (HC + H), fc2 (HC + C)
    const int64_t branch = 4 * C + 3 * C * C + 3 * C + C * C + C + H * C + H + H * C + C;
    u.blocks.push_back({name, 0, branch, true});
  }
  return u;
}

std::unique_ptr<Model> make_gpt(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                bool recompute_blocks, ParamLayout layout) {
  return std::make_unique<Gpt>(c, mask, max_batch, seed, recompute_blocks, layout);
}

BlockActivations BlockActivations::allocate(int64_t rows, int64_t C, int64_t H, DType kept_type) {
  BlockActivations a;
  a.mid = Tensor::empty({rows * C}, MemCategory::activations);  // flat: blocks view their own widths
  a.fc_pre = Tensor::empty({rows * H}, MemCategory::activations, kept_type);
  a.qkv = Tensor::empty({rows * 3 * C}, MemCategory::activations);  // float32: see kept_qkv_dtype
  a.attn_y = Tensor::empty({rows * C}, MemCategory::activations);
  for (Tensor* t : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd})
    *t = Tensor::zeros({rows}, MemCategory::activations);
  return a;
}

namespace {
bool block_skips_weight_gradients(const SubnetMask& mask, int index) {
  return mask.regime == Regime::backward && mask.granularity == Granularity::block && !mask.block_kept.at(index);
}

/// True when the block also computes its attention output in the forward scratch: backward
/// masking at neuron level, or at block level when the block is dropped (full forward, no
/// weight gradients).
bool outputs_in_scratch(const SubnetMask& mask, int index) {
  const bool neuron_backward = mask.regime == Regime::backward && mask.granularity == Granularity::neuron;
  return neuron_backward || block_skips_weight_gradients(mask, index);
}

/// Local MLP hidden width and attention width of block `index` (transformer_units.h).
std::pair<int64_t, int64_t> local_widths(const ModelConfig& c, const SubnetMask& mask, int index) {
  return local_block_widths(mask, index, int64_t{c.mlp_ratio} * c.width, c.width, c.heads);
}
/// Block `index`'s attention layer: heads maskable at neuron level, its output kept for the
/// proj weight gradient only as far as that gradient reads it (attention.h).
AttentionSpec attention_spec(const SubnetMask& mask, const ModelConfig& c, int index, int64_t max_rows,
                             InitSpec proj_init, const Tensor& forward_scratch, const BlockActivations* kept) {
  const bool neuron = mask.granularity == Granularity::neuron;
  const bool dropped = block_skips_weight_gradients(mask, index);  // nothing read by a dW GEMM
  AttentionSpec attn;
  attn.prefix = "blocks." + std::to_string(index);
  attn.C = c.width;
  attn.heads = c.heads;
  attn.T = c.context;
  attn.max_rows = max_rows;
  attn.head_layer = neuron ? heads_layer(index) : -1;
  attn.block = index;
  attn.head_scale = neuron ? mask.scale : 1.f;
  attn.weight_init = kTransformerWeight;
  attn.proj_weight_init = proj_init;
  attn.y_scratch = outputs_in_scratch(mask, index) ? &forward_scratch : nullptr;
  attn.y_kept_cols = dropped ? 0 : static_cast<int64_t>(mask.layers.at(heads_layer(index)).kept) * (c.width / c.heads);
  attn.qkv_area = kept ? &kept->qkv : nullptr;
  attn.y_area = kept ? &kept->attn_y : nullptr;
  attn.qkv_type = kept_qkv_dtype(kept != nullptr);
  return attn;
}
}  // namespace

TransformerBlock::TransformerBlock(ParamSet& ps, const SubnetMask& mask, const ModelConfig& c, int index,
                                   int64_t max_rows, const Tensor& forward_scratch, const BlockActivations* kept)
    : C_(c.width), heads_(c.heads) {
  if (mask.skips_block(index)) return;
  const std::string name = "blocks." + std::to_string(index);
  const bool neuron = mask.granularity == Granularity::neuron;
  const int H = c.mlp_ratio * c.width;
  // Parameters in torch's state_dict order: ln1, ln2, qkv, proj, fc, fc2.
  ln1_ = std::make_unique<LayerNorm>(ps, name + ".ln1", C_, index);
  ln2_ = std::make_unique<LayerNorm>(ps, name + ".ln2", C_, index);
  // zero_init_residual: both branches' output projections (attention proj, MLP fc2) start at
  // 0, so the block starts as the identity (the transformer form of Goyal et al. 2017, 5.1).
  const InitSpec branch_out_init = c.zero_init_residual ? kZeroInit : kTransformerWeight;
  attn_ = std::make_unique<CausalSelfAttention>(
      ps, attention_spec(mask, c, index, max_rows, branch_out_init, forward_scratch, kept));
  const UnitRef out_units{neuron ? mlp_layer(index) : -1, 0, 1}, in_units{neuron ? mlp_layer(index) : -1, 1, 1};
  fc_ = std::make_unique<Linear>(ps, name + ".fc", C_, H, true, out_units, UnitRef{}, index, kTransformerWeight,
                                 kZeroInit);
  fc2_ =
      std::make_unique<Linear>(ps, name + ".fc2", H, C_, true, UnitRef{}, in_units, index, branch_out_init, kZeroInit);
  if (neuron)
    neuron_scale_ = mask.scale;
  else
    branch_scale_ = mask.block_scale(index);  // pinned blocks are never scaled
  if (kept) {
    ln1_->bind_stats(kept->ln1_mean, kept->ln1_rstd, max_rows);
    ln2_->bind_stats(kept->ln2_mean, kept->ln2_rstd, max_rows);
  } else {
    ln1_->allocate_stats(max_rows);
    ln2_->allocate_stats(max_rows);
  }
  // mid and fc_pre: the block's own, or views of the shared set (recompute).
  auto stored = [&](const Tensor* area, int64_t width, DType type = DType::f32) {
    return stored_activation(area, max_rows, width, type);
  };
  // (B, T, C) each, fc_pre_ / fc_act_ (B, T, H local). Each forward-only output is consumed
  // by the next GEMM before the following one is written, so they share one scratch. The
  // ln1 / ln2 outputs (read by the qkv / fc weight gradients) are recomputed in backward
  // from the block input / mid and the stored statistics; the GELU output fc_act from fc_pre
  // (which GELU's backward needs anyway), the columns fc2's weight gradient reads.
  auto in_scratch = [&](int64_t width) { return forward_scratch.slice0(0, max_rows * width).view({max_rows, width}); };
  ln1_out_ = in_scratch(C_);
  mid_ = stored(kept ? &kept->mid : nullptr, C_);
  ln2_out_ = in_scratch(C_);
  fc_pre_ = stored(kept ? &kept->fc_pre : nullptr, fc_->out(), kept_activation_dtype());
  fc_act_ = in_scratch(fc_->out());
  const Param& w2 = *fc2_->weight;
  // Under a shared ParamLayout a block's gradients (and values) are allocated after construction.
  fc2_grad_cols_ = !w2.trained ? 0 : w2.unit.layer >= 0 ? w2.grad_shape.at(w2.unit.axis) : fc2_->in();
  out_ = activation(max_rows, C_);
}

const float* TransformerBlock::forward(const float* x, int B, int T, GptScratch& s) {
  if (!runs()) return x;
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * C_, nh = rows * fc_->out();
  const float branch_scale = this->branch_scale();
  float* mid = mid_.f32();  // (B, T, C)
  ln1_->forward(x, ln1_out_.f32(), rows);
  attn_->forward(ln1_out_.f32(), mid, B, T, s.attn);
  if (branch_scale != 1.f) backend().scale(mid, branch_scale, n);
  backend().add(mid, x, mid, n);  // mid = x + attn branch
  ln2_->forward(mid, ln2_out_.f32(), rows);
  mlp_forward(rows);
  if (neuron_scale_ != 1.f) backend().scale(fc_act_.f32(), neuron_scale_, nh);
  float* out = out_.f32();  // (B, T, C)
  linear_forward(*fc2_, fc_act_.f32(), out, rows);
  if (branch_scale != 1.f) backend().scale(out, branch_scale, n);
  backend().add(out, mid, out, n);  // out = mid + mlp branch
  return out;
}

void TransformerBlock::mlp_forward(int64_t rows) {
  if (!half_mlp()) {  // (B, T, H) each; one GEMM with a GELU epilogue on CUDA
    fc_->forward_gelu(ln2_out_.f32(), fc_pre_.f32(), fc_act_.f32(), rows);
    return;
  }
  // bf16: fc_pre rounded into its kept bf16 copy, fc_act = gelu of the rounded values.
  fc_->forward(ln2_out_.f32(), fc_act_.f32(), rows);
  backend().gelu_keep_bf16(fc_act_.f32(), fc_pre_.raw(), rows * fc_->out());
}

void TransformerBlock::mlp_backward_through_gelu(float* dh, const float* dout, int64_t rows) const {
  const int64_t nh = rows * fc_->out(), cols = fc2_grad_cols_;
  // fc2's dW reads the first fc2_grad_cols_ columns of fc_act = neuron_scale * gelu(fc_pre):
  // recomputed into dh as (rows, cols) by the forward's arithmetic. fc2's backward forms dW
  // before its dx overwrites dh.
  if (cols > 0) {
    if (half_mlp())
      backend().gelu_forward_bf16(fc_pre_.raw(), rows, fc_->out(), cols, dh);
    else if (cols == fc_->out())
      backend().gelu_forward(fc_pre_.f32(), dh, nh);
    else
      backend().gelu_forward_columns(fc_pre_.f32(), rows, fc_->out(), cols, dh);
    if (neuron_scale_ != 1.f) backend().scale(dh, neuron_scale_, rows * cols);
  }
  // dh = d(fc_pre), the neuron scale still to apply: fc2's dx through GELU (one GEMM on CUDA
  // in float32; a GEMM, then GELU's backward in place from the kept bf16 values).
  const int64_t ldx = cols > 0 ? cols : fc2_->in();
  float* dx = fc2_->in() > 0 ? dh : nullptr;
  if (!half_mlp()) return fc2_->backward(dh, dout, dx, rows, ldx, false, fc_pre_.f32());
  fc2_->backward(dh, dout, dx, rows, ldx);
  backend().gelu_backward_bf16(fc_pre_.raw(), dh, dh, nh);
}

void TransformerBlock::backward(const float* x, float* dres, int B, int T, GptScratch& s) const {
  if (!runs()) return;  // identity: the gradient passes unchanged
  const float branch_scale = this->branch_scale();
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * C_, nh = rows * fc_->out();
  float* dh = s.work.f32();  // (B, T, H)
  float* dln = s.dln.f32();  // (B, T, C)
  // Gradient entering a branch: dres, times the branch scale (block level), in dln. The
  // branch's output layer (fc2, proj) reads it before anything writes dln.
  auto branch_grad = [&]() -> const float* {
    if (branch_scale == 1.f) return dres;
    backend().copy(dres, dln, n);
    backend().scale(dln, branch_scale, n);
    return dln;
  };
  mlp_backward_through_gelu(dh, branch_grad(), rows);
  if (neuron_scale_ != 1.f) backend().scale(dh, neuron_scale_, nh);
  // fc's dW reads ln2's output: recomputed (fc_ has no dW in a dropped block).
  if (fc_->weight->grad.defined()) ln2_->recompute(mid_.f32(), s.ln_out.f32(), rows);
  fc_->backward(s.ln_out.f32(), dh, fc_->out() > 0 ? dln : nullptr, rows);
  if (fc_->out() == 0) backend().fill(dln, 0.f, n);
  ln2_->backward(mid_.f32(), dln, dres, rows);                                      // dres += ...: now d(mid)
  if (attn_->qkv_weight->grad.defined()) ln1_->recompute(x, s.ln_out.f32(), rows);  // for qkv's dW
  attn_->backward(s.ln_out.f32(), branch_grad(), dln, B, T, s.attn);
  ln1_->backward(x, dln, dres, rows);  // dres += ...: now d(x)
}

Gpt::Gpt(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute_blocks,
         ParamLayout layout)
    : Model(mask, seed, layout),
      recompute_(recompute_blocks),
      T_(c.context),
      V_(c.vocab),
      C_(c.width),
      max_batch_(max_batch) {
  gpt_units(c);  // validates the sizes
  const int64_t rows = static_cast<int64_t>(max_batch) * T_;
  wte_ = std::make_unique<Embedding>(params_, "wte", V_, C_, kTransformerWeight);
  wpe_ = std::make_unique<Embedding>(params_, "wpe", T_, C_, kTransformerWeight);
  // shared_ (floats per row): the head's lnf output (C; dlogits overwrite the logits); the blocks' forward
  // scratch (ln1, ln2 and GELU outputs, and under backward masking attention outputs: at
  // most max(C, local hidden width)); their backward scratch (dh, or attention's dy + dqkv);
  // under bf16 attention's float32 q, k, v after those (AttentionScratch::floats_per_row).
  int64_t hidden = 0, width = 0;
  for (int b = 0; b < c.depth; ++b) {
    const auto [h, w] = local_widths(c, mask_, b);
    hidden = std::max(hidden, h);
    width = std::max(width, w);
  }
  const bool half = kept_qkv_dtype(recompute_) == DType::bf16;
  const int64_t shared_width = std::max({int64_t{C_}, hidden, AttentionScratch::floats_per_row(C_, width, half)});
  shared_ = Tensor::empty({rows * shared_width}, MemCategory::activations);
  // Under recompute every block keeps its forward state in one set (sized for the widest
  // block); the backward pass rebuilds a block's set from its stored input.
  if (recompute_) shared_block_ = BlockActivations::allocate(rows, C_, hidden, kept_activation_dtype());
  for (int b = 0; b < c.depth; ++b) {
    blocks_.push_back(
        std::make_unique<TransformerBlock>(params_, mask_, c, b, rows, shared_, recompute_ ? &shared_block_ : nullptr));
    const auto [h, w] = local_widths(c, mask_, b);
    SUBDP_ASSERT(blocks_.back()->hidden() == h && blocks_.back()->attn_width() == w);
  }
  lnf_ = std::make_unique<LayerNorm>(params_, "lnf", C_);
  lnf_->allocate_stats(rows);
  x0_ = activation(rows, C_);
  lnf_out_ = shared_.slice0(0, rows * C_).view({rows, C_});
  head_ = std::make_unique<CrossEntropyHead>(rows, V_, C_);
  pos_ids_ = Tensor::empty({max_batch, T_}, MemCategory::activations, DType::i32);
  dres_ = activation(rows, C_);
  scratch_.dln = activation(rows, C_);
  scratch_.ln_out = activation(rows, C_);
  scratch_.work = shared_;
  scratch_.attn.bind(shared_, rows, C_, width, T_, C_ / c.heads, omp_get_max_threads(), half);
}

void Gpt::check_batch(int B, int T) const {
  SUBDP_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= T_,
              "GPT: batch of {} sequences of {} tokens exceeds the model's {} x context {}", B, T, max_batch_, T_);
}

void Gpt::run_forward(const int32_t* tokens, int B, int T, bool training) {
  check_batch(B, T);
  const int64_t rows = static_cast<int64_t>(B) * T;
  B_ = B;
  Tcur_ = T;
  tokens_ = tokens;
  if (pos_T_ != T) {  // positions depend on T only: written (and uploaded) once per context length
    HostCopy pos(pos_ids_, /*load=*/false);  // (max_batch, T) of the (max_batch, T_) buffer
    for (int64_t r = 0; r < int64_t{max_batch_} * T; ++r) pos.i32()[r] = static_cast<int32_t>(r % T);
    pos.store();
    pos_T_ = T;
  }
  const int32_t* pos = pos_ids_.i32();  // (B, T)
  float* x0 = x0_.f32();                // (B, T, C)
  wte_->forward(tokens, x0, rows, false);
  wpe_->forward(pos, x0, rows, true);
  last_ = run_blocks(blocks_, x0, B, T, scratch_, training, trace_);
  const float* x = last_;
  lnf_->forward(x, lnf_out_.f32(), rows);
  head_->project(lnf_out_.f32(), wte_->weight->value.f32(), rows);  // logits (rows, V): the tied wte
}

void Gpt::enqueue_forward(const Batch& batch, bool training) {
  SUBDP_CHECK(batch.x.ndim() == 2 && batch.x.dtype() == DType::i32 && batch.y.numel() == batch.x.numel(),
              "GPT expects (B, T) int32 tokens and targets, got x {}", shape_str(batch.x.shape()));
  const int T = static_cast<int>(batch.x.dim(1));
  run_forward(batch.x.i32(), static_cast<int>(batch.n), T, training);
  head_->loss(batch.y.i32(), batch.n * T, training);
}

std::vector<float> Gpt::logits(const int32_t* tokens, int B, int T) {
  check_batch(B, T);  // before reading B * T tokens
  const int64_t rows = static_cast<int64_t>(B) * T;
  const Tensor ids = Tensor::empty({std::max<int64_t>(rows, 0)}, MemCategory::activations, DType::i32);
  const HostCopy staged(ids, /*load=*/false);
  std::copy(tokens, tokens + rows, staged.i32());
  staged.store();
  run_forward(ids.i32(), B, T, false);
  check_forward_counters(backend().take_counters());
  return head_->read_logits(0, rows);
}

void Gpt::backward() {
  const int64_t rows = static_cast<int64_t>(B_) * Tcur_;
  Param* wte = wte_->weight;
  float* dln = scratch_.dln.f32();  // (rows, C); dwte (V, C) += dlogits^T . lnf_out
  head_->project_backward(lnf_out_.f32(), wte->value.f32(), wte->grad.defined() ? wte->grad.f32() : nullptr, dln, rows);
  float* dres = dres_.f32();  // (B, T, C)
  backend().fill(dres, 0.f, rows * C_);
  lnf_->backward(last_, dln, dres, rows);
  backprop_blocks(blocks_, dres, B_, Tcur_, scratch_, recompute_, trace_);
  wte_->backward(tokens_, dres, rows);
  wpe_->backward(pos_ids_.i32(), dres, rows);
}

}  // namespace subdp
