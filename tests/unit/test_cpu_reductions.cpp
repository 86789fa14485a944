// The CPU's vectorised loops against scalar references, at every tail length: the gradient
// norm's sum of squares (eight fixed lanes) and the AdamW update (vectorised since the build
// passes -fno-math-errno).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/optimizer.h"

namespace subdp {
namespace {

TEST(CpuReductions, SumSquaresIsExactOnSmallIntegersAtEveryLength) {
  // Squares of -3..3 sum exactly in double, whatever the order: any lost or doubled element
  // shows as an integer off.
  for (int64_t n : {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 1001}) {
    std::vector<float> x(n);
    double expected = 0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 7 - 3);
      expected += static_cast<double>(x[i]) * x[i];
    }
    EXPECT_EQ(cpu::sum_squares(x.data(), n), expected) << "n = " << n;
  }
}

TEST(CpuReductions, SumSquaresMatchesALongDoubleSum) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t n = 100003;
  std::vector<float> x(n);
  long double expected = 0;
  for (float& v : x) {
    v = normal(rng);
    expected += static_cast<long double>(v) * v;
  }
  EXPECT_NEAR(cpu::sum_squares(x.data(), n) / static_cast<double>(expected), 1.0, 1e-13);
}

TEST(CpuReductions, AdamwMatchesTheScalarFormulaAtEveryLength) {
  const float step_size = 1e-2f, bc2_sqrt = 0.3f, decay = 0.999f, eps = 1e-8f, b1 = 0.9f, b2 = 0.95f;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t n : {1, 7, 16, 17, 33, 1000}) {
    std::vector<float> w(n), g(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      w[i] = normal(rng), g[i] = normal(rng), m[i] = 0.1f * normal(rng), v[i] = std::abs(normal(rng));
    }
    std::vector<float> w1 = w, m1 = m, v1 = v;
    EXPECT_EQ(cpu::adamw_update(w1.data(), g.data(), m1.data(), v1.data(), n, step_size, bc2_sqrt, decay, eps, b1, b2),
              0);
    for (int64_t i = 0; i < n; ++i) {
      const double mi = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g[i];
      const double vi = b2 * static_cast<double>(v[i]) + (1.0 - b2) * g[i] * static_cast<double>(g[i]);
      const double wi = w[i] * static_cast<double>(decay) - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
      ASSERT_NEAR(m1[i], mi, 1e-6 * (1 + std::abs(mi))) << "n = " << n << ", i = " << i;
      ASSERT_NEAR(v1[i], vi, 1e-6 * (1 + vi)) << "n = " << n << ", i = " << i;
      ASSERT_NEAR(w1[i], wi, 1e-6 * (1 + std::abs(wi))) << "n = " << n << ", i = " << i;
    }
  }
}

TEST(CpuReductions, AdamwCountsTheNonFiniteValuesItWrites) {
  std::vector<float> w(19, 1.f), g(19, 0.5f), m(19, 0.f), v(19, 0.f);
  g[3] = std::numeric_limits<float>::infinity();  // m, v and w of element 3 turn non-finite
  g[18] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(cpu::adamw_update(w.data(), g.data(), m.data(), v.data(), 19, 1e-3f, 1.f, 1.f, 1e-8f, 0.9f, 0.999f), 6);
}

}  // namespace
}  // namespace subdp
