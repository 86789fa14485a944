// Reference ResNet for 28x28x1 (torch_ref.py ResNetFM): stem 3x3 conv 1->32 + BN + ReLU,
// stages of widths {32, 64, 128} with two BasicBlocks each (stride 2 and a 1x1 projection
// shortcut with BN at the start of stages 2 and 3), global average pool, Linear to classes.
// Units: block level = each block's residual branch (conv1, bn1, conv2, bn2; projection
// shortcuts stay dense); neuron level = channel j of a block's first conv (+ bn1 entries)
// and input channel j of its second conv.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "engine/layers/batchnorm.h"
#include "engine/layers/conv2d.h"
#include "engine/layers/linear.h"
#include "models/classifier_head.h"
#include "models/model.h"

namespace subdp {

/// Units: each basic block's inner channels (neuron level: a conv1 output channel with its bn1
/// slice and conv2's input slice); whole basic blocks (block level). Allocates nothing.
ModelUnits resnet_units(const ModelConfig& c);

/// Scratch shared by all blocks. grad, (N, max C*H*W) floats: in the backward pass each
/// block's input gradient before it is masked by the input's ReLU and moved into the input's
/// own (then dead) buffer, and before that the recomputed conv output a BatchNorm backward
/// reads (the stem's; a dropped block's projection); in the forward pass, when no gradient
/// is live, the stem conv's output, a kept block's shortcut BatchNorm output and a dropped
/// block's projection conv output.
struct ResNetScratch {
  Tensor grad;
  Tensor workspace;  // conv workspace (im2col columns or Winograd tiles)
};

/// What a kept block stores for its backward besides its output: the conv1, inner ReLU and
/// conv2 outputs and the projection conv output, flat areas of max_elems floats each. Each
/// block owns its own by default; under train.recompute = "blocks" the model allocates one set
/// for its largest block, every block views it, and the backward pass recomputes a block's.
struct ResNetBlockActivations {
  Tensor c1, h1, c2, sc;
  /// Allocates a set of `elems` floats per tensor (activations).
  static ResNetBlockActivations allocate(int64_t elems);
};

/// out = relu(shortcut(x) + scale * bn2(conv2(relu(bn1(conv1(x))) * s_neuron))).
class BasicBlock {
 public:
  /// zero_init_residual: bn2's gamma starts at 0, so the branch starts as the zero function
  /// and the block as its shortcut (Goyal et al. 2017, section 5.1; torchvision's flag).
  /// shared: the model's one ResNetBlockActivations under recompute, null for tensors of its own.
  BasicBlock(ParamSet& ps, const SubnetMask& mask, int index, int cin, int cout, int stride, int H, int W,
             int max_batch, bool zero_init_residual, const ResNetBlockActivations* shared = nullptr);
  /// x (N, cin, H, W) -> (N, cout, Ho, Wo), post-ReLU. Returns the output buffer (x itself
  /// when the block is the identity), which the caller overwrites with its gradient.
  float* forward(float* x, int N, bool training, ResNetScratch& s);
  /// Expects the output buffer to hold d(output) already multiplied by the output ReLU's
  /// derivative; writes dx (N, cin, H, W), not yet masked by x's ReLU. The output buffer and
  /// the stored c2 and shortcut activations are overwritten: call it once per forward, and
  /// never for an identity() block (its gradient passes through unchanged).
  void backward(const float* x, float* dx, int N, ResNetScratch& s);
  /// Activation recompute: rebuilds what backward reads (conv1, inner ReLU, conv2 and
  /// projection outputs) from the block input x by the forward's arithmetic, leaving the
  /// output buffer (by then the output's gradient) and BatchNorm running statistics alone.
  void recompute(const float* x, int N, ResNetScratch& s);
  /// True when the residual branch computes in this step (it has stored activations).
  bool computes_branch() const { return branch_present(); }
  /// A dropped block with an identity shortcut: forward returns its input.
  bool identity() const { return !branch_present() && !sc_conv_; }
  /// Stochastic depth for the next forward and backward: skip the residual branch (the block
  /// is its shortcut), or multiply the branch output by `scale` on top of the mask's.
  void set_step(bool skipped, float scale) {
    skipped_ = skipped;
    step_scale_ = scale;
  }
  /// Floats of the block input for batch N: N * cin * H * W.
  int64_t in_elems(int N) const { return static_cast<int64_t>(N) * cin_ * H_ * W_; }
  /// Floats of the larger of its input and output for batch N (sizes ResNetScratch::grad).
  int64_t max_elems(int N) const;
  /// Conv workspace floats its present convs need at batch N (the largest; 0 when none).
  int64_t workspace_floats(int N) const;
  /// Appends its present BatchNorms (bn1, bn2, the projection's) to out, in that order.
  void collect_batchnorms(std::vector<BatchNorm2d*>& out) const;
  /// Output height and width (H, W halved, rounded up, at stride 2).
  int Ho() const { return Ho_; }
  int Wo() const { return Wo_; }

