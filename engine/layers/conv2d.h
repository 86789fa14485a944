// Conv2d layer (no bias): y (N, Cout, Ho, Wo) = conv(x (N, Cin, H, W), W (Cout, Cin, k, k)).
#pragma once
#include <string>

#include "kernels/shapes.h"
#include "engine/subnet/param.h"

namespace subdp {

/// Square-kernel 2-D convolution as torch.nn.Conv2d(bias=False). Output channels (axis 0)
/// or input channels (axis 1) may be maskable units.
class Conv2d {
 public:
  /// Weight `<name>.weight` (cout, cin, k, k), initialised U(-1/sqrt(cin k k), 1/sqrt(cin k k))
  /// as torch's default (kaiming_uniform, a = sqrt(5)); its units along out_units' axis 0 or,
  /// when out_units names no layer, in_units' axis 1 (out_units wins if both do).
  Conv2d(ParamSet& ps, const std::string& name, int cin, int cout, int k, int stride, int pad, UnitRef out_units = {},
         UnitRef in_units = {}, int block = -1);

  int cin() const { return static_cast<int>(weight->local_shape.at(1)); }
  int cout() const { return static_cast<int>(weight->local_shape.at(0)); }
  /// Geometry for an input of (N, cin, H, W).
  ConvShape shape(int N, int H, int W) const;
  /// Workspace floats needed for inputs of (N, cin, H, W).
  int64_t workspace_floats(int N, int H, int W) const;

  /// y (N, Cout, Ho, Wo) from x (N, Cin, H, W); ws holds workspace_floats() floats.
  void forward(const float* x, float* y, int N, int H, int W, float* ws) const;
  /// From dy (N, Cout, Ho, Wo): accumulates dW (kept prefix); writes dx (N, Cin, H, W) when
  /// non-null (adds to it with accumulate_dx). ws holds workspace_floats() floats.
  void backward(const float* x, const float* dy, float* dx, int N, int H, int W, float* ws,
                bool accumulate_dx = false) const;

  Param* weight = nullptr;
  int k, stride, pad;
};

}  // namespace subdp
