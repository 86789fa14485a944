// RMSNorm over the last dimension C of (rows, C), as torch.nn.RMSNorm (Zhang & Sennrich
// 2019): y = x / sqrt(mean(x^2) + eps) * gamma, no centring, no bias. LLaMA's norm.
#pragma once
#include <string>

#include "engine/subnet/param.h"

namespace subdp {

class RMSNorm {
 public:
  /// gamma (C) starts at 1; named <name>.weight.
  RMSNorm(ParamSet& ps, const std::string& name, int C, int block = -1);
  int channels() const { return static_cast<int>(gamma->local_shape.at(0)); }
  /// Allocates the (rows) rstd kept for backward (activations).
  void allocate_stats(int64_t rows);
  /// Keeps rstd in the first rows floats of `rstd_area` instead (shared storage, recompute).
  void bind_stats(const Tensor& rstd_area, int64_t rows);
  /// y (rows, C) = RMSNorm(x); stores rstd.
  void forward(const float* x, float* y, int64_t rows);
  /// y again from the stored rstd of the last forward on the same x (its bits exactly).
  void recompute(const float* x, float* y, int64_t rows) const;
  /// dx (rows, C) accumulated (+=); dgamma accumulated when held.
  void backward(const float* x, const float* dy, float* dx, int64_t rows) const;

  Param* gamma = nullptr;
  Tensor rstd;
  float eps = 1e-5f;
};

}  // namespace subdp
