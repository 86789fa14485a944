// Model interface: a sequence of residual blocks (or layers) with a dense stem and head,
// explicit forward and backward, parameters built for one subnetwork mask.
#pragma once
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/backend.h"
#include "engine/core/batch.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"

namespace subdp {

class BatchNorm2d;

/// Calls a model makes around each residual block b (every block of the model, dropped or
/// absent ones included, so every rank makes the same calls in the same order). Unset ones
/// are skipped.
struct BlockHooks {
  std::function<void(int)> before_forward;   // b ascending, every forward (FSDP: gather b's values)
  std::function<void(int)> before_backward;  // b descending, before any recompute (FSDP: gather again)
  std::function<void(int)> after_backward;   // b descending: b's gradients are final (ZeRO-2, FSDP, overlap)
};

/// A trainable model on one rank. Activations are allocated once for `max_batch`.
class Model {
 public:
  /// Parameters laid out under `mask` (kept by reference: it must outlive the model), their
  /// initial values drawn from `seed` (train.seed; the same full tensor on every rank, whatever
  /// its mask: engine/subnet/param.h, init_value), laid out as `layout` says (ParamLayout).
  Model(const SubnetMask& mask, uint64_t seed, ParamLayout layout = ParamLayout::per_param)
      : mask_(mask), params_(mask_, seed, layout) {}
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// Enqueues the forward pass and its cross-entropy: the loss over the batch's target
  /// positions and their hits land in the backend's StepCounters, read by the caller (the
  /// trainer's step reads them once with its gradient check). training = true stores what
  /// backward() needs (and uses batch statistics / scaling).
  virtual void enqueue_forward(const Batch& batch, bool training) = 0;
  /// enqueue_forward, then one read of the counters: the mean cross-entropy (nats) over the
  /// batch's target positions; `correct` (optional) receives the positions whose argmax is
  /// the target. Errors: ids outside an embedding table; counts of another phase (an
  /// optimizer's writes) still unread, which this read would lose.
  double forward(const Batch& batch, bool training, int64_t* correct);
  /// Backward of the last training forward: accumulates parameter gradients. Call it once
  /// per forward: a model may overwrite its stored activations with their gradients.
  virtual void backward() = 0;
  /// Every BatchNorm layer (for re-estimating running statistics of an assembled model).
  virtual std::vector<BatchNorm2d*> batchnorms() { return {}; }
  /// Rows [first, first + rows) of the last forward's logits, (positions, classes) row-major,
  /// as host floats (a bf16 head's widened); empty for a model that does not expose them. A
  /// training forward overwrites them with their gradient (the fused classifier) unless
  /// keep_logits() was called.
  virtual std::vector<float> read_logits(int64_t /*first*/, int64_t /*rows*/) const { return {}; }
  /// Training forwards keep their logits (dlogits in a tensor of their own): parity-dump.
  virtual void keep_logits() {}
  /// Target positions per example (1 for classifiers, T for language models).
  virtual int64_t positions_per_example() const { return 1; }
  /// Stochastic depth (mask.regime = "stochastic", Huang et al. 2016): in the training
  /// forwards that follow, block b's residual branch is skipped where dropped[b] = 1 (the
  /// block is its shortcut; its parameters get no gradient) and every other block's branch
  /// output is multiplied by `scale` (1/keep), pinned blocks excepted (dense[b] = 1).
  /// Evaluation forwards run every block unscaled. Errors for a model without blocks.
  void set_dropped_blocks(const std::vector<char>& dropped, const std::vector<char>& dense, float scale);

  /// The calls around each block (BlockHooks); the trainer sets them for ZeRO-2, FSDP and overlap.
  void set_block_hooks(BlockHooks hooks) { hooks_ = std::move(hooks); }
  /// True when a forward pass gathers block values (FSDP): a collective on every rank.
  bool gathers_blocks() const { return static_cast<bool>(hooks_.before_forward); }

  ParamSet& params() { return params_; }
  const SubnetMask& mask() const { return mask_; }
  /// Zeroes every held gradient.
  void zero_grad();

