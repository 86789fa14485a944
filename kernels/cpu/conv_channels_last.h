// Convolutions with many channels and a kernel wider than 1 that Winograd does not serve
// (the ResNet's downsampling 3x3 convolutions) through a channels-last im2col: each sample
// is transposed to (H * W, Cin), so a row of the im2col matrix is k * k whole channel
// vectors, and the GEMMs have channels, not pixels, as their short side. Layout NCHW at the interface, float32; same
// contracts as cpu::conv2d_*.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"

namespace subdp::cpu {

/// True when the channels-last path serves shape s: a kernel wider than 1, not a Winograd
/// shape, and at least 8 input and 8 output channels (below that the channel vectors are too
/// short to pay for the transposes). 1x1 convolutions stay on the NCHW path: a strided one
/// reads a quarter of the pixels, which the channels-last path would transpose in full (the
/// ResNet's 32-to-64 projection took 1.5x as long), and an unstrided one is a single GEMM there.
bool channels_last_applies(const ConvShape& s);

/// Floats of workspace conv2d_channels_last_forward / _backward need: the permuted filters
/// (Cout * k * k * Cin), then per OpenMP thread one channels-last sample plus Cin zeros, the
/// im2col rows and the channels-last output (or output gradient) of a chunk of samples, and a
/// weight-gradient partial (Cout * k * k * Cin).
int64_t conv2d_channels_last_workspace_floats(const ConvShape& s);

/// y (N, Cout, Ho, Wo) = conv(x (N, Cin, H, W), w (Cout, Cin, k, k)): per chunk of samples
/// y^T (rows, Cout) = cols (rows, k*k*Cin) x Wp^T, Wp (Cout, k*k*Cin) the filters permuted to
/// (Cout, kh, kw, Cin), rows = samples x Ho*Wo. Requires channels_last_applies(s).
void conv2d_channels_last_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws);

/// Backward of conv2d_channels_last_forward: dx (N, Cin, H, W) written when non-null (added
/// to with accumulate_dx) from dcols = dy^T x Wp; dw, when non-null, accumulates (+=) the
/// gradient of w[:dw_cout, :dw_cin] into a compact (dw_cout, dw_cin, k, k) array from
/// dWp += dy x cols, per-thread partials summed in thread order (deterministic for a fixed
/// thread count). y and dx do not depend on the thread count (each chunk of samples is one
/// thread's, whatever the count).
void conv2d_channels_last_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                                   float* dw, int dw_cout, int dw_cin, float* ws, bool accumulate_dx = false);

}  // namespace subdp::cpu
