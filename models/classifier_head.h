// Softmax cross-entropy head shared by the classifiers: owns the logits and, unless a model
// lends it scratch for them, the dlogits.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"

namespace subdp {

/// Mean softmax cross-entropy over (rows, classes) logits.
class CrossEntropyHead {
 public:
  /// Allocates (max_rows, classes) logits and dlogits (activations).
  CrossEntropyHead(int64_t max_rows, int classes);
  /// Allocates the logits only; dlogits (and the softmax probabilities before them) are
  /// written to `dlogits_area`, at least max_rows * classes floats a model lends from a
  /// scratch that is free from the end of its forward pass to the start of its backward
  /// pass through the head.
  CrossEntropyHead(int64_t max_rows, int classes, const Tensor& dlogits_area);
  float* logits() const { return logits_.f32(); }
  /// Loss (nats, mean over rows); computes dlogits for backward when training.
  double loss(const int32_t* targets, int64_t rows, bool training, int64_t* correct);
  /// dlogits (rows, classes) of the last training loss(); in lent scratch, valid until the
  /// model reuses that scratch (for the GPT: until its blocks' backward).
  const float* dlogits() const { return dlogits_.f32(); }

 private:
  Tensor logits_, dlogits_;
  int classes_;
};

}  // namespace subdp
