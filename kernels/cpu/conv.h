// conv2d on the CPU: Winograd F(4x4, 3x3) or F(2x2, 3x3) for 3x3 stride-1 pad-1 convolutions
// with enough channels (kernels/cpu/winograd.h), a channels-last im2col + GEMM for the other convolutions
// with enough channels (kernels/cpu/conv_channels_last.h), im2col + GEMM otherwise (samples
// spread over OpenMP threads, one single-threaded GEMM per sample). Layout NCHW, float32.
#pragma once
#include <cstdint>

#include "kernels/shapes.h"

namespace subdp::cpu {

using ::subdp::ConvShape;

/// Floats of workspace conv2d_forward / conv2d_backward need (the path's own figure).
int64_t conv2d_workspace_floats(const ConvShape& s);

/// y (N, Cout, Ho, Wo) = conv(x (N, Cin, H, W), w (Cout, Cin, k, k)). No bias.
void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws);

/// Backward of conv2d_forward.
/// dx (N, Cin, H, W) is written when non-null, or added to (+=) with accumulate_dx (a
/// residual block sums its branch's and its shortcut's input gradients in one buffer).
/// dw, when non-null, accumulates (+=) the gradient of the prefix w[:dw_cout, :dw_cin] into
/// a compact (dw_cout, dw_cin, k, k) array: backward masking computes weight gradients for
/// kept channels only.
void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int dw_cout, int dw_cin, float* ws, bool accumulate_dx = false);

/// The NCHW im2col + GEMM path for any shape (what conv2d_* use when neither Winograd nor the
/// channels-last path applies: the stem's single input channel, 1x1 convolutions).
/// Workspace: per OpenMP thread, one sample's im2col columns and a weight-gradient partial.
int64_t conv2d_im2col_workspace_floats(const ConvShape& s);
void conv2d_im2col_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws);
void conv2d_im2col_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                            int dw_cout, int dw_cin, float* ws, bool accumulate_dx = false);

/// Global average pool: x (N, C, HW) -> y (N, C).
void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW);
/// dx (N, C, HW) = dy (N, C) / HW broadcast.
void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW);

/// 2-D max pooling, square window k, stride s, no padding: x (N, C, H, W) -> y (N, C, Ho, Wo),
/// Ho = (H - k) / s + 1, Wo = (W - k) / s + 1; argmax (N, C, Ho, Wo) records each maximum's
/// index within its (H, W) plane (i * W + j) for the backward pass.
void max_pool_forward(const float* x, float* y, int32_t* argmax, int N, int C, int H, int W, int k, int s);
/// dx (N, C, H, W) = scatter of dy through argmax (dx zeroed first).
void max_pool_backward(const float* dy, const int32_t* argmax, float* dx, int N, int C, int H, int W, int Ho, int Wo);

}  // namespace subdp::cpu
