// LLaMA block forward/backward (see llama_block.h and llama.h).
#include "models/llama_block.h"

#include <algorithm>
#include <string>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "models/transformer_units.h"

namespace subdp {

namespace {

/// Block `index`'s attention: heads maskable at neuron level, no biases, RoPE on q and k.
AttentionSpec attention_spec(const SubnetMask& mask, const ModelConfig& c, int index, const LlamaBlockSpec& spec,
                             InitSpec wo_init) {
  const bool neuron = mask.granularity == Granularity::neuron;
  AttentionSpec a;
  a.prefix = "layers." + std::to_string(index) + ".attention";
  a.qkv_name = "wqkv";
  a.proj_name = "wo";
  a.bias = false;
  a.C = c.width;
  a.heads = c.heads;
  a.kv_heads = llama_kv_heads(c);
  a.T = c.context;
  a.max_rows = spec.max_rows;
  a.head_layer = neuron ? heads_layer(index) : -1;
  a.block = index;
  a.head_scale = neuron ? mask.scale : 1.f;
  a.weight_init = kTransformerWeight;
  a.proj_weight_init = wo_init;
  a.qkv_area = spec.shared ? &spec.shared->qkv : nullptr;
  a.y_area = spec.shared ? &spec.shared->attn_y : nullptr;
  a.qkv_type = kept_qkv_dtype(spec.shared != nullptr);
  a.rope_cos = spec.rope_cos;
  a.rope_sin = spec.rope_sin;
  return a;
}

}  // namespace

int64_t llama_scratch_width(int64_t C, int64_t H, int64_t A, bool recompute) {
  const bool half = kept_activation_dtype() == DType::bf16;
  const int64_t attention = AttentionScratch::floats_per_row(C, A, kept_qkv_dtype(recompute) == DType::bf16);
  return half ? std::max({C + H, 2 * H, attention}) : std::max({C, H, attention});
}

LlamaActivations LlamaActivations::allocate(int64_t rows, int64_t C, int64_t H, DType kept_type) {
  LlamaActivations a;
  auto flat = [](int64_t n, DType type = DType::f32) { return Tensor::empty({n}, MemCategory::activations, type); };
  a.mid = flat(rows * C);  // flat: blocks view their own widths
  a.gate = flat(rows * H, kept_type);
  a.up = flat(rows * H, kept_type);
  a.qkv = flat(rows * 3 * C);  // float32: see kept_qkv_dtype
  a.attn_y = flat(rows * C);
  a.rstd1 = Tensor::zeros({rows}, MemCategory::activations);
  a.rstd2 = Tensor::zeros({rows}, MemCategory::activations);
  return a;
}

LlamaBlock::LlamaBlock(ParamSet& ps, const SubnetMask& mask, const ModelConfig& c, int index,
                       const LlamaBlockSpec& spec)
    : C_(c.width), heads_(c.heads) {
  if (mask.skips_block(index)) return;
  const std::string name = "layers." + std::to_string(index);
  const bool neuron = mask.granularity == Granularity::neuron;
  const int64_t H = llama_ffn_width(c), rows = spec.max_rows;
  // zero_init_residual: both branch outputs (wo, w2) start at 0, the block as the identity.
  const InitSpec out_init = c.zero_init_residual ? kZeroInit : kTransformerWeight;
  norm1_ = std::make_unique<RMSNorm>(ps, name + ".attention_norm", C_, index);
  attn_ = std::make_unique<CausalSelfAttention>(ps, attention_spec(mask, c, index, spec, out_init));
  norm2_ = std::make_unique<RMSNorm>(ps, name + ".ffn_norm", C_, index);
  const int mlp = neuron ? mlp_layer(index) : -1;
  const std::string ff = name + ".feed_forward";
  w1_ =
      std::make_unique<Linear>(ps, ff + ".w1", C_, H, false, UnitRef{mlp, 0, 1}, UnitRef{}, index, kTransformerWeight);
  w3_ =
      std::make_unique<Linear>(ps, ff + ".w3", C_, H, false, UnitRef{mlp, 0, 1}, UnitRef{}, index, kTransformerWeight);
  w2_ = std::make_unique<Linear>(ps, ff + ".w2", H, C_, false, UnitRef{}, UnitRef{mlp, 1, 1}, index, out_init);
  if (neuron)
    neuron_scale_ = mask.scale;
  else
    branch_scale_ = mask.block_scale(index);  // pinned blocks are never scaled
  const LlamaActivations* kept = spec.shared;
  if (kept) {
    norm1_->bind_stats(kept->rstd1, rows);
    norm2_->bind_stats(kept->rstd2, rows);
  } else {
    norm1_->allocate_stats(rows);
    norm2_->allocate_stats(rows);
  }
  const int64_t h = w1_->out();  // local SwiGLU width
  auto stored = [&](const Tensor* area, int64_t width, DType type = DType::f32) {
    return stored_activation(area, rows, width, type);
  };
  const bool half = kept_activation_dtype() == DType::bf16;
  auto in_scratch = [&](int64_t offset, int64_t width) {
    return spec.forward_scratch->slice0(rows * offset, rows * (offset + width)).view({rows, width});
  };
  norm_out_ = in_scratch(0, C_);
  act_ = in_scratch(half ? C_ : 0, h);
  mid_ = stored(kept ? &kept->mid : nullptr, C_);
  gate_ = stored(kept ? &kept->gate : nullptr, h, kept_activation_dtype());
  up_ = stored(kept ? &kept->up : nullptr, h, kept_activation_dtype());
  out_ = Tensor::empty({rows, int64_t{C_}}, MemCategory::activations);
}

const float* LlamaBlock::forward(const float* x, int B, int T, LlamaScratch& s) {
  if (!runs()) return x;
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * C_, nh = rows * w1_->out();
  const float scale = branch_scale();
  float* mid = mid_.f32();
  norm1_->forward(x, norm_out_.f32(), rows);
  attn_->forward(norm_out_.f32(), mid, B, T, s.attn);
  if (scale != 1.f) backend().scale(mid, scale, n);
  backend().add(mid, x, mid, n);  // mid = x + attention branch
  float* out = out_.f32();
  if (nh == 0) {  // this subnetwork keeps no hidden neuron: the MLP branch is 0
    backend().copy(mid, out, n);
    return out;
  }
  norm2_->forward(mid, norm_out_.f32(), rows);
  mlp_forward(out, rows);
  if (scale != 1.f) backend().scale(out, scale, n);
  backend().add(out, mid, out, n);  // out = mid + MLP branch
  return out;
}

void LlamaBlock::mlp_forward(float* out, int64_t rows) {
  const int64_t nh = rows * w1_->out();
  float* act = act_.f32();
  if (half_mlp()) {  // each GEMM's float output in act, rounded into its kept bf16 copy
    w1_->forward(norm_out_.f32(), act, rows);
    backend().to_bf16(act, gate_.raw(), nh);
    w3_->forward(norm_out_.f32(), act, rows);
    backend().swiglu_keep_bf16(gate_.raw(), act, up_.raw(), nh);  // act = swiglu of the rounded values
  } else {  // norm_out and act share the scratch: both GEMMs read norm_out before SwiGLU writes act
    w1_->forward(norm_out_.f32(), gate_.f32(), rows);
    w3_->forward(norm_out_.f32(), up_.f32(), rows);
    backend().swiglu_forward(gate_.f32(), up_.f32(), act, nh);
  }
  if (neuron_scale_ != 1.f) backend().scale(act, neuron_scale_, nh);
  w2_->forward(act, out, rows);
}

const float* LlamaBlock::branch_grad(float* dres, int64_t n, LlamaScratch& s) const {
  const float scale = branch_scale();
  if (scale == 1.f) return dres;
  backend().copy(dres, s.dln.f32(), n);
  backend().scale(s.dln.f32(), scale, n);
  return s.dln.f32();
}

void LlamaBlock::mlp_backward(float* dres, int64_t rows, LlamaScratch& s) const {
  const int64_t n = rows * C_, nh = rows * w1_->out();
  if (nh == 0) return;       // the branch is 0: d(mid) = d(out)
  float* dh = s.work.f32();  // (rows, H)
  float* dln = s.dln.f32();
  const float* dout = branch_grad(dres, n, s);
  // w2's dW reads act = neuron_scale * swiglu(gate, up): recomputed into dh, which w2's dx
  // then overwrites (dW is formed first).
  if (w2_->weight->grad.defined()) {
    if (half_mlp())
      backend().swiglu_forward_bf16(gate_.raw(), up_.raw(), dh, nh);
    else
      backend().swiglu_forward(gate_.f32(), up_.f32(), dh, nh);
    if (neuron_scale_ != 1.f) backend().scale(dh, neuron_scale_, nh);
  }
  w2_->backward(dh, dout, dh, rows);
  if (neuron_scale_ != 1.f) backend().scale(dh, neuron_scale_, nh);
  // d(gate) and d(up): in place over float gate and up; from bf16 ones, d(gate) over dh and
  // d(up) in the next nh floats of the scratch.
  float* dgate = half_mlp() ? dh : gate_.f32();
  float* dup = half_mlp() ? dh + nh : up_.f32();
  if (half_mlp())
    backend().swiglu_backward_bf16(gate_.raw(), up_.raw(), dh, dgate, dup, nh);
  else
    backend().swiglu_backward(gate_.f32(), up_.f32(), dh, dgate, dup, nh);
  if (w1_->weight->grad.defined()) norm2_->recompute(mid_.f32(), s.ln_out.f32(), rows);  // w1's, w3's dW
  w1_->backward(s.ln_out.f32(), dgate, dln, rows);
  w3_->backward(s.ln_out.f32(), dup, dln, rows, 0, /*accumulate_dx=*/true);
  norm2_->backward(mid_.f32(), dln, dres, rows);  // dres += ...: now d(mid)
}

void LlamaBlock::backward(const float* x, float* dres, int B, int T, LlamaScratch& s) const {
  if (!runs()) return;  // identity: the gradient passes unchanged
  const int64_t rows = static_cast<int64_t>(B) * T;
  mlp_backward(dres, rows, s);
  if (attn_->qkv_weight->grad.defined()) norm1_->recompute(x, s.ln_out.f32(), rows);  // for wqkv's dW
  attn_->backward(s.ln_out.f32(), branch_grad(dres, rows * C_, s), s.dln.f32(), B, T, s.attn);
  norm1_->backward(x, s.dln.f32(), dres, rows);  // dres += ...: now d(x)
}

}  // namespace subdp
