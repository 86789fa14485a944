// Model interface: a sequence of residual blocks (or layers) with a dense stem and head,
// explicit forward and backward, parameters built for one subnetwork mask.
#pragma once
#include <functional>
#include <memory>

#include "engine/config.h"
#include "engine/param.h"
#include "engine/plan.h"

namespace subdp {

/// One batch: inputs (images (N, C, H, W) float32, or tokens (B, T) int32) and integer
/// targets ((N) classes or (B, T) next tokens), in backend memory. Data sources fill the host
/// staging tensors and call upload(); where the backend's memory is the host's, the staging
/// tensors are x and y themselves and nothing is copied.
struct Batch {
  Tensor x;
  Tensor y;
  Tensor x_host;  // host staging for x (x itself on a host backend; undefined: x is filled directly)
  Tensor y_host;
  int64_t n = 0;  // examples (N, or B for token batches)

  /// x and y of these shapes and dtypes (activations), with host staging (accounted as
  /// activations) when backend memory is not the host's.
  static Batch allocate(const Shape& x_shape, DType x_dtype, const Shape& y_shape, DType y_dtype);
  /// Copies the first n examples of the staging tensors into x and y.
  void upload() const;
};

class BatchNorm2d;

/// A trainable model on one rank. Activations are allocated once for `max_batch`.
class Model {
 public:
  Model(const SubnetMask& mask, uint64_t seed, GradLayout grads = GradLayout::per_param)
      : mask_(mask), params_(mask_, seed, grads) {}
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// Forward pass and mean cross-entropy (nats) over the batch's target positions.
  /// `correct` (optional) receives the number of positions whose argmax is the target.
  /// training = true stores what backward() needs (and uses batch statistics / scaling).
  virtual double forward(const Batch& batch, bool training, int64_t* correct) = 0;
  /// Backward of the last training forward: accumulates parameter gradients. Call it once
  /// per forward: a model may overwrite its stored activations with their gradients.
  virtual void backward() = 0;
  /// Every BatchNorm layer (for re-estimating running statistics of an assembled model).
  virtual std::vector<BatchNorm2d*> batchnorms() { return {}; }
  /// Logits of the last forward, (positions, classes) row-major; nullptr if not kept.
  virtual const float* last_logits() const { return nullptr; }
  /// Target positions per example (1 for classifiers, T for language models).
  virtual int64_t positions_per_example() const { return 1; }
  /// Stochastic depth (mask.regime = "stochastic", Huang et al. 2016): in the training
  /// forwards that follow, block b's residual branch is skipped where dropped[b] = 1 (the
  /// block is its shortcut; its parameters get no gradient) and every other block's branch
  /// output is multiplied by `scale` (1/keep), pinned blocks excepted (dense[b] = 1).
  /// Evaluation forwards run every block unscaled. Errors for a model without blocks.
  virtual void set_dropped_blocks(const std::vector<char>& dropped, const std::vector<char>& dense, float scale);

  /// Called with b after block b's backward (b descending, every block of the model, dropped
  /// or absent ones included, so every rank calls it the same number of times in the same
  /// order): block b's parameter gradients are final then. ZeRO-2 reduces them there.
  void set_block_backward_hook(std::function<void(int)> hook) { block_hook_ = std::move(hook); }

  ParamSet& params() { return params_; }
  const SubnetMask& mask() const { return mask_; }
  /// Zeroes every held gradient.
  void zero_grad();

 protected:
  /// Models call it after each block's backward (set_block_backward_hook).
  void block_backward_done(int b) const {
    if (block_hook_) block_hook_(b);
  }
  SubnetMask mask_;
  ParamSet params_;

 private:
  std::function<void(int)> block_hook_;
};

/// Maskable units of the model the config describes (no allocation). Errors name the key.
ModelUnits model_units(const ModelConfig& config);

/// Builds the local model for `mask` with activations for `max_batch` examples.
/// recompute_blocks (train.recompute = "blocks"): the blocks share one set of activations
/// and each block's is recomputed from its input in the backward pass (ResNet and GPT; the
/// MLP has no blocks and refuses it). `grads`: how the gradients are laid out (GradLayout).
std::unique_ptr<Model> make_model(const ModelConfig& config, const SubnetMask& mask, int max_batch,
                                  uint64_t seed, bool recompute_blocks = false,
                                  GradLayout grads = GradLayout::per_param);

}  // namespace subdp
