// Device kernels of the CUDA backend that have no CPU twin in kernels.h (backend_kernels.cu).
// Device pointers, enqueued on `stream`, nothing synchronises.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace subdp::cuda {

/// The step's counters in device memory, as engine/core/backend.h's StepCounters (the CUDA
/// backend's take_counters copies them to the host in one transfer).
struct DeviceCounters {
  double loss_sum;
  unsigned long long loss_rows, correct, bad_ids, nonfinite, nonfinite_writes;
  double flags[3];  // Backend::set_step_flags
};

/// c->flags from c's counters (Backend::set_step_flags), one thread.
void set_step_flags(DeviceCounters* c, double stop, cudaStream_t stream);

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
/// n floats at x (device), one span of count_nonfinite_spans.
struct CountSpan {
  const float* x;
  int64_t n;
};
/// *out += number of non-finite values in the `count` spans of the host array `spans` (null x
/// or n <= 0 count nothing),
/// in one launch per kNonfiniteSpansPerLaunch spans: the spans travel as the kernel's argument,
/// so nothing is uploaded or allocated and nothing synchronises (integer atomics: the same
/// total in any order).
void count_nonfinite_spans(const CountSpan* spans, int64_t count, unsigned long long* out, cudaStream_t stream);
/// counters->loss_sum += the rows' losses row_loss (rows) summed in double, in a fixed order
/// (each of one block's threads a strided share, then a fixed tree: the same bits every run);
/// loss_rows += rows; correct += the sum of row_hit (rows, 0 or 1).
void add_row_losses(const float* row_loss, const int32_t* row_hit, int64_t rows, DeviceCounters* counters,
                    cudaStream_t stream);

}  // namespace subdp::cuda
