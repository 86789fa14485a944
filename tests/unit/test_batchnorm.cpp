// BatchNorm2d forward kernel against a double-precision reference: batch statistics, the
// running-statistics update (unbiased variance) and the normalised output, on data far from
// zero where a careless variance formula loses everything to cancellation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/norm.h"
#include "tests/unit/gradcheck.h"

namespace subdp {
namespace {

constexpr int N = 5, C = 3, HW = 49;
constexpr int64_t kSize = int64_t{N} * C * HW;

struct Reference {
  std::vector<double> mean, var;  // biased variance
};

Reference moments(const float* x) {
  Reference r{std::vector<double>(C), std::vector<double>(C)};
  for (int c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) s += x[(n * C + c) * HW + i];
    r.mean[c] = s / (N * HW);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) ss += std::pow(x[(n * C + c) * HW + i] - r.mean[c], 2);
    r.var[c] = ss / (N * HW);
  }
  return r;
}

// Offset 1000, spread ~1: E[x^2] - E[x]^2 in float would lose the variance.
TEST(BatchNormKernel, TrainingStatisticsMatchDoubleReferenceOnOffsetData) {
  Tensor x = test::random_tensor({kSize}, 1.f, 3);
  for (int64_t i = 0; i < kSize; ++i) x.f32()[i] += 1000.f;
  const Reference ref = moments(x.f32());
  std::vector<float> gamma = {1.f, 2.f, -0.5f}, beta = {0.f, 0.1f, 1.f}, y(kSize), mean(C), rstd(C);
  std::vector<float> rm(C, 0.f), rv(C, 1.f);
  cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rm.data(), rv.data(),
                         N, C, HW, true, 0.1f, 1e-5f);
  const double M = N * HW;
  for (int c = 0; c < C; ++c) {
    EXPECT_NEAR(mean[c], ref.mean[c], 1e-3) << "channel " << c;
    EXPECT_NEAR(rstd[c], 1 / std::sqrt(ref.var[c] + 1e-5), 1e-4 * rstd[c]) << "channel " << c;
    EXPECT_NEAR(rm[c], 0.1 * ref.mean[c], 1e-4) << "channel " << c;
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * ref.var[c] * M / (M - 1), 1e-4) << "unbiased running variance, channel " << c;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) {
        const int64_t k = (n * C + c) * HW + i;
        const double z = gamma[c] * (x.f32()[k] - ref.mean[c]) / std::sqrt(ref.var[c] + 1e-5) + beta[c];
        ASSERT_NEAR(y[k], z, 2e-3) << "y at " << k;
      }
  }
}

}  // namespace
}  // namespace subdp
