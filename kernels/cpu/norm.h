// BatchNorm2d and LayerNorm kernels (float32, OpenMP over channels / rows).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// BatchNorm2d forward on x (N, C, HW).
/// training: batch statistics over (N, HW); writes mean/rstd (C) for the backward pass and
/// updates running_mean/running_var (C) with `momentum` (unbiased variance, as PyTorch).
/// eval: uses running statistics. y = gamma * (x - mean) * rstd + beta. eps as in PyTorch (1e-5).
/// relu: y = max(0, that) in the same pass, bit for bit what relu_forward after it gives
/// (one pass over y fewer for the ResNet's BatchNorm + ReLU pairs).
void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                       float eps, bool relu = false);

/// BatchNorm2d backward (training statistics). dx (N, C, HW) is written; dgamma/dbeta are
/// accumulated (+=) for the first `grad_channels` channels only (backward masking).
void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels);

/// LayerNorm over the last dimension: x (rows, C) -> y; writes mean/rstd (rows).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps);

/// LayerNorm output y (rows, C) of x from the statistics mean / rstd (rows) that
/// layernorm_forward wrote for the same x: bit for bit the forward's y (recomputation in
/// backward instead of storing y).
void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                     float* y, int64_t rows, int C);

/// LayerNorm backward: dx (rows, C) accumulated (+=, residual stream); dgamma/dbeta (C)
/// accumulated when non-null.
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int64_t rows, int C);

/// RMSNorm (Zhang & Sennrich 2019) over the last dimension, as torch.nn.RMSNorm:
/// y (rows, C) = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps); writes rstd (rows).
void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C, float eps);

/// RMSNorm output of x from the rstd (rows) that rmsnorm_forward wrote for the same x: bit for
/// bit the forward's y.
void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C);

/// RMSNorm backward: dx (rows, C) accumulated (+=, residual stream),
/// dx = rstd (gamma dy - xhat mean(gamma dy xhat)), xhat = x rstd; dgamma (C) accumulated
/// (+= sum over rows of dy xhat, rows in order) when non-null.
void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx, float* dgamma,
                      int64_t rows, int C);

}  // namespace subdp::cpu
