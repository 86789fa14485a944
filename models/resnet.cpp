// Reference ResNet forward/backward.
#include "models/resnet.h"

#include <algorithm>
#include <cstring>

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

namespace {

struct BlockGeometry {
  int cin, cout, stride;
};

std::vector<BlockGeometry> block_geometry(const ModelConfig& c) {
  std::vector<BlockGeometry> out;
  int cin = c.widths.at(0);
  for (size_t stage = 0; stage < c.widths.size(); ++stage)
    for (int b = 0; b < c.blocks_per_stage; ++b) {
      out.push_back({cin, c.widths[stage], (b == 0 && stage > 0) ? 2 : 1});
      cin = c.widths[stage];
    }
  return out;
}

Tensor activation(int N, int C, int H, int W) { return Tensor::empty({N, C, H, W}, MemCategory::activations); }

}  // namespace

ModelUnits resnet_units(const ModelConfig& c) {
  ModelUnits u;
  auto geom = block_geometry(c);
  for (size_t b = 0; b < geom.size(); ++b) {
    const auto& g = geom[b];
    const int64_t branch = 9LL * g.cin * g.cout + 9LL * g.cout * g.cout + 4LL * g.cout;
    u.blocks.push_back({"block" + std::to_string(b), static_cast<int>(b) / c.blocks_per_stage, branch, true});
    u.layers.push_back({"block" + std::to_string(b) + ".channels", g.cout, 9LL * g.cin + 4 + 9LL * g.cout});
  }
  return u;
}

ResNetBlockActivations ResNetBlockActivations::allocate(int64_t elems) {
  ResNetBlockActivations a;
  for (Tensor* t : {&a.c1, &a.h1, &a.c2, &a.sc}) *t = Tensor::empty({elems}, MemCategory::activations);
  return a;
}

BasicBlock::BasicBlock(ParamSet& ps, const SubnetMask& mask, int index, int cin, int cout, int stride, int H, int W,
                       int max_batch, bool zero_init_residual, const ResNetBlockActivations* shared)
    : cin_(cin), cout_(cout), H_(H), W_(W) {
  const std::string name = "blocks." + std::to_string(index);
  Ho_ = (H + 2 - 3) / stride + 1;
  Wo_ = (W + 2 - 3) / stride + 1;
  const int N = max_batch;
  if (!mask.skips_block(index)) {
    const UnitRef channels{mask.granularity == Granularity::neuron ? index : -1, 0, 1};
    conv1_ = std::make_unique<Conv2d>(ps, name + ".c1", cin, cout, 3, stride, 1, channels, UnitRef{}, index);
    bn1_ = std::make_unique<BatchNorm2d>(ps, name + ".b1", cout, channels, index);
    conv2_ = std::make_unique<Conv2d>(ps, name + ".c2", cout, cout, 3, 1, 1, UnitRef{}, channels, index);
    bn2_ = std::make_unique<BatchNorm2d>(ps, name + ".b2", cout, UnitRef{}, index, zero_init_residual ? 0.f : 1.f);
    const int local = conv1_->cout();
    // Stored activations: the block's own, or views of the shared set (recompute).
    auto stored = [&](const Tensor* area, int C) {
      if (!area) return activation(N, C, Ho_, Wo_);
      return area->slice0(0, int64_t{N} * C * Ho_ * Wo_).view({N, C, Ho_, Wo_});
    };
    c1_ = stored(shared ? &shared->c1 : nullptr, local);
    h1_ = stored(shared ? &shared->h1 : nullptr, local);
    c2_ = stored(shared ? &shared->c2 : nullptr, cout);
    if (mask.granularity == Granularity::neuron)
      neuron_scale_ = mask.scale;
    else
      branch_scale_ = mask.block_scale(index);
  }
  if (stride != 1 || cin != cout) {
    sc_conv_ = std::make_unique<Conv2d>(ps, name + ".short.0", cin, cout, 1, stride, 0);
    sc_bn_ = std::make_unique<BatchNorm2d>(ps, name + ".short.1", cout);
    if (branch_present())
      sc_ = shared ? shared->sc.slice0(0, int64_t{N} * cout * Ho_ * Wo_).view({N, cout, Ho_, Wo_})
                   : activation(N, cout, Ho_, Wo_);
  }
  if (!identity()) out_ = activation(N, cout, Ho_, Wo_);
}

