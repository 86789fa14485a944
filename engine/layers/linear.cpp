// Linear layer forward/backward through the backend GEMM.
#include "engine/layers/linear.h"

#include <cmath>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/layers/flops.h"

namespace subdp {

Linear::Linear(ParamSet& ps, const std::string& name, int64_t in, int64_t out, bool has_bias, UnitRef out_units,
               UnitRef in_units, int block, std::optional<InitSpec> weight_init, std::optional<InitSpec> bias_init) {
  const float bound = 1.f / std::sqrt(static_cast<float>(in));
  const InitSpec def{InitSpec::uniform, bound};
  UnitRef wunit = out_units.layer >= 0 ? UnitRef{out_units.layer, 0, out_units.unit_size}
                                       : UnitRef{in_units.layer, 1, in_units.unit_size};
  weight = &ps.add(name + ".weight", {out, in}, weight_init.value_or(def), wunit, block);
  if (has_bias)
    bias = &ps.add(name + ".bias", {out}, bias_init.value_or(def),
                   out_units.layer >= 0 ? UnitRef{out_units.layer, 0, out_units.unit_size} : UnitRef{}, block);
}

void Linear::forward(const float* x, float* y, int64_t rows) const { forward_gelu(x, nullptr, y, rows); }

void Linear::forward_gelu(const float* x, float* pre, float* y, int64_t rows) const {
  // y (rows, O) = x (rows, I) . W^T (I, O) + b, then GELU when pre holds that
  backend().linear_forward(x, weight->value.f32(), bias ? bias->value.f32() : nullptr, y, pre, rows, in(), out());
  FlopCounter::add_gemm(rows, out(), in());
}

void Linear::backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t ldx, bool accumulate_dx,
                      const float* gelu_pre) const {
  const int64_t I = in(), O = out();
  if (weight->grad.defined()) {
    // Kept prefix only: dW[:go, :gi] (go, gi) += dy[:, :go]^T (go, rows) . x[:, :gi] (rows, gi)
    const int64_t go = weight->unit.axis == 0 ? weight->grad_extent() : O;
    const int64_t gi = weight->unit.axis == 1 ? weight->grad_extent() : I;
    backend().sgemm(true, false, go, gi, rows, 1.f, dy, O, x, ldx > 0 ? ldx : I, 1.f, weight->grad.f32(), gi);
    FlopCounter::add_gemm(go, gi, rows);
  }
  if (bias && bias->grad.defined()) backend().bias_grad_rows(dy, bias->grad.f32(), rows, bias->grad_extent(), O);
  if (!dx) return;
  FlopCounter::add_gemm(rows, I, O);
  if (gelu_pre) {  // dx (rows, I) = (dy (rows, O) . W (O, I)) * gelu'(gelu_pre)
    SUBDP_ASSERT(!accumulate_dx);
    backend().linear_dx_dgelu(dy, weight->value.f32(), gelu_pre, dx, rows, I, O);
    return;
  }
  // dx (rows, I) (+)= dy (rows, O) . W (O, I)
  backend().sgemm(false, false, rows, I, O, 1.f, dy, O, weight->value.f32(), I, accumulate_dx ? 1.f : 0.f, dx, I);
}

}  // namespace subdp
