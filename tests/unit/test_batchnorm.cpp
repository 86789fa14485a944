// BatchNorm2d kernels: the forward against a double-precision reference (batch statistics,
// the running-statistics update with unbiased variance, the normalised output) on data far
// from zero where a careless variance formula loses everything to cancellation; the
// backward in place over its input or its output gradient, as the ResNet calls it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/elementwise.h"
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

// The ResNet writes BatchNorm input gradients over the input (shortcut: dx == x) or over
// the output gradient (dx == dy) to save activation buffers; both must give exactly the
// out-of-place result, gradients of gamma and beta included.
TEST(BatchNormKernel, BackwardInPlaceOverInputOrOutputGradientEqualsOutOfPlace) {
  Tensor x = test::random_tensor({kSize}, 1.f, 5), dy = test::random_tensor({kSize}, 1.f, 6);
  std::vector<float> gamma = {1.f, 2.f, -0.5f}, beta = {0.f, 0.1f, 1.f}, y(kSize), mean(C), rstd(C);
  std::vector<float> rm(C, 0.f), rv(C, 1.f);
  cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rm.data(), rv.data(),
                         N, C, HW, true, 0.1f, 1e-5f);
  struct Result {
    std::vector<float> dx, dgamma, dbeta;
  };
  // aliasing: 0 = dx separate, 1 = dx over x, 2 = dx over dy
  auto run = [&](int aliasing) {
    std::vector<float> xs(x.f32(), x.f32() + kSize), dys(dy.f32(), dy.f32() + kSize), sep(kSize);
    Result r{{}, std::vector<float>(C, 0.f), std::vector<float>(C, 0.f)};
    float* dx = aliasing == 1 ? xs.data() : aliasing == 2 ? dys.data() : sep.data();
    cpu::batchnorm_backward(xs.data(), gamma.data(), mean.data(), rstd.data(), dys.data(), dx, r.dgamma.data(),
                            r.dbeta.data(), N, C, HW, C);
    r.dx.assign(dx, dx + kSize);
    return r;
  };
  const Result ref = run(0);
  EXPECT_GT(*std::max_element(ref.dx.begin(), ref.dx.end()), 0.1f);  // a real gradient
  for (int aliasing : {1, 2}) {
    const Result r = run(aliasing);
    EXPECT_EQ(r.dx, ref.dx) << (aliasing == 1 ? "dx over x" : "dx over dy");
    EXPECT_EQ(r.dgamma, ref.dgamma);
    EXPECT_EQ(r.dbeta, ref.dbeta);
  }
}

// The fused ReLU (the ResNet's BatchNorm + ReLU pairs) must give relu_forward's bits after
// the plain forward, in training and in eval, with the same statistics.
TEST(BatchNormKernel, FusedReluEqualsReluAfterTheForward) {
  Tensor x = test::random_tensor({kSize}, 1.f, 7);
  std::vector<float> gamma = {1.f, 2.f, -0.5f}, beta = {0.f, 0.1f, 1.f};
  for (bool training : {true, false}) {
    std::vector<float> y(kSize), yr(kSize), mean(C), rstd(C), mean_r(C), rstd_r(C);
    std::vector<float> rm(C, 0.3f), rv(C, 1.5f), rm_r(rm), rv_r(rv);
    cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rm.data(), rv.data(),
                           N, C, HW, training, 0.1f, 1e-5f);
    cpu::relu_forward(y.data(), y.data(), kSize);
    cpu::batchnorm_forward(x.f32(), gamma.data(), beta.data(), yr.data(), mean_r.data(), rstd_r.data(), rm_r.data(),
                           rv_r.data(), N, C, HW, training, 0.1f, 1e-5f, /*relu=*/true);
    EXPECT_EQ(yr, y) << (training ? "training" : "eval");
    EXPECT_EQ(rm_r, rm);
    EXPECT_EQ(rv_r, rv);
    const auto zeros = std::count(yr.begin(), yr.end(), 0.f);
    EXPECT_GT(zeros, kSize / 10) << "the ReLU must clip a real share";
    EXPECT_LT(zeros, kSize * 9 / 10);
  }
}

}  // namespace
}  // namespace subdp
