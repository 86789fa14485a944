// Causal self-attention layer through the backend (GEMMs and the attention kernels).
#include "engine/layers/attention.h"

#include <algorithm>
#include <cstring>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/layers/flops.h"

namespace subdp {

int64_t AttentionScratch::floats_per_row(int64_t C, int64_t Ck, bool kept_bf16) {
  return kept_bf16 ? std::max(C, 4 * Ck) + 3 * Ck : 4 * Ck;
}

void AttentionScratch::allocate(int64_t rows, int64_t Ck, int T, int head_dim, int thread_slots) {
  bind(Tensor::empty({rows * 4 * Ck}, MemCategory::activations), rows, Ck, Ck, T, head_dim, thread_slots);
}

void AttentionScratch::bind(const Tensor& area, int64_t rows, int64_t C, int64_t Ck, int T, int head_dim,
                            int thread_slots, bool kept_bf16) {
  SUBDP_ASSERT(area.numel() >= rows * floats_per_row(C, Ck, kept_bf16));
  grads = area.slice0(0, rows * 4 * Ck);
  // After the layer's input x (rows, C) in the forward and after dy and dqkv in the backward.
  const int64_t at = rows * std::max(C, 4 * Ck);
  qkv_f32 = kept_bf16 ? area.slice0(at, at + rows * 3 * Ck) : Tensor();
  slots = std::max(1, thread_slots);
  // The largest call: every row, every local head (the CPU's figure depends on T and the slots
  // only; a GPU's on the whole shape).
  const AttentionShape largest{static_cast<int>(rows / T), T, static_cast<int>(Ck / head_dim), head_dim};
  ws = Tensor::empty({backend().attention_workspace_floats(largest, slots)}, MemCategory::workspace);
}

CausalSelfAttention::CausalSelfAttention(ParamSet& ps, const AttentionSpec& spec)
    : C_(spec.C),
      heads_(spec.heads),
      hd_(spec.C / spec.heads),
      head_scale_(spec.head_scale),
      rope_cos_(spec.rope_cos),
      rope_sin_(spec.rope_sin) {
  const std::string& prefix = spec.prefix;
  const int C = spec.C, heads = spec.heads, T = spec.T, head_layer = spec.head_layer, block = spec.block;
  const int64_t max_rows = spec.max_rows, y_kept_cols = spec.y_kept_cols;
  const InitSpec weight_init = spec.weight_init;
  const Tensor* y_scratch = spec.y_scratch;
  const int kv_heads = spec.kv_heads > 0 ? spec.kv_heads : heads;
  const bool grouped = kv_heads != heads;
  SUBDP_ASSERT(heads > 0 && C % heads == 0 && heads % kv_heads == 0 && !(grouped && (head_layer >= 0 || spec.bias)));
  const InitSpec zero{InitSpec::constant, 0.f};
  SUBDP_ASSERT(!rope_cos_ == !rope_sin_ && (!rope_cos_ || hd_ % 2 == 0));
  const std::string qkv = prefix + "." + spec.qkv_name;
  // (3, C, C): unit axis 1 so a head is hd rows in each of the q, k, v sections.
  const UnitRef unit = head_layer >= 0 ? UnitRef{head_layer, 1, hd_} : UnitRef{};
  const Shape wshape = head_layer >= 0 ? Shape{3, C, C} : Shape{(heads + 2 * int64_t{kv_heads}) * hd_, C};
  const Shape bshape = head_layer >= 0 ? Shape{3, C} : Shape{3 * C};
  qkv_weight = &ps.add(qkv + ".weight", wshape, weight_init, unit, block);
  if (spec.bias) qkv_bias = &ps.add(qkv + ".bias", bshape, zero, unit, block);
  // Local q width: grouped-query layers are never masked.
  const int64_t Ck = grouped ? C : shape_numel(qkv_weight->local_shape) / (3 * static_cast<int64_t>(C));
  local_heads_ = static_cast<int>(Ck / hd_);
  local_kv_heads_ = grouped ? kv_heads : local_heads_;
  proj = std::make_unique<Linear>(ps, prefix + "." + spec.proj_name, C, C, spec.bias, UnitRef{},
                                  head_layer >= 0 ? UnitRef{head_layer, 1, hd_} : UnitRef{}, block,
                                  spec.proj_weight_init.value_or(weight_init), zero);
  // Stored activations: tensors of their own, or views of the shared areas (recompute).
  auto stored = [&](const Tensor* area, int64_t cols, DType type) {
    if (!area) return Tensor::empty({max_rows, cols}, MemCategory::activations, type);
    SUBDP_ASSERT(area->dtype() == type && area->numel() >= max_rows * cols);
    return area->slice0(0, max_rows * cols).view({max_rows, cols});
  };
  qkv_ = stored(spec.qkv_area, qkv_cols(), spec.qkv_type);
  if (spec.qkv_type == DType::bf16) {  // y in the scratch, its kept columns in bf16
    SUBDP_ASSERT(!spec.y_area && y_kept_cols >= 0 && y_kept_cols <= Ck);
    y_kept_cols_ = y_scratch ? y_kept_cols : Ck;
    if (y_kept_cols_ > 0) y_kept_ = stored(nullptr, y_kept_cols_, DType::bf16);
  } else {
    y_ = y_scratch ? y_scratch->slice0(0, max_rows * Ck).view({max_rows, Ck}) : stored(spec.y_area, Ck, DType::f32);
    if (y_scratch) {
      SUBDP_ASSERT(y_kept_cols >= 0 && y_kept_cols <= Ck);
      y_kept_cols_ = y_kept_cols;
      if (y_kept_cols > 0) y_kept_ = stored(spec.y_area, y_kept_cols, DType::f32);
    }
  }
  // The backward's statistics from the forward (the backend's choice): the rows' log-sum-exp
  // kept here, and delta from the kept output, which must then hold every column.
  const bool whole_output = y_kept_.defined() ? y_kept_cols_ == Ck : !y_scratch;
  if (Ck > 0 && whole_output && backend().attention_keeps_statistics(shape(static_cast<int>(max_rows / T), T)))
    lse_ = Tensor::empty({max_rows * local_heads_}, MemCategory::activations);
}

void CausalSelfAttention::forward(const float* x, float* out, int B, int T, AttentionScratch& s) {
  const int64_t rows = static_cast<int64_t>(B) * T, Ck = static_cast<int64_t>(local_heads_) * hd_;
  if (Ck == 0) {  // this subnetwork keeps no head: the branch is proj's bias alone
    backend().fill(out, 0.f, rows * C_);
    if (proj->bias) backend().add_bias_rows(out, proj->bias->value.f32(), rows, C_);
    return;
  }
  const bool half = kept_bf16();
  SUBDP_ASSERT(!half || s.qkv_f32.numel() >= rows * qkv_cols());
  float* qkv = half ? s.qkv_f32.f32() : qkv_.f32();  // (B, T, qkv_cols)
  const int64_t cols = qkv_cols();
  // qkv (rows, cols) = x (rows, C) . Wqkv^T (C, cols) + b
  backend().linear_forward(x, qkv_weight->value.f32(), qkv_bias ? qkv_bias->value.f32() : nullptr, qkv, nullptr, rows,
                           C_, cols);
  FlopCounter::add_gemm(rows, cols, C_);
  rotate_qk(qkv, rows, T, false);
  // (B, T, Ck); kept bf16: in the scratch's first floats, where x may be (read by the qkv GEMM)
  float* y = half ? s.grads.f32() : y_.f32();
  float* lse = lse_.defined() ? lse_.f32() : nullptr;         // (B, Hk, T)
  if (half && backend().attention_reads_bf16(shape(B, T))) {  // the kernels read the kept copy itself
    backend().to_bf16(qkv, qkv_.raw(), rows * cols);
    backend().attention_forward_bf16(shape(B, T), qkv_.raw(), y, lse, s.ws.f32(), s.slots);
  } else {
    if (half) backend().round_keep_bf16(qkv, qkv_.raw(), rows * cols);  // the kernels read the kept values
    backend().attention_forward(shape(B, T), qkv, nullptr, y, lse, s.ws.f32(), s.slots);
  }
  FlopCounter::count() += 4LL * B * local_heads_ * T * T * hd_;
  if (head_scale_ != 1.f) backend().scale(y, head_scale_, rows * Ck);
  proj->forward(y, out, rows);  // (B, T, C)
  if (y_kept_.defined() && half)
    backend().to_bf16_columns(y, rows, Ck, y_kept_cols_, y_kept_.raw());
  else if (y_kept_.defined())
    backend().copy_columns(y, rows, Ck, y_kept_cols_, y_kept_.f32());
}

void CausalSelfAttention::backward(const float* x, const float* dout, float* dx, int B, int T,
                                   AttentionScratch& s) const {
  const int64_t rows = static_cast<int64_t>(B) * T, Ck = static_cast<int64_t>(local_heads_) * hd_;
  if (Ck == 0) {
    if (proj->bias && proj->bias->grad.defined()) backend().bias_grad_rows(dout, proj->bias->grad.f32(), rows, C_, C_);
    backend().fill(dx, 0.f, rows * C_);
    return;
  }
  SUBDP_ASSERT(s.grads.numel() >= 4 * rows * Ck);
  float* dy = s.grads.f32();  // (B, T, Ck)
  if (kept_bf16()) {          // proj's dW reads the kept columns as floats, converted into the scratch
    float* y = s.qkv_f32.f32();
    if (y_kept_.defined()) backend().bf16_to_f32(y_kept_.raw(), y, rows * y_kept_cols_);
    proj->backward(y, dout, dy, rows, y_kept_cols_);  // no kept column: no dW, y unread
  } else if (y_kept_.defined()) {
    proj->backward(y_kept_.f32(), dout, dy, rows, y_kept_cols_);
  } else {
    proj->backward(y_.f32(), dout, dy, rows);  // y_ is stale scratch only when proj's dW has no column
  }
  // y = head_scale * attention(qkv), so d attention = head_scale * dy.
  if (head_scale_ != 1.f) backend().scale(dy, head_scale_, rows * Ck);
  float* dqkv = dy + rows * Ck;  // (B, T, qkv_cols)
  const int64_t cols = qkv_cols();
  const AttentionKept kept = kept_statistics();
  const AttentionKept* from_forward = lse_.defined() ? &kept : nullptr;
  if (kept_bf16() && backend().attention_reads_bf16(shape(B, T)))
    backend().attention_backward_bf16(shape(B, T), qkv_.raw(), dy, from_forward, dqkv, s.ws.f32(), s.slots);
  else
    backend().attention_backward(shape(B, T), qkv_f32(rows, s), nullptr, dy, from_forward, dqkv, s.ws.f32(), s.slots);
  FlopCounter::count() += 10LL * B * local_heads_ * T * T * hd_;  // 8 plus the recomputed q k^T
  rotate_qk(dqkv, rows, T, true);                                 // d(q, k before RoPE) = R^T d(q, k after)
  if (qkv_weight->grad.defined() && local_kv_heads_ != local_heads_) {
    // Grouped-query (never masked): dW ((H + 2 KV) hd, C) += dqkv^T . x
    backend().sgemm(true, false, cols, C_, rows, 1.f, dqkv, cols, x, C_, 1.f, qkv_weight->grad.f32(), C_);
    FlopCounter::add_gemm(cols, C_, rows);
  } else if (qkv_weight->grad.defined()) {
    // Kept prefix of each section: dW[s, :gk] (gk, C) += dqkv[:, s*Ck : s*Ck+gk]^T . x (rows, C)
    const int64_t gk = qkv_weight->grad.numel() / (3 * static_cast<int64_t>(C_));
    float* dw = qkv_weight->grad.f32();
    float* db = qkv_bias ? qkv_bias->grad.f32() : nullptr;
    for (int sec = 0; sec < 3; ++sec) {
      backend().sgemm(true, false, gk, C_, rows, 1.f, dqkv + sec * Ck, 3 * Ck, x, C_, 1.f, dw + sec * gk * C_, C_);
      if (db) backend().bias_grad_rows(dqkv + sec * Ck, db + sec * gk, rows, gk, 3 * Ck);
      FlopCounter::add_gemm(gk, C_, rows);
    }
  }
  // dx (rows, C) = dqkv (rows, cols) . Wqkv (cols, C)
  backend().sgemm(false, false, rows, C_, cols, 1.f, dqkv, cols, qkv_weight->value.f32(), C_, 0.f, dx, C_);
  FlopCounter::add_gemm(rows, C_, cols);
}

AttentionKept CausalSelfAttention::kept_statistics() const {
  if (!lse_.defined()) return {};
  const Tensor& y = y_kept_.defined() ? y_kept_ : y_;  // every column (the constructor's test)
  return {lse_.f32(), y.raw(), y.dtype() == DType::bf16, 1.f / head_scale_};
}

const float* CausalSelfAttention::qkv_f32(int64_t rows, const AttentionScratch& s) const {
  if (!kept_bf16()) return qkv_.f32();
  SUBDP_ASSERT(s.qkv_f32.numel() >= rows * qkv_cols());
  backend().bf16_to_f32(qkv_.raw(), s.qkv_f32.f32(), rows * qkv_cols());
  return s.qkv_f32.f32();
}

void CausalSelfAttention::rotate_qk(float* qkv, int64_t rows, int T, bool inverse) const {
  if (!rope_cos_) return;
  // q and k are the first Hk + KVk heads of each row (sections q, k, v).
  backend().rope_rotate(qkv, rows, T, qkv_cols(), local_heads_ + local_kv_heads_, hd_, rope_cos_->f32(),
                        rope_sin_->f32(), inverse);
}

}  // namespace subdp
