// The OpenBLAS wrapper: transposes, leading dimensions, the empty inner dimension, and the
// description `subdp version` prints.
#include <cblas.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace {

// C (M, N) = op(A) op(B) by the definition, A and B row-major with the given leading dims.
std::vector<float> naive(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                         const std::vector<float>& B, int ldb) {
  std::vector<float> C(static_cast<size_t>(M) * N, 0.f);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k)
        C[i * N + j] += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
  return C;
}

TEST(Gemm, MatchesTheDefinitionForEveryTransposeWithPaddedLeadingDimensions) {
  const int M = 5, N = 3, K = 4, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
      std::vector<float> A((ta ? K : M) * lda), B((tb ? N : K) * ldb);
      for (size_t i = 0; i < A.size(); ++i) A[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
      for (size_t i = 0; i < B.size(); ++i) B[i] = 0.5f * static_cast<float>(i % 5) - 1.f;
      std::vector<float> C(M * N, 1.f);
      subdp::cpu::sgemm(ta, tb, M, N, K, 2.f, A.data(), lda, B.data(), ldb, 0.5f, C.data(), N);
      const std::vector<float> want = naive(ta, tb, M, N, K, A, lda, B, ldb);
      for (int i = 0; i < M * N; ++i)
        EXPECT_FLOAT_EQ(C[i], 2.f * want[i] + 0.5f) << "ta=" << ta << " tb=" << tb << " at " << i;
    }
}

TEST(Gemm, EmptyInnerDimensionScalesCByBeta) {
  std::vector<float> C = {1.f, -2.f, 3.f, 4.f};
  subdp::cpu::sgemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.5f, -1.f, 1.5f, 2.f}));
  subdp::cpu::sgemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>{0.f, 0.f, 0.f, 0.f}));
}

TEST(Gemm, DescriptionNamesTheLoadedKernelCore) {
  const std::string d = subdp::cpu::blas_description();
  EXPECT_NE(d.find(std::string("core ") + openblas_get_corename()), std::string::npos) << d;
  EXPECT_NE(d.find("AVX-512"), std::string::npos) << d;
}

}  // namespace
