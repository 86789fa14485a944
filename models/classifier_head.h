// Softmax cross-entropy head shared by the classifiers: owns the logits, which a training
// loss overwrites with dlogits. A language model's head also owns its projection's GEMMs, so
// that under [device] precision = "bf16" its (B * T, V) logits, the largest activation of a
// GPT, are bf16 (issue 41).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace subdp {

/// Mean softmax cross-entropy over (rows, classes) logits. A training loss writes dlogits over
/// the logits (the fused classifier: one pass, no probabilities tensor), unless keep_logits().
class CrossEntropyHead {
 public:
  /// Allocates (max_rows, classes) float32 logits (activations): the classifiers, whose own
  /// last layer writes logits().
  CrossEntropyHead(int64_t max_rows, int classes);
  /// A projecting head (the language models): logits = x W^T from project(), x (rows, width).
  /// When the backend's precision is bf16 the logits are bf16 and the head also allocates the
  /// bf16 copies of x (max_rows, width) and W (classes, width) its GEMMs read (workspace);
  /// otherwise it is the float32 head and its GEMMs the backend's sgemm.
  CrossEntropyHead(int64_t max_rows, int classes, int64_t width);

  /// The float32 logits a classifier's last layer writes. Errors for a bf16 head.
  float* logits() const;
  /// logits (rows, classes) = x (rows, width) . w^T (width, classes), w (classes, width); counts
  /// the GEMM's FLOPs. bf16: the operands rounded to bf16 (kept for project_backward), fp32
  /// sums, logits rounded to bf16.
  void project(const float* x, const float* w, int64_t rows);
  /// Backward of project() from the last training loss's dlogits: dw (classes, width) +=
  /// dlogits^T x when dw is not null, dx (rows, width) = dlogits . w. x and w must be the
  /// values project() read (bf16: its copies are used).
  void project_backward(const float* x, const float* w, float* dw, float* dx, int64_t rows) const;
  /// Adds the rows' losses (nats) and hits to the backend's StepCounters; writes dlogits for
  /// backward when training.
  void loss(const int32_t* targets, int64_t rows, bool training);
  /// dlogits (rows, classes) of the last training loss(), float32: the logits' memory, or its
  /// own after keep_logits(). Errors for a bf16 head (its backward is project_backward).
  const float* dlogits() const;
  /// Rows [first, first + rows) of the last forward's logits, as host floats (bf16 widened).
  std::vector<float> read_logits(int64_t first, int64_t rows) const;
  /// From now on a training loss writes dlogits to a tensor of its own (allocated here), so the
  /// logits survive it (parity-dump reads a training forward's logits).
  void keep_logits();
  bool bf16() const { return logits_.dtype() == DType::bf16; }

 private:
  void* dlogits_raw() const { return dlogits_.defined() ? dlogits_.raw() : logits_.raw(); }

  Tensor logits_, dlogits_;
  Tensor x16_, w16_;  // bf16 head: the operands of project(), rounded
  int classes_;
  int64_t width_ = 0;
};

}  // namespace subdp
