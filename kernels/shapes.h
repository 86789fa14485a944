// Geometry structs shared by every backend's kernels and by the layers that call them
// (backend-neutral: no device, no allocation), and the run an optimizer update walks.
#pragma once
#include <cstdint>

namespace subdp {

/// Geometry of one conv2d call: input (N, Cin, H, W), weight (Cout, Cin, k, k), square
/// kernel, stride and zero padding as in torch.nn.Conv2d; output (N, Cout, Ho, Wo).
struct ConvShape {
  int N = 0, Cin = 0, H = 0, W = 0, Cout = 0, k = 3, stride = 1, pad = 1;
  int Ho() const { return (H + 2 * pad - k) / stride + 1; }
  int Wo() const { return (W + 2 * pad - k) / stride + 1; }
};

/// Geometry of one attention call: B sequences of T positions, H heads of hd channels.
struct AttentionShape {
  int B = 0, T = 0, H = 0, hd = 0;
  int64_t width() const { return static_cast<int64_t>(H) * hd; }  // C of y, a third of qkv
};

/// One contiguous run of an optimizer update, n floats each, in backend memory: values w,
/// gradient g, and the state: s0 (SGD's momentum buffer, null without momentum; AdamW's
/// first moment m) and s1 (AdamW's second moment v; null for SGD).
struct UpdateRun {
  float* w;
  const float* g;
  float* s0;
  float* s1;
  int64_t n;
};

}  // namespace subdp
