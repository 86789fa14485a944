// GEMM on the CPU through OpenBLAS (cblas_sgemm), row-major.
#pragma once
#include <string>

namespace subdp::cpu {

/// C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, all row-major float32.
/// op(A) = A^T when trans_a (A stored (K, M) with leading dimension lda), likewise B.
/// Leading dimensions are in elements and allow strided sub-matrices (masked prefixes).
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc);

/// Sets the number of BLAS threads (OpenBLAS) and OpenMP threads; at least 1. Turns off
/// OpenMP dynamic thread adjustment (OMP_DYNAMIC), under which OpenBLAS can hang.
void set_num_threads(int threads);

/// The loaded OpenBLAS: its build configuration and the kernel set (core) it runs, with
/// OPENBLAS_CORETYPE when set (a DYNAMIC_ARCH OpenBLAS reads it at load time, and it beats
/// the CPU's own id), and whether the CPU has AVX-512 (an AVX2 core such as Haswell then
/// reaches 0.55-0.65x the sgemm rate of the AVX-512 kernels; measured on a Zen 5).
/// Printed by `subdp version` and the throughput benchmark.
std::string blas_description();

}  // namespace subdp::cpu
