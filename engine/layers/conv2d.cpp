// Conv2d layer through the backend (the CPU backend picks the convolution path per shape).
#include "engine/layers/conv2d.h"

#include <cmath>

#include "engine/core/backend.h"
#include "engine/layers/flops.h"

namespace subdp {

Conv2d::Conv2d(ParamSet& ps, const std::string& name, int cin_, int cout_, int k_, int stride_, int pad_,
               UnitRef out_units, UnitRef in_units, int block)
    : k(k_), stride(stride_), pad(pad_) {
  // torch default: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const InitSpec init{InitSpec::uniform, 1.f / std::sqrt(static_cast<float>(cin_ * k * k))};
  UnitRef unit = out_units.layer >= 0 ? UnitRef{out_units.layer, 0, 1} : UnitRef{in_units.layer, 1, 1};
  weight = &ps.add(name + ".weight", {cout_, cin_, k, k}, init, unit, block);
}

ConvShape Conv2d::shape(int N, int H, int W) const {
  ConvShape s;
  s.N = N;
  s.Cin = cin();
  s.H = H;
  s.W = W;
  s.Cout = cout();
  s.k = k;
  s.stride = stride;
  s.pad = pad;
  return s;
}

int64_t Conv2d::workspace_floats(int N, int H, int W) const {
  return backend().conv2d_workspace_floats(shape(N, H, W));
}

void Conv2d::forward(const float* x, float* y, int N, int H, int W, float* ws) const {
  const ConvShape s = shape(N, H, W);
  backend().conv2d_forward(s, x, weight->value.f32(), y, ws);
  FlopCounter::add_gemm(s.Cout, static_cast<int64_t>(N) * s.Ho() * s.Wo(), static_cast<int64_t>(s.Cin) * k * k);
}

void Conv2d::backward(const float* x, const float* dy, float* dx, int N, int H, int W, float* ws,
                      bool accumulate_dx) const {
  const ConvShape s = shape(N, H, W);
  const int64_t P = static_cast<int64_t>(N) * s.Ho() * s.Wo();
  float* dw = nullptr;
  int gco = 0, gci = 0;
  if (weight->grad.defined()) {
    dw = weight->grad.f32();
    gco = static_cast<int>(weight->grad.dim(0));
    gci = static_cast<int>(weight->grad.dim(1));
    FlopCounter::add_gemm(gco, static_cast<int64_t>(gci) * k * k, P);
  }
  backend().conv2d_backward(s, x, weight->value.f32(), dy, dx, dw, gco, gci, ws, accumulate_dx);
  if (dx) FlopCounter::add_gemm(static_cast<int64_t>(s.Cin) * k * k, P, s.Cout);
}

}  // namespace subdp
