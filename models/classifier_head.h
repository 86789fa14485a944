// Softmax cross-entropy head shared by the classifiers: owns the logits, which a training
// loss overwrites with dlogits.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"

namespace subdp {

/// Mean softmax cross-entropy over (rows, classes) logits. A training loss writes dlogits over
/// the logits (the fused classifier: one pass, no probabilities tensor), unless keep_logits().
class CrossEntropyHead {
 public:
  /// Allocates (max_rows, classes) logits (activations).
  CrossEntropyHead(int64_t max_rows, int classes);
  float* logits() const { return logits_.f32(); }
  /// Adds the rows' losses (nats) and hits to the backend's StepCounters; writes dlogits for
  /// backward when training.
  void loss(const int32_t* targets, int64_t rows, bool training);
  /// dlogits (rows, classes) of the last training loss(): the logits' memory, or its own after
  /// keep_logits().
  const float* dlogits() const { return dlogits_.defined() ? dlogits_.f32() : logits_.f32(); }
  /// From now on a training loss writes dlogits to a tensor of its own (allocated here), so the
  /// logits survive it (parity-dump reads a training forward's logits).
  void keep_logits();

 private:
  Tensor logits_, dlogits_;
  int classes_;
};

}  // namespace subdp
