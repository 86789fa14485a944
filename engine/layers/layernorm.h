// LayerNorm over the last dimension C of (rows, C), as torch.nn.LayerNorm (eps 1e-5).
#pragma once
#include <string>

#include "engine/subnet/param.h"

namespace subdp {

class LayerNorm {
 public:
  /// gamma `<name>.weight` (C) = 1 and beta `<name>.bias` (C) = 0, as torch.nn.LayerNorm.
  LayerNorm(ParamSet& ps, const std::string& name, int C, int block = -1);
  int channels() const { return static_cast<int>(gamma->local_shape.at(0)); }
  /// Allocates (rows) mean / rstd kept for backward (activations).
  void allocate_stats(int64_t rows);
  /// Keeps the statistics in the first rows floats of `mean_area` / `rstd_area` instead
  /// (storage shared with other layers, e.g. under activation recompute).
  void bind_stats(const Tensor& mean_area, const Tensor& rstd_area, int64_t rows);
  /// y (rows, C) = LN(x).
  void forward(const float* x, float* y, int64_t rows);
  /// y (rows, C) = LN(x) again from the statistics of the last forward on the same x (its
  /// bits exactly): lets a model recompute the output in backward instead of storing it.
  void recompute(const float* x, float* y, int64_t rows) const;
  /// dx (rows, C) accumulated (+=); dgamma, dbeta accumulated when held.
  void backward(const float* x, const float* dy, float* dx, int64_t rows) const;

  Param* gamma = nullptr;
  Param* beta = nullptr;
  Tensor mean, rstd;
  float eps = 1e-5f;
};

}  // namespace subdp
