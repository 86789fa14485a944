// 3x3 stride-1 pad-1 convolutions by Winograd's minimal filtering F(m x m, 3x3) (Lavin and
// Gray 2016, "Fast Algorithms for Convolutional Neural Networks", eq. 8): an m x m output
// tile costs (m + 2)^2 multiplies per (input, output) channel pair instead of 9 m^2 (m = 4:
// 36 instead of 144; m = 2: 16 instead of 36), as (m + 2)^2 GEMMs over the tiles of a chunk
// of samples. Forward, input gradient and weight gradient all run in the transformed domain.
// Layout NCHW, float32; same contracts as cpu::conv2d_*.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"

namespace subdp::cpu {

/// True when the Winograd path serves shape s: k = 3, stride 1, pad 1, and at least 8 input
/// and 8 output channels (below that the 16 or 36 small GEMMs lose to one im2col GEMM).
bool winograd_applies(const ConvShape& s);

/// Largest output tile side the Winograd path may use: 2 (the default) or 4
/// (config key train.winograd_tile). F(4x4, 3x3) does 36 instead of 64 multiplies per 16
/// outputs, but rounds less well: on the reference ResNet at batch 8 its gradients are within
/// 1.1e-3 (relative, max norm) of a float64 reference, F(2x2)'s within 3e-6. Process-wide;
/// set it before sizing workspaces. Throws std::invalid_argument for any other value.
void set_winograd_max_tile(int m);

/// The output tile side m the Winograd path uses for shape s: 4 (F(4x4, 3x3)) when allowed
/// (set_winograd_max_tile(4)), the image is at least 4 x 4 and the transformed filters
/// (36 * Cout * Cin floats) take at most 1 MiB, else 2 (F(2x2, 3x3)). F(4x4) needs more workspace than F(2x2) for the
/// same layer (up to 1.8x), but no more than 1 MiB per filter slot and per tile buffer, what F(2x2) needs for a layer
/// of about 90 channels or more (the ResNet's 128-channel stage), so where such a layer is present the model's
/// workspace peak stays where F(2x2) put it.
int winograd_tile(const ConvShape& s);

/// Floats of workspace winograd_forward / winograd_backward need: per OpenMP thread two
/// transformed-tile buffers, one sample channels-last and a filter-sized slot
/// ((m + 2)^2 * Cout * Cin) that holds the transformed weights (slot 0) and later the
/// weight-gradient partials.
int64_t winograd_workspace_floats(const ConvShape& s);

/// y (N, Cout, H, W) = conv(x (N, Cin, H, W), w (Cout, Cin, 3, 3)), pad 1. Requires
/// winograd_applies(s).
void winograd_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws);

/// Backward of winograd_forward: dx (N, Cin, H, W) written when non-null (added to with
/// accumulate_dx); dw, when non-null,
/// accumulates (+=) the gradient of w[:dw_cout, :dw_cin] into a compact (dw_cout, dw_cin, 3, 3)
/// array (backward masking). Weight-gradient partials are summed in thread order:
/// deterministic for a fixed thread count.
void winograd_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int dw_cout, int dw_cin, float* ws, bool accumulate_dx = false);

}  // namespace subdp::cpu
