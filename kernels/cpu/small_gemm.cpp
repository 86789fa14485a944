// Register-blocked GEMM: B is packed per block of kNr columns and kKc inner indices into a
// contiguous (kKc, kNr) panel; a micro-kernel keeps an (MR, kNr) block of C in registers,
// one broadcast of A and two vectors of the panel per FMA step (the BLIS / GotoBLAS scheme
// without packing A: the convolutions' operands already have unit stride along one of its
// axes, and a copy of A would cost as much as the product when N is 32).
#include "kernels/cpu/small_gemm.h"

#include <algorithm>
#include <utility>

#include "kernels/cpu/transpose.h"
#include "kernels/cpu/vec.h"

namespace subdp::cpu {

namespace {

#ifdef __AVX512F__
constexpr int kMr = 14;  // 28 accumulators + 2 panel vectors + 1 broadcast of 32 registers
#else
constexpr int kMr = 6;  // 12 accumulators + 2 panel vectors + 1 broadcast of 16 registers
#endif
constexpr int kNr = 2 * kLanes;  // columns per micro-tile: two vectors
constexpr int kKc = 256;         // inner indices per packed panel (kKc * kNr floats on the stack)

// Panel (kc, kNr) of B: columns [j0, j0 + nc) of rows [k0, k0 + kc), zero beyond nc. Full
// rows move as two vectors (a memcpy call per 128-byte row cost more than the copy); B stored
// transposed goes through 8 x 8 register transposes.
void pack_panel(const float* B, int ldb, bool b_trans, int k0, int kc, int j0, int nc, float* panel) {
  if (nc < kNr)
    for (int k = 0; k < kc; ++k) std::fill(panel + k * kNr + nc, panel + (k + 1) * kNr, 0.f);
  if (b_trans) {
    transpose(B + static_cast<int64_t>(j0) * ldb + k0, nc, kc, ldb, panel, kNr, false);
    return;
  }
  for (int k = 0; k < kc; ++k) {
    const float* row = B + static_cast<int64_t>(k0 + k) * ldb + j0;
    if (nc == kNr) {
      store(panel + k * kNr, load<Vec>(row));
      store(panel + k * kNr + kLanes, load<Vec>(row + kLanes));
    } else {
      std::copy(row, row + nc, panel + k * kNr);
    }
  }
}

// C block (MR, nc) (=, or += when add) A rows (MR, kc) x panel (kc, kNr). Full-width blocks
// load and store C directly; partial ones go through a (MR, kNr) buffer.
template <int MR>
void micro_kernel(int kc, const float* A, int64_t a_row, int64_t a_col, const float* panel, float* C, int ldc, int nc,
                  bool add) {
  Vec acc[MR][2] = {};
  for (int k = 0; k < kc; ++k) {
    const Vec b0 = load<Vec>(panel + k * kNr), b1 = load<Vec>(panel + k * kNr + kLanes);
    const float* a = A + k * a_col;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const float x = a[i * a_row];
      acc[i][0] += x * b0;
      acc[i][1] += x * b1;
    }
  }
  if (nc == kNr) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      float* c = C + static_cast<int64_t>(i) * ldc;
      store(c, add ? load<Vec>(c) + acc[i][0] : acc[i][0]);
      store(c + kLanes, add ? load<Vec>(c + kLanes) + acc[i][1] : acc[i][1]);
    }
    return;
  }
  // Unrolled like the loops above, so every index into acc is a constant and acc stays in
  // registers (a runtime index made GCC keep a copy of acc on the stack and zero it with a
  // memset call per micro-kernel: 1.5 % of a ResNet step).
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float tmp[kNr];
    store(tmp, acc[i][0]);
    store(tmp + kLanes, acc[i][1]);
    float* c = C + static_cast<int64_t>(i) * ldc;
    for (int j = 0; j < nc; ++j) c[j] = add ? c[j] + tmp[j] : tmp[j];
  }
}

using MicroKernel = void (*)(int, const float*, int64_t, int64_t, const float*, float*, int, int, bool);

template <int... R>
constexpr MicroKernel kernel_for_rows(int rows, std::integer_sequence<int, R...>) {
  constexpr MicroKernel table[] = {micro_kernel<R + 1>...};
  return table[rows - 1];
}

}  // namespace

void small_sgemm(int M, int N, int K, const float* A, int64_t a_row, int64_t a_col, const float* B, int ldb,
                 bool b_trans, float* C, int ldc, bool accumulate) {
  alignas(64) float panel[kKc * kNr];
  if (M == 0 || N == 0) return;  // B and C untouched (they may be empty)
  if (K == 0) {
    if (!accumulate)
      for (int i = 0; i < M; ++i)
        std::fill(C + static_cast<int64_t>(i) * ldc, C + static_cast<int64_t>(i) * ldc + N, 0.f);
    return;
  }
  for (int j0 = 0; j0 < N; j0 += kNr) {
    const int nc = std::min(kNr, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKc) {
      const int kc = std::min(kKc, K - k0);
      pack_panel(B, ldb, b_trans, k0, kc, j0, nc, panel);
      const bool add = accumulate || k0 > 0;
      for (int i0 = 0; i0 < M; i0 += kMr) {
        const int mr = std::min(kMr, M - i0);
        kernel_for_rows(mr, std::make_integer_sequence<int, kMr>{})(kc, A + i0 * a_row + k0 * a_col, a_row, a_col,
                                                                    panel, C + static_cast<int64_t>(i0) * ldc + j0, ldc,
                                                                    nc, add);
      }
    }
  }
}

}  // namespace subdp::cpu
