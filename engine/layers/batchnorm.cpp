// BatchNorm2d layer through the backend.
#include "engine/layers/batchnorm.h"

#include "engine/core/backend.h"

#include <algorithm>
#include <vector>

namespace subdp {

BatchNorm2d::BatchNorm2d(ParamSet& ps, const std::string& name, int C, UnitRef units, int block, float gamma_init) {
  UnitRef u = units.layer >= 0 ? UnitRef{units.layer, 0, 1} : UnitRef{};
  gamma = &ps.add(name + ".weight", {C}, {InitSpec::constant, gamma_init}, u, block);
  beta = &ps.add(name + ".bias", {C}, {InitSpec::constant, 0.f}, u, block);
  running_mean = &ps.add(name + ".running_mean", {C}, {InitSpec::constant, 0.f}, u, block, false);
  running_var = &ps.add(name + ".running_var", {C}, {InitSpec::constant, 1.f}, u, block, false);
  allocate_stats();
}

void BatchNorm2d::allocate_stats() {
  mean = Tensor::zeros({channels()}, MemCategory::activations);
  rstd = Tensor::zeros({channels()}, MemCategory::activations);
}

void BatchNorm2d::forward(const float* x, float* y, int N, int HW, bool training, bool relu) {
  backend().batchnorm_forward(x, gamma->value.f32(), beta->value.f32(), y, mean.f32(), rstd.f32(),
                              running_mean->value.f32(), running_var->value.f32(), N, channels(), HW, training,
                              momentum, eps, relu);
}

void BatchNorm2d::recompute(const float* x, float* y, int N, int HW, bool relu) {
  // The kernel updates running statistics in training mode: it updates copies here. They
  // are C floats each; the data pass is the forward's.
  const std::vector<float> mean_saved = host_values(running_mean->value);
  const std::vector<float> var_saved = host_values(running_var->value);
  forward(x, y, N, HW, /*training=*/true, relu);
  set_values(running_mean->value, mean_saved);
  set_values(running_var->value, var_saved);
}

void BatchNorm2d::backward(const float* x, const float* dy, float* dx, int N, int HW) const {
  const int gc = gamma->grad.defined() ? static_cast<int>(gamma->grad_extent()) : 0;
  backend().batchnorm_backward(x, gamma->value.f32(), mean.f32(), rstd.f32(), dy, dx, gc ? gamma->grad.f32() : nullptr,
                               gc ? beta->grad.f32() : nullptr, N, channels(), HW, gc);
}

}  // namespace subdp
