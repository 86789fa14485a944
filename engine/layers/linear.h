// Linear layer: y (rows, out) = x (rows, in) W^T + b, W (out, in), b (out).
#pragma once
#include <optional>
#include <string>

#include "engine/subnet/param.h"

namespace subdp {

/// Fully connected layer. Output units (rows of W, entries of b) or input units (columns
/// of W) may be maskable; the local sizes come from the mask (forward masking: compact).
class Linear {
 public:
  /// in_units/out_units: unit structure of W's columns / rows (at most one maskable).
  /// Init as torch.nn.Linear (U(-1/sqrt(in), 1/sqrt(in))) unless `init` is given.
  Linear(ParamSet& ps, const std::string& name, int64_t in, int64_t out, bool bias, UnitRef out_units = {},
         UnitRef in_units = {}, int block = -1, std::optional<InitSpec> weight_init = std::nullopt,
         std::optional<InitSpec> bias_init = std::nullopt);

  int64_t in() const { return weight->local_shape.at(1); }
  int64_t out() const { return weight->local_shape.at(0); }

  /// y (rows, out) = x (rows, in) W^T + b.
  void forward(const float* x, float* y, int64_t rows) const;
  /// pre (rows, out) = x W^T + b and y (rows, out) = gelu(pre) (tanh form): on CUDA one GEMM
  /// with cuBLASLt's GELU epilogue (Backend::linear_forward).
  void forward_gelu(const float* x, float* pre, float* y, int64_t rows) const;
  /// Accumulates dW (kept prefix) and db from dy (rows, out) and x (rows, in);
  /// writes dx (rows, in) when dx != nullptr. x is read only for dW, and only its kept
  /// prefix columns: ldx (default in()) lets a caller store just those (backward masking).
  /// dW is formed before dx is written, so dx may be the memory x is in. accumulate_dx: dx +=
  /// instead of = (two layers reading the same input, as SwiGLU's gate and up projections).
  /// gelu_pre (rows, in), when not null: this layer's input was gelu(gelu_pre), and dx is the
  /// gradient of gelu_pre instead (on CUDA one GEMM with cuBLASLt's DGELU epilogue); not with
  /// accumulate_dx.
  void backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t ldx = 0, bool accumulate_dx = false,
                const float* gelu_pre = nullptr) const;

  Param* weight = nullptr;
  Param* bias = nullptr;
};

}  // namespace subdp
