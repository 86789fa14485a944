// Softmax cross-entropy head, float32 or (language models under precision = "bf16") bf16.
#include "models/classifier_head.h"

#include <algorithm>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/layers/flops.h"

namespace subdp {

CrossEntropyHead::CrossEntropyHead(int64_t max_rows, int classes)
    : logits_(Tensor::empty({max_rows, classes}, MemCategory::activations)), classes_(classes) {}

CrossEntropyHead::CrossEntropyHead(int64_t max_rows, int classes, int64_t width) : classes_(classes), width_(width) {
  const bool half = backend().precision() == Precision::bf16;
  logits_ = Tensor::empty({max_rows, classes}, MemCategory::activations, half ? DType::bf16 : DType::f32);
  if (!half) return;
  x16_ = Tensor::empty({max_rows, width}, MemCategory::workspace, DType::bf16);
  w16_ = Tensor::empty({int64_t{classes}, width}, MemCategory::workspace, DType::bf16);
}

float* CrossEntropyHead::logits() const {
  SUBDP_CHECK(!bf16(), "internal: the float32 logits of a bf16 head were asked for");
  return logits_.f32();
}

const float* CrossEntropyHead::dlogits() const {
  SUBDP_CHECK(!bf16(), "internal: the float32 dlogits of a bf16 head were asked for");
  return static_cast<const float*>(dlogits_raw());
}

void CrossEntropyHead::keep_logits() {
  if (!dlogits_.defined()) dlogits_ = Tensor::empty(logits_.shape(), MemCategory::activations, logits_.dtype());
}

void CrossEntropyHead::project(const float* x, const float* w, int64_t rows) {
  SUBDP_CHECK(width_ > 0, "internal: project() on a classifier's head");
  const int M = static_cast<int>(rows), V = classes_, C = static_cast<int>(width_);
  if (bf16()) {
    backend().to_bf16(x, x16_.raw(), rows * width_);
    backend().to_bf16(w, w16_.raw(), int64_t{V} * width_);
    backend().gemm_bf16(false, true, M, V, C, 1.f, x16_.raw(), C, w16_.raw(), C, 0.f, logits_.raw(), V, true);
  } else {
    backend().sgemm(false, true, M, V, C, 1.f, x, C, w, C, 0.f, logits_.f32(), V);
  }
  FlopCounter::add_gemm(rows, V, width_);
}

void CrossEntropyHead::project_backward(const float* x, const float* w, float* dw, float* dx, int64_t rows) const {
  const int M = static_cast<int>(rows), V = classes_, C = static_cast<int>(width_);
  const void* dl = dlogits_raw();
  if (dw) {  // dw (V, C) += dlogits^T (V, rows) . x (rows, C)
    if (bf16())
      backend().gemm_bf16(true, false, V, C, M, 1.f, dl, V, x16_.raw(), C, 1.f, dw, C, false);
    else
      backend().sgemm(true, false, V, C, M, 1.f, static_cast<const float*>(dl), V, x, C, 1.f, dw, C);
    FlopCounter::add_gemm(V, width_, rows);
  }
  // dx (rows, C) = dlogits (rows, V) . w (V, C)
  if (bf16())
    backend().gemm_bf16(false, false, M, C, V, 1.f, dl, V, w16_.raw(), C, 0.f, dx, C, false);
  else
    backend().sgemm(false, false, M, C, V, 1.f, static_cast<const float*>(dl), V, w, C, 0.f, dx, C);
  FlopCounter::add_gemm(rows, width_, V);
}

void CrossEntropyHead::loss(const int32_t* targets, int64_t rows, bool training) {
  const float scale = 1.f / static_cast<float>(rows);
  if (bf16()) {
    backend().cross_entropy_bf16(logits_.raw(), targets, training ? dlogits_raw() : nullptr, rows, classes_, scale);
    return;
  }
  float* dlogits = training ? static_cast<float*>(dlogits_raw()) : nullptr;
  backend().cross_entropy(logits_.f32(), targets, dlogits, rows, classes_, scale);
}

std::vector<float> CrossEntropyHead::read_logits(int64_t first, int64_t rows) const {
  SUBDP_CHECK(first >= 0 && rows >= 0 && first + rows <= logits_.dim(0), "internal: logits rows [{}, {}) of {}", first,
              first + rows, logits_.dim(0));
  const int64_t n = rows * classes_, offset = first * classes_;
  std::vector<float> out(static_cast<size_t>(n));
  if (!bf16()) {
    backend().to_host(out.data(), logits_.f32() + offset, sizeof(float) * n);
    return out;
  }
  const Tensor wide = Tensor::empty({std::max<int64_t>(n, 1)}, MemCategory::activations);
  backend().bf16_to_f32(static_cast<const uint16_t*>(logits_.raw()) + offset, wide.f32(), n);
  backend().to_host(out.data(), wide.f32(), sizeof(float) * n);
  return out;
}

}  // namespace subdp