int64_t BasicBlock::max_elems(int N) const {
  return static_cast<int64_t>(N) * std::max(cin_ * H_ * W_, cout_ * Ho_ * Wo_);
}

int64_t BasicBlock::workspace_floats(int N) const {
  int64_t ws = 0;
  for (const Conv2d* c : {conv1_.get(), conv2_.get(), sc_conv_.get()})
    if (c) ws = std::max(ws, c->workspace_floats(N, c == conv2_.get() ? Ho_ : H_, c == conv2_.get() ? Wo_ : W_));
  return ws;
}

float* BasicBlock::forward(float* x, int N, bool training, ResNetScratch& s) {
  if (identity()) return x;  // dropped block with an identity shortcut (x is already >= 0)
  const int64_t n_out = static_cast<int64_t>(N) * cout_ * Ho_ * Wo_, HWo = Ho_ * Wo_;
  float* out = out_.f32();  // (N, cout, Ho, Wo)
  float* ws = s.workspace.f32();
  float* t = s.grad.f32();                   // the gradient scratch is free during the forward pass
  if (!branch_present()) {                   // a dropped block's projection: out = relu(bn(conv(x)))
    sc_conv_->forward(x, t, N, H_, W_, ws);  // (N, cout, Ho, Wo), recomputed in backward
    sc_bn_->forward(t, out, N, HWo, training, /*relu=*/true);
    return out;
  }
  conv1_->forward(x, c1_.f32(), N, H_, W_, ws);                          // (N, C1, Ho, Wo)
  bn1_->forward(c1_.f32(), h1_.f32(), N, HWo, training, /*relu=*/true);  // (N, C1, Ho, Wo)
  const int64_t n_h = static_cast<int64_t>(N) * conv1_->cout() * HWo;
  if (neuron_scale_ != 1.f) backend().scale(h1_.f32(), neuron_scale_, n_h);
  conv2_->forward(h1_.f32(), c2_.f32(), N, Ho_, Wo_, ws);  // (N, cout, Ho, Wo)
  bn2_->forward(c2_.f32(), out, N, HWo, training);
  if (branch_scale() != 1.f) backend().scale(out, branch_scale(), n_out);
  if (sc_conv_) {
    sc_conv_->forward(x, sc_.f32(), N, H_, W_, ws);  // (N, cout, Ho, Wo)
    sc_bn_->forward(sc_.f32(), t, N, HWo, training);
    backend().add(out, t, out, n_out);
  } else {
    backend().add(out, x, out, n_out);
  }
  backend().relu_forward(out, out, n_out);
  return out;
}

void BasicBlock::backward(const float* x, float* dx, int N, ResNetScratch& s) {
  SUBDP_CHECK(!identity(), "BasicBlock::backward called on an identity block");
  // No buffer of its own: d(sum) is the output buffer and is rewritten in place as d(c2);
  // d(sc) overwrites sc (BatchNorm's backward reads each input element before writing its
  // gradient), d(h1) overwrites c2 (dead after bn2's backward), and both paths' input
  // gradients are summed in dx. A dropped block with a projection: dx first holds the
  // recomputed projection conv output, d(sc) overwrites the output buffer, then dx is
  // written.
  const int64_t n_out = static_cast<int64_t>(N) * cout_ * Ho_ * Wo_, HWo = Ho_ * Wo_;
  float* ws = s.workspace.f32();
  float* d = out_.f32();  // (N, cout, Ho, Wo): d(sum), the output ReLU already applied
  if (!branch_present()) {
    sc_conv_->forward(x, dx, N, H_, W_, ws);  // sc (N, cout, Ho, Wo), as in the forward
    sc_bn_->backward(dx, d, d, N, HWo);       // d: d(sc)
    sc_conv_->backward(x, d, dx, N, H_, W_, ws);
    return;
  }
  if (sc_conv_) {
    float* dsc = sc_.f32();  // (N, cout, Ho, Wo): d(sc) in place of sc
    sc_bn_->backward(sc_.f32(), d, dsc, N, HWo);
    sc_conv_->backward(x, dsc, dx, N, H_, W_, ws);  // dx (N, cin, H, W) written
  } else {
    backend().copy(d, dx, n_out);  // identity shortcut: cin, H, W = cout, Ho, Wo
  }
  if (branch_scale() != 1.f) backend().scale(d, branch_scale(), n_out);
  bn2_->backward(c2_.f32(), d, d, N, HWo);  // d: d(c2) (N, cout, Ho, Wo)
  float* dh1 = c2_.f32();                   // (N, C1, Ho, Wo), C1 <= cout: c2 is dead
  conv2_->backward(h1_.f32(), d, dh1, N, Ho_, Wo_, ws);
  const int64_t n_h = static_cast<int64_t>(N) * conv1_->cout() * HWo;
  backend().relu_backward(h1_.f32(), dh1, dh1, n_h, false);
  if (neuron_scale_ != 1.f) backend().scale(dh1, neuron_scale_, n_h);
  bn1_->backward(c1_.f32(), dh1, dh1, N, HWo);        // dh1: d(c1)
  conv1_->backward(x, dh1, dx, N, H_, W_, ws, true);  // dx (N, cin, H, W) += branch's
}

