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

ModelUnits resnet_units(const ModelConfig& c);

/// Scratch buffers shared by all blocks, each (N, max C*H*W) floats: the backward pass's
/// activation-gradient ping-pong (a block clobbers its dout); grad[0] also holds the
/// shortcut BatchNorm's output during the forward pass, when no gradient is live.
struct ResNetScratch {
  Tensor grad[2];
  Tensor workspace;  // conv im2col workspace
};

/// out = relu(shortcut(x) + scale * bn2(conv2(relu(bn1(conv1(x))) * s_neuron))).
class BasicBlock {
 public:
  /// zero_init_residual: bn2's gamma starts at 0, so the branch starts as the zero function
  /// and the block as its shortcut (Goyal et al. 2017, section 5.1; torchvision's flag).
  BasicBlock(ParamSet& ps, const SubnetMask& mask, int index, int cin, int cout, int stride, int H,
             int W, int max_batch, bool zero_init_residual);
  /// x (N, cin, H, W) -> output() (N, cout, Ho, Wo). Returns the output pointer (x itself
  /// when the block is the identity).
  const float* forward(const float* x, int N, bool training, ResNetScratch& s);
  /// dout (N, cout, Ho, Wo) -> dx (N, cin, H, W) written; dout's buffer (max_elems floats)
  /// is used as scratch and left overwritten, and so are the stored c2 and shortcut
  /// activations: call it once per forward.
  void backward(const float* x, float* dout, float* dx, int N, ResNetScratch& s);
  int64_t max_elems(int N) const;
  int64_t workspace_floats(int N) const;
  void collect_batchnorms(std::vector<BatchNorm2d*>& out) const;
  int Ho() const { return Ho_; }
  int Wo() const { return Wo_; }

 private:
  bool branch_present() const { return conv1_ != nullptr; }
  bool identity() const { return !branch_present() && !sc_conv_; }
  std::unique_ptr<Conv2d> conv1_, conv2_, sc_conv_;
  std::unique_ptr<BatchNorm2d> bn1_, bn2_, sc_bn_;
  Tensor c1_, h1_, c2_, sc_, out_;  // stored activations, (N, C, Ho, Wo)
  int cin_, cout_, H_, W_, Ho_, Wo_;
  float branch_scale_ = 1.f, neuron_scale_ = 1.f;
};

class ResNet : public Model {
 public:
  ResNet(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed);
  double forward(const Batch& batch, bool training, int64_t* correct) override;
  void backward() override;
  const float* last_logits() const override { return head_.logits(); }
  std::vector<BatchNorm2d*> batchnorms() override;

 private:
  std::unique_ptr<Conv2d> stem_conv_;
  std::unique_ptr<BatchNorm2d> stem_bn_;
  std::vector<std::unique_ptr<BasicBlock>> blocks_;
  std::unique_ptr<Linear> fc_;
  Tensor stem_c_, stem_h_, pooled_, dpooled_;
  std::vector<const float*> block_in_;  // input of each block in the last forward
  const float* last_out_ = nullptr;
  ResNetScratch scratch_;
  CrossEntropyHead head_;
  const float* input_ = nullptr;
  int64_t rows_ = 0;
  int C_in_, H_, W_, final_C_ = 0, final_H_ = 0, final_W_ = 0;
};

}  // namespace subdp
