// BatchNorm2d layer: per-channel normalisation of (N, C, H, W) with learnable gamma, beta
// and running statistics (buffers) for evaluation, as torch.nn.BatchNorm2d (eps 1e-5,
// momentum 0.1).
#pragma once
#include <string>

#include "engine/subnet/param.h"

namespace subdp {

class BatchNorm2d {
 public:
  /// units: channel units (axis 0 of every per-channel tensor), if maskable. gamma starts at
  /// gamma_init (1 as torch; 0 for a zero-initialised residual branch).
  BatchNorm2d(ParamSet& ps, const std::string& name, int channels, UnitRef units = {}, int block = -1,
              float gamma_init = 1.f);
  int channels() const { return static_cast<int>(gamma->local_shape.at(0)); }
  /// Allocates the per-channel batch statistics kept for backward (activations).
  void allocate_stats();
  /// y (N, C, HW) from x; training uses batch statistics and updates running stats. relu:
  /// y = max(0, BN(x)) in the same pass (Backend::batchnorm_forward with relu).
  void forward(const float* x, float* y, int N, int HW, bool training, bool relu = false);
  /// The training forward again on the same x (activation recompute): the same batch
  /// statistics and output bit for bit, the running statistics left as they are.
  void recompute(const float* x, float* y, int N, int HW, bool relu = false);
  /// dx (N, C, HW) written; dgamma/dbeta accumulated for the kept prefix.
  void backward(const float* x, const float* dy, float* dx, int N, int HW) const;

  Param* gamma = nullptr;
  Param* beta = nullptr;
  Param* running_mean = nullptr;
  Param* running_var = nullptr;
  Tensor mean, rstd;  // (C) batch statistics of the last training forward
  float eps = 1e-5f, momentum = 0.1f;
};

}  // namespace subdp