void BasicBlock::recompute(const float* x, int N, ResNetScratch& s) {
  SUBDP_ASSERT(branch_present());
  const int64_t HWo = Ho_ * Wo_;
  float* ws = s.workspace.f32();
  conv1_->forward(x, c1_.f32(), N, H_, W_, ws);
  bn1_->recompute(c1_.f32(), h1_.f32(), N, HWo, /*relu=*/true);
  if (neuron_scale_ != 1.f) backend().scale(h1_.f32(), neuron_scale_, static_cast<int64_t>(N) * conv1_->cout() * HWo);
  conv2_->forward(h1_.f32(), c2_.f32(), N, Ho_, Wo_, ws);
  if (sc_conv_) sc_conv_->forward(x, sc_.f32(), N, H_, W_, ws);
  // bn2 and the projection's BatchNorm keep their batch statistics from the forward pass.
}

void BasicBlock::collect_batchnorms(std::vector<BatchNorm2d*>& out) const {
  for (BatchNorm2d* bn : {bn1_.get(), bn2_.get(), sc_bn_.get()})
    if (bn) out.push_back(bn);
}

std::vector<BatchNorm2d*> ResNet::batchnorms() {
  std::vector<BatchNorm2d*> out = {stem_bn_.get()};
  for (auto& blk : blocks_) blk->collect_batchnorms(out);
  return out;
}

ResNet::ResNet(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute_blocks,
               ParamLayout layout)
    : Model(mask, seed, layout),
      recompute_(recompute_blocks),
      head_(max_batch, c.classes),
      C_in_(c.in_channels),
      H_(c.image_size),
      W_(c.image_size) {
  const int N = max_batch, w0 = c.widths.at(0);
  stem_conv_ = std::make_unique<Conv2d>(params_, "stem.0", C_in_, w0, 3, 1, 1);
  stem_bn_ = std::make_unique<BatchNorm2d>(params_, "stem.1", w0);
  stem_h_ = activation(N, w0, H_, W_);
  int H = H_, W = W_;
  int64_t max_elems = static_cast<int64_t>(N) * w0 * H * W;
  int64_t ws = stem_conv_->workspace_floats(N, H, W);
  auto geom = block_geometry(c);
  if (recompute_) {  // one set of block activations, as large as the largest block's output
    int64_t largest = 0;
    for (int b = 0, h = H; b < static_cast<int>(geom.size()); ++b) {
      h = (h + 2 - 3) / geom[b].stride + 1;
      largest = std::max(largest, static_cast<int64_t>(N) * geom[b].cout * h * h);
    }
    shared_block_ = ResNetBlockActivations::allocate(largest);
  }
  for (size_t b = 0; b < geom.size(); ++b) {
    auto blk =
        std::make_unique<BasicBlock>(params_, mask_, static_cast<int>(b), geom[b].cin, geom[b].cout, geom[b].stride, H,
                                     W, N, c.zero_init_residual, recompute_ ? &shared_block_ : nullptr);
    max_elems = std::max(max_elems, blk->max_elems(N));
    ws = std::max(ws, blk->workspace_floats(N));
    H = blk->Ho();
    W = blk->Wo();
    blocks_.push_back(std::move(blk));
  }
  final_C_ = geom.back().cout;
  final_H_ = H;
  final_W_ = W;
  fc_ = std::make_unique<Linear>(params_, "fc", final_C_, c.classes, true);
  pooled_ = Tensor::empty({N, final_C_}, MemCategory::activations);
  dpooled_ = Tensor::empty({N, final_C_}, MemCategory::activations);
  scratch_.grad = Tensor::empty({max_elems}, MemCategory::activations);
  scratch_.workspace = Tensor::empty({ws}, MemCategory::workspace);
}

