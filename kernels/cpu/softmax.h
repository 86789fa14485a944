// Softmax and softmax cross-entropy over the last dimension (float32).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// In-place numerically stable softmax of each row of x (rows, V).
void softmax_rows(float* x, int64_t rows, int V);

/// Softmax cross-entropy of logits (rows, V) against integer targets (rows) in [0, V), forward
/// and backward in one pass over each row (the fused classifier: no probabilities tensor).
/// dlogits: null (evaluation), or (rows, V) = (softmax(logits) - onehot(targets)) * scale,
/// scale 1/rows for a mean loss; it may be `logits` itself (written in place: each row's
/// target logit is read before the row is overwritten). correct (optional): the rows whose
/// argmax (first maximum) equals the target. Returns the mean loss in nats; NaN if a target
/// lies outside [0, V) (the data sources check labels and tokens when they load, so that only
/// a broken caller sees it).
double cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V, float scale,
                     int64_t* correct);
/// The same, returning the rows' losses summed in row order (double) instead of their mean.
double cross_entropy_sum(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V, float scale,
                         int64_t* correct);

}  // namespace subdp::cpu
