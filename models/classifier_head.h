// Softmax cross-entropy head shared by the classifiers: owns logits / dlogits buffers.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace subdp {

/// Mean softmax cross-entropy over (rows, classes) logits.
class CrossEntropyHead {
 public:
  CrossEntropyHead(int64_t max_rows, int classes);
  float* logits() const { return logits_.f32(); }
  /// Loss (nats, mean over rows); computes dlogits for backward when training.
  double loss(const int32_t* targets, int64_t rows, bool training, int64_t* correct);
  /// dlogits (rows, classes) of the last training loss().
  const float* dlogits() const { return dlogits_.f32(); }

 private:
  Tensor logits_, dlogits_;
  int classes_;
};

}  // namespace subdp