void ResNet::enqueue_forward(const Batch& batch, bool training) {
  const int64_t per = static_cast<int64_t>(C_in_) * H_ * W_;
  SUBDP_CHECK(batch.x.numel() / batch.x.dim(0) == per && batch.n <= batch.x.dim(0),
              "ResNet expects ({}, {}, {}) images, got {} values per example", C_in_, H_, W_,
              batch.x.numel() / batch.x.dim(0));
  rows_ = batch.n;
  input_ = batch.x.f32();
  const int N = static_cast<int>(rows_);
  float* ws = scratch_.workspace.f32();
  float* c = scratch_.grad.f32();  // stem conv output (N, w0, H, W): recomputed in backward
  stem_conv_->forward(input_, c, N, H_, W_, ws);
  stem_bn_->forward(c, stem_h_.f32(), N, H_ * W_, training, /*relu=*/true);
  float* x = stem_h_.f32();
  block_in_.clear();
  last_branch_ = -1;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const auto [skipped, scale] = stochastic_step(static_cast<int>(b), training);
    blocks_[b]->set_step(skipped, scale);
    block_in_.push_back(x);
    block_forward_starts(static_cast<int>(b));
    x = blocks_[b]->forward(x, N, training, scratch_);
    if (blocks_[b]->computes_branch()) last_branch_ = static_cast<int>(b);
  }
  last_out_ = x;                                                                          // (N, C, Hf, Wf)
  backend().global_avg_pool_forward(x, pooled_.f32(), N, final_C_, final_H_ * final_W_);  // (N, C)
  fc_->forward(pooled_.f32(), head_.logits(), rows_);                                     // (N, classes)
  head_.loss(batch.y.i32(), rows_, training);
}

// One activation-sized scratch g in all. Each activation buffer is post-ReLU and, once its
// consumer's backward has read it, dead: the gradient with respect to it goes into that
// same buffer, masked by the ReLU it holds (relu_backward with dx == y, element by element).
void ResNet::backward() {
  const int N = static_cast<int>(rows_);
  fc_->backward(pooled_.f32(), head_.dlogits(), dpooled_.f32(), rows_);
  float* g = scratch_.grad.f32();
  const int64_t n_last = static_cast<int64_t>(N) * final_C_ * final_H_ * final_W_;
  backend().global_avg_pool_backward(dpooled_.f32(), g, N, final_C_, final_H_ * final_W_);
  backend().relu_backward(last_out_, g, last_out_, n_last, false);
  for (size_t b = blocks_.size(); b-- > 0;) {
    BasicBlock& blk = *blocks_[b];
    block_backward_starts(static_cast<int>(b));
    if (blk.identity()) {  // its output buffer is its input's: the gradient is in place
      block_backward_done(static_cast<int>(b));
      continue;
    }
    // Recompute: the shared set holds the last computing block's activations; every other
    // block's is rebuilt from its input, bit for bit.
    if (recompute_ && blk.computes_branch() && static_cast<int>(b) != last_branch_)
      blk.recompute(block_in_[b], N, scratch_);
    blk.backward(block_in_[b], g, N, scratch_);  // g: d(x) (N, cin, H, W)
    backend().relu_backward(block_in_[b], g, block_in_[b], blk.in_elems(N), false);
    block_backward_done(static_cast<int>(b));
  }
  float* dh = stem_h_.f32();  // (N, w0, H, W): d(stem BN output), the ReLU mask applied
  float* ws = scratch_.workspace.f32();
  stem_conv_->forward(input_, g, N, H_, W_, ws);  // the BatchNorm's input, as in the forward
  stem_bn_->backward(g, dh, dh, N, H_ * W_);
  stem_conv_->backward(input_, dh, nullptr, N, H_, W_, ws);
}

}  // namespace subdp
