// Device kernels of the CUDA backend that have no CPU twin in kernels.h (backend_kernels.cu).
// Device pointers, enqueued on `stream`, nothing synchronises.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace subdp::cuda {

/// x (n) = value.
void fill(float* x, float value, int64_t n, cudaStream_t stream);
/// y (n) = x * alpha.
void scale_copy(const float* x, float alpha, float* y, int64_t n, cudaStream_t stream);
/// y[r * ldy + c] = x[r * ldx + c] * alpha, r < rows, c < cols (strides in floats).
void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows, int64_t cols,
                     cudaStream_t stream);
/// y (rows, C) = (x - mean[r]) * rstd[r] * gamma + beta: LayerNorm from saved statistics.
void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                     float* y, int64_t rows, int C, cudaStream_t stream);
/// *count (one device counter) += number of ids outside [0, num).
void count_out_of_range(const int32_t* ids, int64_t rows, int64_t num, unsigned long long* count, cudaStream_t stream);
/// *count += number of non-finite values of x (n); x may be null (nothing counted).
void count_nonfinite(const float* x, int64_t n, unsigned long long* count, cudaStream_t stream);

}  // namespace subdp::cuda
