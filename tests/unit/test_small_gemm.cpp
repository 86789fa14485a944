// small_sgemm against a float64 product by the definition: every row count up to two
// micro-tiles (all row remainders), ragged column counts (partial panels), inner dimensions
// past one packed panel (k blocking), strided and transposed operands, accumulate.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/small_gemm.h"

namespace {

struct Layout {
  bool a_trans, b_trans;
};

// C (M, N) in float64: A (M, K) row-major with lda, or stored (K, M) when a_trans; likewise B.
std::vector<double> reference(const Layout& l, int M, int N, int K, const std::vector<float>& A, int lda,
                              const std::vector<float>& B, int ldb) {
  std::vector<double> C(static_cast<size_t>(M) * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k)
        C[i * N + j] +=
            double(l.a_trans ? A[k * lda + i] : A[i * lda + k]) * (l.b_trans ? B[j * ldb + k] : B[k * ldb + j]);
  return C;
}

// Runs one shape in one layout with padded leading dimensions; C starts at 1 (kept when
// accumulating, overwritten otherwise).
void check(const Layout& l, int M, int N, int K, bool accumulate) {
  const int pad = 3, lda = (l.a_trans ? M : K) + pad, ldb = (l.b_trans ? K : N) + pad, ldc = N + pad;
  // Operands end at their last row's last element, so a read past it shows under ASan.
  auto exact = [](int rows, int cols, int ld) {
    return rows == 0 ? size_t{0} : static_cast<size_t>(rows - 1) * ld + cols;
  };
  std::vector<float> A(exact(l.a_trans ? K : M, l.a_trans ? M : K, lda)),
      B(exact(l.b_trans ? N : K, l.b_trans ? K : N, ldb));
  for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.21f * i);
  std::vector<float> C(static_cast<size_t>(M) * ldc, 1.f);
  const int64_t a_row = l.a_trans ? 1 : lda, a_col = l.a_trans ? lda : 1;
  subdp::cpu::small_sgemm(M, N, K, A.data(), a_row, a_col, B.data(), ldb, l.b_trans, C.data(), ldc, accumulate);
  const std::vector<double> want = reference(l, M, N, K, A, lda, B, ldb);
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      const double expected = want[i * N + j] + (accumulate ? 1.0 : 0.0);
      ASSERT_NEAR(C[i * ldc + j], expected, 1e-5 * (K + 1))
          << "M=" << M << " N=" << N << " K=" << K << " a_trans=" << l.a_trans << " b_trans=" << l.b_trans
          << " accumulate=" << accumulate << " at (" << i << ", " << j << ")";
    }
    for (int j = N; j < ldc; ++j) ASSERT_EQ(C[i * ldc + j], 1.f) << "wrote past column N in row " << i;
  }
}

TEST(SmallGemm, EveryRowRemainderAndRaggedColumnsMatchFloat64) {
  for (const Layout l : {Layout{false, false}, Layout{false, true}, Layout{true, false}})
    for (int M = 1; M <= 30; ++M)
      for (int N : {1, 7, 16, 33, 70}) check(l, M, N, 19, M % 2 == 0);
}

TEST(SmallGemm, InnerDimensionsPastOnePanelAccumulateAcrossBlocks) {
  for (const Layout l : {Layout{false, false}, Layout{false, true}, Layout{true, false}})
    for (int K : {255, 256, 257, 600})
      for (bool accumulate : {false, true}) check(l, 17, 40, K, accumulate);
}

TEST(SmallGemm, EmptyOutputReadsNothing) {
  subdp::cpu::small_sgemm(0, 5, 3, nullptr, 3, 1, nullptr, 5, false, nullptr, 5, false);
  subdp::cpu::small_sgemm(4, 0, 3, nullptr, 3, 1, nullptr, 0, true, nullptr, 0, true);
}

TEST(SmallGemm, EmptyInnerDimensionZeroesOrKeepsC) {
  std::vector<float> C = {1.f, 2.f, 3.f, 4.f};
  subdp::cpu::small_sgemm(2, 2, 0, nullptr, 0, 1, nullptr, 2, false, C.data(), 2, true);
  EXPECT_EQ(C, (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
  subdp::cpu::small_sgemm(2, 2, 0, nullptr, 0, 1, nullptr, 2, false, C.data(), 2, false);
  EXPECT_EQ(C, (std::vector<float>{0.f, 0.f, 0.f, 0.f}));
}

}  // namespace
