// Reference MLP (torch_ref.py): 784 -> 1024 -> 1024 -> 10 with ReLU.
// Units (neuron level): the neurons of hidden layers 0, 2, 4, ...: neuron j is row j of
// the Linear before it (and its bias entry) and column j of the Linear after it. The odd
// hidden layers stay dense so that no weight is sliced by two unit layers at once (its
// holder group would be an intersection, outside the plan's groups). The MLP has no
// residual blocks, so block level is refused.
#pragma once
#include <vector>

#include "engine/layers/linear.h"
#include "models/classifier_head.h"
#include "models/model.h"

namespace subdp {

/// Units: the neurons of every other hidden layer (the 1st, 3rd, ...; neuron level: a neuron's
/// incoming row, bias and outgoing column; the MLP has no blocks). Allocates nothing.
ModelUnits mlp_units(const ModelConfig& c);

class Mlp : public Model {
 public:
  /// The MLP for `mask` with activations for max_batch images of model.in_channels x
  /// model.image_size^2 (flattened); batches are (N, C, H, W) floats and int32 labels.
  Mlp(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed);
  void enqueue_forward(const Batch& batch, bool training) override;
  void backward() override;
  std::vector<float> read_logits(int64_t first, int64_t rows) const override { return head_.read_logits(first, rows); }
  void keep_logits() override { head_.keep_logits(); }

 private:
  std::vector<Linear> fcs_;     // fcs_[i]: width[i] -> width[i+1]
  std::vector<Tensor> hidden_;  // hidden_[i] (N, width of fcs_[i] output), post-ReLU
  std::vector<float> scale_;    // per hidden layer: 1/keep when forward-masked, else 1
  Tensor dbuf_[2];              // (N, max width) activation-gradient ping-pong
  CrossEntropyHead head_;
  const float* input_ = nullptr;  // (N, in_features) of the last forward
  const int32_t* targets_ = nullptr;
  int64_t rows_ = 0, in_features_ = 0;
};

}  // namespace subdp
