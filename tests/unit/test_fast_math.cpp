// kernels/cpu/fast_math.h against libm: the vectorised exp and tanh behind GELU and softmax.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/fast_math.h"

namespace subdp {
namespace {

TEST(FastMath, ExpMatchesLibmWithinTwoUlpsOnItsRange) {
  double worst = 0;
  for (float x = -87.f; x <= 88.f; x += 0.0137f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_approx(x) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);
}

TEST(FastMath, ExpClampsOutOfRangeAndTurnsNonFiniteIntoNaN) {
  EXPECT_TRUE(std::isfinite(cpu::exp_approx(1000.f)));
  EXPECT_GT(cpu::exp_approx(1000.f), 1e38f);
  EXPECT_GE(cpu::exp_approx(-1000.f), 0.f);
  EXPECT_LT(cpu::exp_approx(-1000.f), 1e-37f);
  EXPECT_TRUE(std::isnan(cpu::exp_approx(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(cpu::exp_approx(std::numeric_limits<float>::infinity())));
}

TEST(FastMath, TanhAbsoluteErrorBelowOneMillionth) {
  double worst = 0;
  for (float x = -20.f; x <= 20.f; x += 0.00731f)
    worst = std::max(worst, std::abs(cpu::tanh_approx(x) - std::tanh(static_cast<double>(x))));
  EXPECT_LT(worst, 1e-6);
  EXPECT_EQ(cpu::tanh_approx(50.f), 1.f);
  EXPECT_EQ(cpu::tanh_approx(-50.f), -1.f);
}

TEST(FastMath, GeluPropagatesNaN) {
  const float x[3] = {std::numeric_limits<float>::quiet_NaN(), 1.f, -1.f};
  float y[3];
  cpu::gelu_forward(x, y, 3);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_NEAR(y[1], 0.841192f, 1e-5f);  // torch.nn.functional.gelu(1, approximate="tanh")
  EXPECT_NEAR(y[2], -0.158808f, 1e-5f);
}

TEST(FastMath, GeluColumnsRecomputeTheFlatOutputBitForBit) {
  // The GPT recomputes the leading columns of a GELU output for fc2's weight gradient:
  // row widths 13 and 1 (tails only) and 40 (vector body and tail) against one flat call
  // over (rows, ld), whose vector / tail split falls elsewhere, on one and two threads.
  const int64_t rows = 37, ld = 45;
  std::vector<float> x(rows * ld);
  for (int64_t i = 0; i < rows * ld; ++i) x[i] = std::sin(0.37f * i) * 4.f;
  for (const int threads : {1, 2}) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> flat(rows * ld);
    cpu::gelu_forward(x.data(), flat.data(), rows * ld);
    for (const int64_t cols : {13, 1, 40}) {
      std::vector<float> y(rows * cols);
      cpu::gelu_forward_columns(x.data(), rows, ld, cols, y.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(y[r * cols + c], flat[r * ld + c]) << threads << " " << cols;
    }
    omp_set_num_threads(saved);
  }
}

}  // namespace
}  // namespace subdp
