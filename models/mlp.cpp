// Reference MLP forward/backward.
#include "models/mlp.h"

#include <algorithm>

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

namespace {
bool masked_hidden(size_t i) { return i % 2 == 0; }
}  // namespace

ModelUnits mlp_units(const ModelConfig& c) {
  ModelUnits u;
  const int in = c.in_channels * c.image_size * c.image_size;
  for (size_t i = 0; i < c.hidden.size(); ++i) {
    if (!masked_hidden(i)) continue;
    const int prev = i == 0 ? in : c.hidden[i - 1];
    const int next = i + 1 < c.hidden.size() ? c.hidden[i + 1] : c.classes;
    u.layers.push_back({"hidden" + std::to_string(i), c.hidden[i], static_cast<int64_t>(prev + 1 + next)});
  }
  return u;
}

Mlp::Mlp(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed)
    : Model(mask, seed), head_(max_batch, c.classes) {
  in_features_ = static_cast<int64_t>(c.in_channels) * c.image_size * c.image_size;
  std::vector<int64_t> widths = {in_features_};
  for (int h : c.hidden) widths.push_back(h);
  widths.push_back(c.classes);
  fcs_.reserve(widths.size() - 1);
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    UnitRef out_units, in_units;
    if (i < c.hidden.size() && masked_hidden(i)) out_units = {static_cast<int>(i / 2), 0, 1};
    if (i > 0 && masked_hidden(i - 1)) in_units = {static_cast<int>((i - 1) / 2), 1, 1};
    fcs_.emplace_back(params_, "net." + std::to_string(2 * i + 1), widths[i], widths[i + 1], true, out_units, in_units);
  }
  int64_t max_width = 0;
  for (size_t i = 0; i + 1 < fcs_.size(); ++i) {
    hidden_.push_back(Tensor::empty({max_batch, fcs_[i].out()}, MemCategory::activations));
    scale_.push_back(masked_hidden(i) ? mask_.scale : 1.f);
    max_width = std::max(max_width, fcs_[i].out());
  }
  for (auto& d : dbuf_) d = Tensor::empty({max_batch, max_width}, MemCategory::activations);
}

void Mlp::enqueue_forward(const Batch& batch, bool training) {
  SUBDP_CHECK(batch.x.numel() / batch.x.dim(0) == in_features_ && batch.n <= batch.x.dim(0),
              "MLP expects {} input features per example, got {}", in_features_, batch.x.numel() / batch.x.dim(0));
  rows_ = batch.n;
  input_ = batch.x.f32();
  targets_ = batch.y.i32();
  const float* x = input_;  // (N, in_features)
  for (size_t i = 0; i + 1 < fcs_.size(); ++i) {
    float* h = hidden_[i].f32();  // (N, width_i)
    fcs_[i].forward(x, h, rows_);
    backend().relu_forward(h, h, rows_ * fcs_[i].out());
    if (scale_[i] != 1.f) backend().scale(h, scale_[i], rows_ * fcs_[i].out());
    x = h;
  }
  fcs_.back().forward(x, head_.logits(), rows_);  // (N, classes)
  head_.loss(targets_, rows_, training);
}

void Mlp::backward() {
  const float* dy = head_.dlogits();  // (N, classes)
  int ping = 0;
  for (size_t i = fcs_.size(); i-- > 0;) {
    const float* x = i == 0 ? input_ : hidden_[i - 1].f32();
    float* dx = i == 0 ? nullptr : dbuf_[ping].f32();  // (N, width_{i-1})
    fcs_[i].backward(x, dy, dx, rows_);
    if (i == 0) break;
    const int64_t n = rows_ * fcs_[i - 1].out();
    // h = relu(a) * s, so da = relu'(a) * s * dh, and h > 0 exactly where a > 0.
    backend().relu_backward(hidden_[i - 1].f32(), dx, dx, n, false);
    if (scale_[i - 1] != 1.f) backend().scale(dx, scale_[i - 1], n);
    dy = dx;
    ping ^= 1;
  }
}

}  // namespace subdp
