// Softmax cross-entropy head.
#include "models/classifier_head.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

CrossEntropyHead::CrossEntropyHead(int64_t max_rows, int classes)
    : logits_(Tensor::empty({max_rows, classes}, MemCategory::activations)),
      dlogits_(Tensor::empty({max_rows, classes}, MemCategory::activations)),
      classes_(classes) {}

CrossEntropyHead::CrossEntropyHead(int64_t max_rows, int classes, const Tensor& dlogits_area)
    : logits_(Tensor::empty({max_rows, classes}, MemCategory::activations)),
      dlogits_(dlogits_area.slice0(0, max_rows * classes).view({max_rows, classes})),
      classes_(classes) {}

double CrossEntropyHead::loss(const int32_t* targets, int64_t rows, bool training, int64_t* correct) {
  // dlogits doubles as the probability buffer: softmax is written there, then shifted.
  float* probs = dlogits_.f32();
  double loss = backend().cross_entropy_forward(logits_.f32(), targets, probs, rows, classes_, correct);
  if (training) backend().cross_entropy_backward(probs, targets, probs, rows, classes_, 1.f / rows);
  return loss;
}

}  // namespace subdp
