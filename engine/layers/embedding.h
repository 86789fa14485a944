// Embedding table: y (rows, C) = W[ids] with W (num, C), as torch.nn.Embedding. Used for the
// GPT token (wte) and position (wpe) embeddings; both are dense parameters.
#pragma once
#include <cstdint>
#include <string>

#include "engine/subnet/param.h"

namespace subdp {

class Embedding {
 public:
  /// W (num, C), initialised per `init` (GPT-2: normal(0, 0.02)).
  Embedding(ParamSet& ps, const std::string& name, int64_t num, int64_t C, InitSpec init);
  int64_t num() const { return weight->local_shape.at(0); }
  int64_t channels() const { return weight->local_shape.at(1); }

  /// y (rows, C) = W[ids[r]] (accumulate: y += W[ids[r]]). An id outside [0, num) is skipped
  /// and counted in the backend's StepCounters::bad_ids (Model::forward and the trainer's
  /// step read them and stop with an error: no read-back here).
  void forward(const int32_t* ids, float* y, int64_t rows, bool accumulate) const;
  /// dW[ids[r]] += dy[r] (rows, C), when this rank holds the gradient. Deterministic: each
  /// thread owns a range of columns and walks the rows in order.
  void backward(const int32_t* ids, const float* dy, int64_t rows) const;

  Param* weight = nullptr;
};

}  // namespace subdp
