// One batch of examples in backend memory, with its host staging.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"

namespace subdp {

/// One batch: inputs (images (N, C, H, W) float32, or tokens (B, T) int32) and integer
/// targets ((N) classes or (B, T) next tokens), in backend memory. Data sources fill the host
/// staging tensors and call upload(); where the backend's memory is the host's, the staging
/// tensors are x and y themselves and nothing is copied.
struct Batch {
  Tensor x;
  Tensor y;
  Tensor x_host;  // host staging for x (x itself on a host backend; undefined: x is filled directly)
  Tensor y_host;
  int64_t n = 0;  // examples (N, or B for token batches)

  /// x and y of these shapes and dtypes (activations), with host staging (accounted as
  /// activations) when backend memory is not the host's.
  static Batch allocate(const Shape& x_shape, DType x_dtype, const Shape& y_shape, DType y_dtype);
  /// Copies the first n examples of the staging tensors into x and y.
  void upload() const;
};

}  // namespace subdp
