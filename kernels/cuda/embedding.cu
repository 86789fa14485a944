// Embedding lookup and its deterministic scatter-add backward: twins of
// engine/layers/embedding.cpp. The backward sorts the rows by id (CUB's stable radix sort),
// then the first row of each run of equal ids sums the run in row order and adds it once:
// no float atomics, so the gradient's bits do not depend on scheduling.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;

constexpr int kColThreads = 128;

__global__ void embedding_forward_kernel(const int32_t* ids, const float* w, float* y, int64_t rows, int64_t C,
                                         int64_t num, bool accumulate) {
  const int64_t n = rows * C;
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const int64_t r = i / C, c = i % C;
    const int64_t id = ids[r];
    if (id < 0 || id >= num) continue;
    const float v = w[id * C + c];
    y[i] = accumulate ? y[i] + v : v;
  }
}

__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) v[i] = static_cast<int32_t>(i);
}

// grid (rows, column blocks). Block p acts only when sorted position p starts a run of one id.
__global__ void embedding_backward_kernel(const int32_t* keys, const int32_t* order, const float* dy, float* dw,
                                          int64_t rows, int64_t C, int64_t num) {
  const int64_t p = blockIdx.x;
  const int32_t id = keys[p];
  if ((p > 0 && keys[p - 1] == id) || id < 0 || id >= num) return;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int64_t q = p; q < rows && keys[q] == id; ++q) acc += dy[static_cast<int64_t>(order[q]) * C + c];
  dw[static_cast<int64_t>(id) * C + c] += acc;
}

struct Workspace {
  int32_t* keys;     // (rows) sorted ids
  int32_t* rows_in;  // (rows) 0..rows-1
  int32_t* order;    // (rows) row indices in sorted order
  void* temp;
  size_t temp_bytes;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t rows) {
  size_t bytes = 0;
  CUDA_CHECK((cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                              static_cast<int32_t*>(nullptr), static_cast<int>(rows))));
  return bytes;
}

Workspace carve(void* ws, int64_t rows) {
  char* p = static_cast<char*>(ws);
  const size_t ints = align256(sizeof(int32_t) * rows);
  Workspace w{};
  w.keys = reinterpret_cast<int32_t*>(p);
  w.rows_in = reinterpret_cast<int32_t*>(p + ints);
  w.order = reinterpret_cast<int32_t*>(p + 2 * ints);
  w.temp = p + 3 * ints;
  w.temp_bytes = sort_temp_bytes(rows);
  return w;
}

}  // namespace

void embedding_forward(const int32_t* ids, const float* w, float* y, int64_t rows, int64_t C, int64_t num,
                       bool accumulate, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(blocks_for(rows * C), kThreads, 0, s, embedding_forward_kernel)(ids, w, y, rows, C, num, accumulate);
  CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_workspace_bytes(int64_t rows) {
  return 3 * align256(sizeof(int32_t) * std::max<int64_t>(rows, 1)) + sort_temp_bytes(rows);
}

void embedding_backward(const int32_t* ids, const float* dy, float* dw, int64_t rows, int64_t C, int64_t num, void* ws,
                        size_t ws_bytes, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  if (ws_bytes < embedding_backward_workspace_bytes(rows))
    throw_cuda_error(cudaErrorInvalidValue,
                     "embedding_backward: workspace smaller than "
                     "embedding_backward_workspace_bytes(rows)",
                     __FILE__, __LINE__);
  Workspace w = carve(ws, rows);
  SUBDP_LAUNCH(blocks_for(rows), kThreads, 0, s, iota_kernel)(w.rows_in, rows);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.temp, w.temp_bytes, ids, w.keys, w.rows_in, w.order,
                                             static_cast<int>(rows), 0, 32, s));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((C + kColThreads - 1) / kColThreads));
  SUBDP_LAUNCH(grid, kColThreads, 0, s, embedding_backward_kernel)(w.keys, w.order, dy, dw, rows, C, num);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