 protected:
  /// Models call these around each block (BlockHooks).
  void block_forward_starts(int b) const {
    if (hooks_.before_forward) hooks_.before_forward(b);
  }
  void block_backward_starts(int b) const {
    if (hooks_.before_backward) hooks_.before_backward(b);
  }
  void block_backward_done(int b) const {
    if (hooks_.after_backward) hooks_.after_backward(b);
  }
  /// What the transformers' block loops keep from the forward pass for the backward pass.
  struct BlockTrace {
    std::vector<const float*> inputs;  // each block's input
    int last_run = -1;                 // the last block that computed (its activations are live)
  };
  /// The transformers' forward over their blocks (each with set_step, forward(x, B, T, s) and
  /// runs()): stochastic depth, the before-forward hook, the inputs kept in `trace`. Returns
  /// the last block's output (B, T, C).
  template <class Block, class Scratch>
  const float* run_blocks(const std::vector<std::unique_ptr<Block>>& blocks, const float* x, int B, int T, Scratch& s,
                          bool training, BlockTrace& trace) const {
    trace.inputs.clear();
    trace.last_run = -1;
    for (int b = 0; b < static_cast<int>(blocks.size()); ++b) {
      const auto [skipped, scale] = stochastic_step(b, training);
      blocks[b]->set_step(skipped, scale);
      trace.inputs.push_back(x);
      block_forward_starts(b);
      x = blocks[b]->forward(x, B, T, s);
      if (blocks[b]->runs()) trace.last_run = b;
    }
    return x;
  }
  /// Their backward, last block first, dres (B, T, C) the residual gradient: the hooks around
  /// each block and, under recompute, each block's activations rebuilt from its input by the
  /// forward's arithmetic (bit for bit), except the last block that ran, whose are still live.
  template <class Block, class Scratch>
  void backprop_blocks(const std::vector<std::unique_ptr<Block>>& blocks, float* dres, int B, int T, Scratch& s,
                       bool recompute, const BlockTrace& trace) const {
    for (int b = static_cast<int>(blocks.size()) - 1; b >= 0; --b) {
      block_backward_starts(b);
      if (recompute && b != trace.last_run) blocks[b]->forward(trace.inputs[b], B, T, s);
      blocks[b]->backward(trace.inputs[b], dres, B, T, s);
      block_backward_done(b);
    }
  }
  /// Residual blocks of the model (0: none, and stochastic depth is refused).
  virtual int residual_blocks() const { return 0; }
  /// Stochastic depth in this forward for block b: {branch skipped, branch scale}; {false, 1}
  /// in evaluation forwards and without stochastic depth.
  std::pair<bool, float> stochastic_step(int b, bool training) const {
    if (!training || dropped_.empty()) return {false, 1.f};
    return {dropped_[b] != 0, dense_[b] ? 1.f : drop_scale_};
  }
  SubnetMask mask_;
  ParamSet params_;

 private:
  BlockHooks hooks_;
  std::vector<char> dropped_, dense_;  // stochastic depth (set_dropped_blocks); empty: none
  float drop_scale_ = 1.f;
};

/// Stops with an error naming what a forward pass's counters found wrong (embedding ids
/// outside their table).
void check_forward_counters(const StepCounters& counters);

/// Maskable units of the model the config describes (no allocation). Errors name the key.
ModelUnits model_units(const ModelConfig& config);

/// Builds the local model for `mask` with activations for `max_batch` examples.
/// recompute_blocks (train.recompute = "blocks"): the blocks share one set of activations
/// and each block's is recomputed from its input in the backward pass (ResNet and GPT; the
/// MLP has no blocks and refuses it). `layout`: how values and gradients are laid out (ParamLayout).
std::unique_ptr<Model> make_model(const ModelConfig& config, const SubnetMask& mask, int max_batch, uint64_t seed,
                                  bool recompute_blocks = false, ParamLayout layout = ParamLayout::per_param);

}  // namespace subdp
