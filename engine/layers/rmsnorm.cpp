// RMSNorm layer through the backend.
#include "engine/layers/rmsnorm.h"

#include "engine/core/backend.h"

namespace subdp {

RMSNorm::RMSNorm(ParamSet& ps, const std::string& name, int C, int block) {
  gamma = &ps.add(name + ".weight", {C}, {InitSpec::constant, 1.f}, {}, block);
}

void RMSNorm::allocate_stats(int64_t rows) { rstd = Tensor::zeros({rows}, MemCategory::activations); }

void RMSNorm::bind_stats(const Tensor& rstd_area, int64_t rows) { rstd = rstd_area.slice0(0, rows); }

void RMSNorm::forward(const float* x, float* y, int64_t rows) {
  backend().rmsnorm_forward(x, gamma->value.f32(), y, rstd.f32(), rows, channels(), eps);
}

void RMSNorm::recompute(const float* x, float* y, int64_t rows) const {
  backend().rmsnorm_apply(x, gamma->value.f32(), rstd.f32(), y, rows, channels());
}

void RMSNorm::backward(const float* x, const float* dy, float* dx, int64_t rows) const {
  backend().rmsnorm_backward(x, gamma->value.f32(), rstd.f32(), dy, dx,
                             gamma->grad.defined() ? gamma->grad.f32() : nullptr, rows, channels());
}

}  // namespace subdp
