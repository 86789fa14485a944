// Column sums over rows sized to the device: out_a[c] += sum over rows r of term(r, c).a (and
// out_b with .b), for the parameter gradients of LayerNorm / RMSNorm (gamma, beta) and of a
// bias. One block of (32 columns, kColLanes row lanes) covers too few blocks for a wide GPU
// (768 columns: 24 blocks on 132 SMs), so the rows are cut into slices, about two blocks per
// SM in all; each slice's sums go to a workspace and a second kernel adds the slices in
// order. Every sum runs in a fixed order (lane ty takes rows ty, ty + 32, ... of its slice,
// the lanes then the slices are added in order), so a device repeats its bits; the bits
// depend on the slice count, that is on the device's SM count.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/cuda/common.cuh"

namespace subdp::cuda::detail {

constexpr int kColLanes = 32;           // row lanes of a column-sum block (block 32 x 32)
constexpr int64_t kMinSliceRows = 256;  // 8 rows per lane at least, else one slice does it

/// Multiprocessors of the current device (cudaGetDeviceProperties, read once per device).
inline int multiprocessors() {
  constexpr int kDevices = 64;
  static int cached[kDevices] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kDevices) return 132;  // not cached; an H100 / H200's count
  if (cached[device] == 0) {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    cached[device] = std::max(1, p.multiProcessorCount);
  }
  return cached[device];
}

/// Row slices for `rows` rows of C columns: about two blocks per SM, at least kMinSliceRows
/// rows a slice, at most 65535 (grid y).
inline int column_sum_slices(int64_t rows, int64_t C) {
  const int64_t col_blocks = std::max<int64_t>(1, (C + 31) / 32);
  const int64_t want = (2 * static_cast<int64_t>(multiprocessors()) + col_blocks - 1) / col_blocks;
  return static_cast<int>(std::max<int64_t>(1, std::min({want, rows / kMinSliceRows, int64_t{65535}})));
}

/// Floats of workspace column_sums needs for rows x C: two (slices, C) tables, or 0 when one
/// slice writes straight into the outputs.
inline int64_t column_sums_workspace_floats(int64_t rows, int64_t C) {
  const int slices = column_sum_slices(rows, C);
  return slices > 1 ? 2 * slices * C : 0;
}

struct Pair {
  float a, b;
};

/// Slice blockIdx.y of the rows, columns blockIdx.x * 32 + tx: with one slice added to out_a /
/// out_b (out_b may be null), else written to part_a / part_b[slice * C + c].
template <class Term>
__global__ void __launch_bounds__(1024)
    column_slice_sums_kernel(Term term, int64_t rows, int64_t C, int64_t slice_rows, float* out_a, float* out_b,
                             float* part_a, float* part_b) {
  __shared__ float sa[kColLanes][32];
  __shared__ float sb[kColLanes][32];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * slice_rows;
  const int64_t r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
  float a = 0.f, b = 0.f;
  if (c < C)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColLanes) {
      const Pair t = term(r, c);
      a += t.a;
      b += t.b;
    }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float ta = 0.f, tb = 0.f;
  for (int k = 0; k < kColLanes; ++k) {
    ta += sa[k][threadIdx.x];
    tb += sb[k][threadIdx.x];
  }
  if (gridDim.y == 1) {
    out_a[c] += ta;
    if (out_b) out_b[c] += tb;
  } else {
    part_a[blockIdx.y * C + c] = ta;
    part_b[blockIdx.y * C + c] = tb;
  }
}

/// out[c] += sum over slices s, in order, of part[s * C + c]. (A template so that every
/// file that includes this header may hold it.)
template <class T>
__global__ void __launch_bounds__(256) add_slices_kernel(const T* part, int slices, int64_t C, T* out) {
  for (int64_t c = grid_first(); c < C; c += grid_stride()) {
    T sum = 0;
    for (int s = 0; s < slices; ++s) sum += part[s * C + c];
    out[c] += sum;
  }
}

/// See the file comment. ws: column_sums_workspace_floats(rows, C) floats (null when 0).
template <class Term>
void column_sums(const Term& term, int64_t rows, int64_t C, float* out_a, float* out_b, float* ws,
                 cudaStream_t stream) {
  if (rows <= 0 || C <= 0) return;
  const int slices = column_sum_slices(rows, C);
  const int64_t slice_rows = (rows + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(slices));
  float* part_b = slices > 1 ? ws + slices * C : nullptr;
  SUBDP_LAUNCH(grid, dim3(32, kColLanes), 0, stream, column_slice_sums_kernel<Term>)
  (term, rows, C, slice_rows, out_a, out_b, slices > 1 ? ws : nullptr, part_b);
  CUDA_CHECK_LAUNCH();
  if (slices == 1) return;
  for (auto [part, out] : {std::pair<const float*, float*>{ws, out_a}, {part_b, out_b}}) {
    if (out == nullptr) continue;
    SUBDP_LAUNCH(blocks_for(C), kThreads, 0, stream, add_slices_kernel<float>)(part, slices, C, out);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace subdp::cuda::detail
