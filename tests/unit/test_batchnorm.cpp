// BatchNorm2d forward kernel against a double-precision reference: batch statistics (plane
// moments merged across planes), the running-statistics update, evaluation mode, and the
// fused epilogue y = relu(scale * z + residual) used by the ResNet's block tails.
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

// Batch statistics of data far from zero (offset 1000, spread ~1): the plane-wise merge
// must not lose the variance to cancellation.
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

TEST(BatchNormKernel, EpilogueScalesAddsResidualAndRectifiesInTrainingAndEval) {
  Tensor x = test::random_tensor({kSize}, 2.f, 5), res = test::random_tensor({kSize}, 1.f, 6);
  std::vector<float> gamma = {1.5f, 0.5f, 1.f}, beta = {0.2f, -0.3f, 0.f}, mean(C), rstd(C);
  for (bool training : {true, false}) {
    std::vector<float> rm = {0.1f, -0.2f, 0.3f}, rv = {0.5f, 2.f, 1.f};
    std::vector<float> rm2 = rm, rv2 = rv, plain(kSize), fused(kSize);
    cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), plain.data(), mean.data(), rstd.data(), rm.data(),
                           rv.data(), N, C, HW, training, 0.1f, 1e-5f);
    cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), fused.data(), mean.data(), rstd.data(), rm2.data(),
                           rv2.data(), N, C, HW, training, 0.1f, 1e-5f, {2.f, res.f32(), true});
    int zeros = 0;
    for (int64_t k = 0; k < kSize; ++k) {
      const float want = std::max(2.f * plain[k] + res.f32()[k], 0.f);
      ASSERT_NEAR(fused[k], want, 1e-5 * (1 + std::abs(want))) << (training ? "training" : "eval") << " at " << k;
      zeros += fused[k] == 0.f;
    }
    EXPECT_GT(zeros, kSize / 10) << "the ReLU should clip a good share of the values";
    EXPECT_EQ(rm, rm2);  // the epilogue does not touch the statistics
    EXPECT_EQ(rv, rv2);
  }
}

}  // namespace
}  // namespace subdp
