// Embedding lookup and its scatter-add backward.
#include "engine/layers/embedding.h"

#include "engine/backend.h"
#include "engine/error.h"

namespace subdp {

Embedding::Embedding(ParamSet& ps, const std::string& name, int64_t num, int64_t C, InitSpec init) {
  weight = &ps.add(name + ".weight", {num, C}, init);
}

void Embedding::forward(const int32_t* ids, float* y, int64_t rows, bool accumulate) const {
  const int64_t n = num();
  for (int64_t r = 0; r < rows; ++r)  // host-side ids (the batch), checked before the lookup
    SUBDP_CHECK(ids[r] >= 0 && ids[r] < n, "{}: index {} at row {} outside [0, {})", weight->name, ids[r], r, n);
  backend().embedding_forward(ids, weight->value.f32(), y, rows, channels(), accumulate);
}

void Embedding::backward(const int32_t* ids, const float* dy, int64_t rows) const {
  if (!weight->grad.defined()) return;
  backend().embedding_backward(ids, dy, weight->grad.f32(), rows, channels());
}

}  // namespace subdp
