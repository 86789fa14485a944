// Softmax cross-entropy head.
#include "models/classifier_head.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

CrossEntropyHead::CrossEntropyHead(int64_t max_rows, int classes)
    : logits_(Tensor::empty({max_rows, classes}, MemCategory::activations)), classes_(classes) {}

void CrossEntropyHead::keep_logits() {
  if (!dlogits_.defined()) dlogits_ = Tensor::empty(logits_.shape(), MemCategory::activations);
}

void CrossEntropyHead::loss(const int32_t* targets, int64_t rows, bool training) {
  float* dlogits = training ? const_cast<float*>(this->dlogits()) : nullptr;
  backend().cross_entropy(logits_.f32(), targets, dlogits, rows, classes_, 1.f / static_cast<float>(rows));
}

}  // namespace subdp
