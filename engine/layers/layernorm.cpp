// LayerNorm layer through the backend.
#include "engine/layers/layernorm.h"

#include "engine/core/backend.h"

namespace subdp {

LayerNorm::LayerNorm(ParamSet& ps, const std::string& name, int C, int block) {
  gamma = &ps.add(name + ".weight", {C}, {InitSpec::constant, 1.f}, {}, block);
  beta = &ps.add(name + ".bias", {C}, {InitSpec::constant, 0.f}, {}, block);
}

void LayerNorm::allocate_stats(int64_t rows) {
  mean = Tensor::zeros({rows}, MemCategory::activations);
  rstd = Tensor::zeros({rows}, MemCategory::activations);
}

void LayerNorm::bind_stats(const Tensor& mean_area, const Tensor& rstd_area, int64_t rows) {
  mean = mean_area.slice0(0, rows);
  rstd = rstd_area.slice0(0, rows);
}

void LayerNorm::forward(const float* x, float* y, int64_t rows) {
  backend().layernorm_forward(x, gamma->value.f32(), beta->value.f32(), y, mean.f32(), rstd.f32(), rows, channels(),
                              eps);
}

void LayerNorm::recompute(const float* x, float* y, int64_t rows) const {
  backend().layernorm_apply(x, gamma->value.f32(), beta->value.f32(), mean.f32(), rstd.f32(), y, rows, channels());
}

void LayerNorm::backward(const float* x, const float* dy, float* dx, int64_t rows) const {
  const bool held = gamma->grad.defined();
  backend().layernorm_backward(x, gamma->value.f32(), mean.f32(), rstd.f32(), dy, dx,
                               held ? gamma->grad.f32() : nullptr, held ? beta->grad.f32() : nullptr, rows, channels());
}

}  // namespace subdp
