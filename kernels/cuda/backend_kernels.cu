// Kernels the CUDA backend (backend.cpp) needs beyond the CPU kernels' twins in kernels.h:
// fills, LayerNorm from saved statistics, counts of out-of-range ids and non-finite values
// (the host reads one integer instead of the data). Integer atomics only: every result is
// deterministic.
#include <algorithm>

#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/common.cuh"

namespace subdp::cuda {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kMaxBlocks;
using detail::kThreads;

namespace {

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void scale_copy_kernel(const float* x, float alpha, float* y, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = x[i] * alpha;
}

__global__ void scale_copy_rows_kernel(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows,
                                       int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const int64_t r = i / cols, c = i % cols;
    y[r * ldy + c] = x[r * ldx + c] * alpha;
  }
}

__global__ void layernorm_apply_kernel(const float* x, const float* gamma, const float* beta, const float* mean,
                                       const float* rstd, float* y, int64_t rows, int C) {
  const int64_t n = rows * C;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const int64_t r = i / C;
    const int c = static_cast<int>(i % C);
    y[i] = (x[i] - mean[r]) * rstd[r] * gamma[c] + beta[c];
  }
}

__global__ void count_out_of_range_kernel(const int32_t* ids, int64_t rows, int64_t num, unsigned long long* count) {
  for (int64_t i = grid_first(); i < rows; i += grid_stride())
    if (ids[i] < 0 || ids[i] >= num) atomicAdd(count, 1ull);
}

// count_nonfinite_spans' launch argument: up to kNonfiniteSpansPerLaunch spans (about 2.3 KB,
// under the 4 KB a kernel's parameters may take on every architecture), each cut into chunks
// of kNonfiniteChunk floats numbered from first_chunk[k]; first_chunk[count] is the total.
constexpr int kNonfiniteSpansPerLaunch = 96;
constexpr int64_t kNonfiniteChunk = 16 * kThreads;
struct NonfiniteBatch {
  const float* x[kNonfiniteSpansPerLaunch];
  int64_t n[kNonfiniteSpansPerLaunch];
  int64_t first_chunk[kNonfiniteSpansPerLaunch + 1];
  int count;
};

// Block b takes chunks b, b + gridDim.x, ...; a chunk's span is found by a scan of the
// (at most 96) chunk offsets, and its threads stride the chunk.
__global__ void count_nonfinite_batch_kernel(NonfiniteBatch batch, unsigned long long* count) {
  unsigned long long mine = 0;
  for (int64_t c = blockIdx.x; c < batch.first_chunk[batch.count]; c += gridDim.x) {
    int k = 0;
    while (batch.first_chunk[k + 1] <= c) ++k;
    const int64_t begin = (c - batch.first_chunk[k]) * kNonfiniteChunk;
    const int64_t end = begin + kNonfiniteChunk < batch.n[k] ? begin + kNonfiniteChunk : batch.n[k];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine += !isfinite(batch.x[k][i]);
  }
  mine = detail::warp_sum(mine);
  if ((threadIdx.x & 31) == 0 && mine != 0) atomicAdd(count, mine);
}

constexpr int kSumThreads = 256;

__global__ void add_row_losses_kernel(const float* row_loss, const int32_t* row_hit, int64_t rows,
                                      DeviceCounters* counters) {
  __shared__ double loss[kSumThreads];
  __shared__ unsigned long long hits[kSumThreads];
  const int t = threadIdx.x;
  double l = 0;
  unsigned long long h = 0;
  for (int64_t r = t; r < rows; r += kSumThreads) {
    l += row_loss[r];
    h += static_cast<unsigned long long>(row_hit[r]);
  }
  loss[t] = l;
  hits[t] = h;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      loss[t] += loss[t + half];
      hits[t] += hits[t + half];
    }
    __syncthreads();
  }
  if (t == 0) {
    counters->loss_sum += loss[0];
    counters->loss_rows += static_cast<unsigned long long>(rows);
    counters->correct += hits[0];
  }
}

__global__ void step_flags_kernel(DeviceCounters* c, double stop) {
  c->flags[0] = c->nonfinite > 0 || !isfinite(c->loss_sum) ? 1.0 : 0.0;
  c->flags[1] = stop;
  c->flags[2] = c->nonfinite_writes > 0 ? 1.0 : 0.0;
}

}  // namespace

void set_step_flags(DeviceCounters* c, double stop, cudaStream_t stream) {
  SUBDP_LAUNCH(1, 1, 0, stream, step_flags_kernel)(c, stop);
  CUDA_CHECK_LAUNCH();
}

void fill(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, stream, fill_kernel)(x, value, n);
  CUDA_CHECK_LAUNCH();
}

void scale_copy(const float* x, float alpha, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, stream, scale_copy_kernel)(x, alpha, y, n);
  CUDA_CHECK_LAUNCH();
}

void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  SUBDP_LAUNCH(blocks_for(rows * cols), kThreads, 0, stream, scale_copy_rows_kernel)(x, ldx, alpha, y, ldy, rows, cols);
  CUDA_CHECK_LAUNCH();
}

void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                     float* y, int64_t rows, int C, cudaStream_t stream) {
  if (rows * C <= 0) return;
  SUBDP_LAUNCH(blocks_for(rows * C), kThreads, 0, stream, layernorm_apply_kernel)
  (x, gamma, beta, mean, rstd, y, rows, C);
  CUDA_CHECK_LAUNCH();
}

void count_out_of_range(const int32_t* ids, int64_t rows, int64_t num, unsigned long long* count, cudaStream_t stream) {
  if (rows <= 0) return;
  SUBDP_LAUNCH(blocks_for(rows), kThreads, 0, stream, count_out_of_range_kernel)(ids, rows, num, count);
  CUDA_CHECK_LAUNCH();
}

void count_nonfinite_spans(const CountSpan* spans, int64_t count, unsigned long long* out, cudaStream_t stream) {
  for (int64_t first = 0; first < count;) {
    NonfiniteBatch batch{};
    for (; first < count && batch.count < kNonfiniteSpansPerLaunch; ++first) {
      const CountSpan& s = spans[first];
      if (s.x == nullptr || s.n <= 0) continue;
      batch.x[batch.count] = s.x;
      batch.n[batch.count] = s.n;
      batch.first_chunk[batch.count + 1] =
          batch.first_chunk[batch.count] + (s.n + kNonfiniteChunk - 1) / kNonfiniteChunk;
      ++batch.count;
    }
    if (batch.count == 0) continue;
    const int64_t chunks = batch.first_chunk[batch.count];
    SUBDP_LAUNCH(static_cast<int>(std::min(chunks, kMaxBlocks)), kThreads, 0, stream, count_nonfinite_batch_kernel)
    (batch, out);
    CUDA_CHECK_LAUNCH();
  }
}

void add_row_losses(const float* row_loss, const int32_t* row_hit, int64_t rows, DeviceCounters* counters,
                    cudaStream_t stream) {
  if (rows <= 0) return;
  SUBDP_LAUNCH(1, kSumThreads, 0, stream, add_row_losses_kernel)(row_loss, row_hit, rows, counters);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
