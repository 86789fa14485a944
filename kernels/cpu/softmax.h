// Softmax and softmax cross-entropy over the last dimension (float32).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// In-place numerically stable softmax of each row of x (rows, V).
void softmax_rows(float* x, int64_t rows, int V);

/// Mean cross-entropy of logits (rows, V) against integer targets (rows) in [0, V).
/// Writes probs (rows, V) = softmax(logits) for the backward pass and, when
/// correct != nullptr, the number of rows whose argmax equals the target.
/// Returns the mean loss in nats; NaN if a target lies outside [0, V) (the data sources check
/// labels and tokens when they load, so that only a broken caller sees it).
double cross_entropy_forward(const float* logits, const int32_t* targets, float* probs, int64_t rows, int V,
                             int64_t* correct);

/// dlogits (rows, V) = (probs - onehot(targets)) * scale; scale is 1/rows for a mean loss.
void cross_entropy_backward(const float* probs, const int32_t* targets, float* dlogits, int64_t rows, int V,
                            float scale);

}  // namespace subdp::cpu
