// A register-blocked single-threaded GEMM for the convolutions' small per-thread products
// (Winograd domain: tens to a few hundred tiles by up to a few hundred channels; im2col: one
// sample's), vectorised at the CPU's full width (16 floats with AVX-512, 8 with AVX2),
// whatever kernel set OpenBLAS loaded.
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// C (M, N) = A (M, K) x B (K, N), or C += A x B when accumulate; float32, single-threaded
/// (the caller parallelises over independent products).
/// A is read through strides: element (i, k) at A[i * a_row + k * a_col], so A (row-major,
/// a_row = lda, a_col = 1) and A^T (A stored (K, M): a_row = 1, a_col = lda) both serve.
/// B is row-major (K, N) with leading dimension ldb, or, when b_trans, stored (N, K) with
/// leading dimension ldb. C is row-major with leading dimension ldc. Sums run over k in
/// ascending order per output element, so results do not depend on the caller's threads.
/// M or N == 0 reads and writes nothing; K == 0 gives C = 0 (or leaves C when accumulate).
/// Needs no workspace (B is packed in blocks on the stack, at most 32 KiB).
void small_sgemm(int M, int N, int K, const float* A, int64_t a_row, int64_t a_col, const float* B, int ldb,
                 bool b_trans, float* C, int ldc, bool accumulate);

}  // namespace subdp::cpu
