// Optimizers over local parameters only (SGD with momentum / Nesterov / weight decay,
// AdamW) and the learning-rate schedule (linear warm-up, then cosine decay).
// State is allocated like the gradient (kept prefix), so dropped units cost nothing and
// are never touched: no weight decay, no momentum drift on parameters a rank does not hold.
#pragma once
#include <memory>
#include <vector>

#include "engine/config/config.h"
#include "engine/parallel/sharded_state.h"
#include "engine/subnet/param.h"

namespace subdp {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update with learning rate lr to every parameter holding a gradient.
  virtual void step(double lr) = 0;
  /// Optimizer state tensors of parameter i, for checkpoints: laid out like its gradient, or,
  /// sharded, its shard pieces one after another (state_runs maps them).
  virtual std::vector<Tensor*> state(size_t i) = 0;
  /// Where parameter i's state sits: runs of (value, gradient, state) offsets. Unsharded:
  /// state_off == grad_off over the whole gradient.
  virtual std::vector<StateRun> state_runs(size_t i) const = 0;
  /// True when the state holds this rank's shard pieces only (parallel.shard other than
  /// "none").
  virtual bool sharded() const = 0;
  /// State tensors per parameter (SGD with momentum 1, without 0; AdamW 2), same on every rank.
  virtual int num_states() const = 0;
  /// Updates applied so far (AdamW's bias-correction t after the update: 1 after the first),
  /// checkpointed as CheckpointInfo::optimizer_steps and restored on resume.
  virtual int64_t steps_taken() const = 0;
  virtual void set_steps_taken(int64_t t) = 0;
  /// The parameters it updates (trainable ones holding a gradient), in state order.
  virtual const std::vector<Param*>& params() const = 0;
  /// Index into params() of the first parameter whose value or state holds a non-finite value
  /// (inf or NaN), or -1. The updates count their non-finite writes as they go
  /// (StepCounters::nonfinite_writes, read with the next step's counters); only when that
  /// count is not 0 does the trainer search with this (a read-back per parameter).
  virtual int locate_nonfinite() const = 0;
};

/// Builds the optimizer named in config.optim over `params` (held gradients only). With
/// `shard` (GradientSync::shard_pieces, parallel.shard other than "none") it keeps
/// state for, and updates, those pieces only, reading their gradients at ShardPiece::grad.
std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& config, std::vector<Param*> params,
                                          const std::vector<ShardPiece>* shard = nullptr);

/// Learning rate at optimizer step `step` (0-based) of `total`: linear warm-up over
/// warmup_steps from lr/warmup to lr, then cosine decay to lr * min_lr_ratio (schedule
/// "cosine") or constant. Cosine (Loshchilov & Hutter 2017, SGDR, one cycle): floor + (lr -
/// floor) (1 + cos(pi p)) / 2, p = (step - warmup) / max(1, total - warmup) clamped to 1, floor
/// = lr * min_lr_ratio. `base_lr` already includes any world-size scaling (Goyal et al. 2017).
double learning_rate(const OptimConfig& config, double base_lr, int64_t step, int64_t total);

}  // namespace subdp
