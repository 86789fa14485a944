// Embedding lookup and its scatter-add backward.
#include "engine/layers/embedding.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

Embedding::Embedding(ParamSet& ps, const std::string& name, int64_t num, int64_t C, InitSpec init) {
  weight = &ps.add(name + ".weight", {num, C}, init);
}

void Embedding::forward(const int32_t* ids, float* y, int64_t rows, bool accumulate) const {
  // ids are backend memory: the kernel counts those out of range (and skips them).
  backend().embedding_forward(ids, weight->value.f32(), num(), y, rows, channels(), accumulate);
}

void Embedding::backward(const int32_t* ids, const float* dy, int64_t rows) const {
  if (!weight->grad.defined()) return;
  backend().embedding_backward(ids, dy, weight->grad.f32(), num(), rows, channels());
}

}  // namespace subdp
