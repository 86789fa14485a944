// OpenBLAS wrapper.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>

extern "C" void openblas_set_num_threads(int);

namespace subdp::cpu {

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty inner dimension (e.g. a subnetwork keeping no head): C = beta * C
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j)
        C[static_cast<int64_t>(i) * ldc + j] = beta == 0.f ? 0.f : beta * C[static_cast<int64_t>(i) * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

void set_num_threads(int threads) {
  threads = std::max(1, threads);
  // OMP_DYNAMIC=true lets libgomp hand a parallel region fewer threads than asked; OpenBLAS
  // (OpenMP build) then waits for the missing ones forever. The engine sizes its thread
  // count itself, so dynamic adjustment is always off.
  omp_set_dynamic(0);
  openblas_set_num_threads(threads);
  omp_set_num_threads(threads);
}

std::string blas_description() {
  std::string s = openblas_get_config();
  s += "; core ";
  s += openblas_get_corename();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) s += std::string(" (OPENBLAS_CORETYPE=") + forced + ")";
  __builtin_cpu_init();
  s += __builtin_cpu_supports("avx512f") ? "; CPU with AVX-512" : "; CPU without AVX-512";
  return s;
}

}  // namespace subdp::cpu