 private:
  /// The residual branch computes in this step: built (not forward-masked) and not skipped.
  bool branch_present() const { return conv1_ != nullptr && !skipped_; }
  float branch_scale() const { return branch_scale_ * step_scale_; }
  std::unique_ptr<Conv2d> conv1_, conv2_, sc_conv_;
  std::unique_ptr<BatchNorm2d> bn1_, bn2_, sc_bn_;
  // Stored activations, (N, C, Ho, Wo). sc_ only with a branch: a dropped block's projection
  // recomputes its conv in backward rather than keep it (forward masking stores less).
  Tensor c1_, h1_, c2_, sc_, out_;
  int cin_, cout_, H_, W_, Ho_, Wo_;
  float branch_scale_ = 1.f, neuron_scale_ = 1.f;
  bool skipped_ = false;    // stochastic depth: branch skipped in this step
  float step_scale_ = 1.f;  // stochastic depth: 1/keep for a kept branch in a training step
};

class ResNet : public Model {
 public:
  /// recompute_blocks: train.recompute = "blocks" (ResNetBlockActivations).
  ResNet(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed, bool recompute_blocks = false,
         ParamLayout layout = ParamLayout::per_param);
  void enqueue_forward(const Batch& batch, bool training) override;
  void backward() override;
  std::vector<float> read_logits(int64_t first, int64_t rows) const override { return head_.read_logits(first, rows); }
  void keep_logits() override { head_.keep_logits(); }
  std::vector<BatchNorm2d*> batchnorms() override;
  int residual_blocks() const override { return static_cast<int>(blocks_.size()); }

 private:
  std::unique_ptr<Conv2d> stem_conv_;
  std::unique_ptr<BatchNorm2d> stem_bn_;
  std::vector<std::unique_ptr<BasicBlock>> blocks_;
  std::unique_ptr<Linear> fc_;
  // stem_h_: the stem's ReLU output (N, w0, H, W). Its conv output is not stored: the
  // forward puts it in the scratch and the backward recomputes it (a 3x3 conv from the
  // in_channels-channel image: 1 for Fashion-MNIST, 3 for CIFAR-10).
  Tensor stem_h_, pooled_, dpooled_;
  std::vector<float*> block_in_;         // input of each block in the last forward
  ResNetBlockActivations shared_block_;  // under recompute: the one set every block views
  bool recompute_ = false;
  int last_branch_ = -1;  // last block whose branch computed in the last forward (its set is live)
  float* last_out_ = nullptr;
  ResNetScratch scratch_;
  CrossEntropyHead head_;
  const float* input_ = nullptr;
  int64_t rows_ = 0;
  int C_in_, H_, W_, final_C_ = 0, final_H_ = 0, final_W_ = 0;
};

}  // namespace subdp
