// Finite-difference gradient checks (design brief, invariant 6): every layer and kernel with
// a backward pass, the masked-prefix weight-gradient path, and whole models (MLP, ResNet),
// unmasked and masked. Layers use the scalar loss L = sum(y * R) with a fixed random R;
// models use their own mean cross-entropy from a training-mode forward.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/layers/batchnorm.h"
#include "engine/layers/conv2d.h"
#include "engine/layers/layernorm.h"
#include "engine/layers/linear.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/softmax.h"
#include "models/model.h"
#include "tests/unit/gradcheck.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

using test::check_gradient;
using test::dot;
using test::FdOptions;
using test::grad_value_index;
using test::random_image_batch;
using test::random_tensor;
using test::randomize_norms;

Tensor act(const Shape& s) { return Tensor::zeros(s, MemCategory::activations); }

/// A backward-regime, neuron-level mask with one maskable layer of `units` units of which
/// `kept` (global indices) are this rank's: local order kept-first, ascending, then dropped.
SubnetMask prefix_mask(int units, const std::vector<int>& kept) {
  SubnetMask m;
  m.regime = Regime::backward;
  m.granularity = Granularity::neuron;
  LayerMask lm;
  lm.order = kept;
  for (int u = 0; u < units; ++u)
    if (std::find(kept.begin(), kept.end(), u) == kept.end()) lm.order.push_back(u);
  lm.kept = static_cast<int>(kept.size());
  m.layers.push_back(lm);
  return m;
}

/// Randomises a held parameter's values (U(-a, a)), e.g. BatchNorm gamma/beta away from 1/0.
void randomize(Param& p, float center, float a, uint64_t seed) {
  test::fill_uniform(p.value, a, seed);
  float* v = p.value.f32();
  for (int64_t i = 0; i < p.value.numel(); ++i) v[i] += center;
}

// ---------------------------------------------------------------------------------------------
// Linear

void check_linear(const SubnetMask& mask, int64_t in, int64_t out, UnitRef out_units, UnitRef in_units,
                  const Shape& wgrad_shape, int64_t bgrad_extent) {
  ParamSet ps(mask, 3);
  Linear fc(ps, "fc", in, out, true, out_units, in_units);
  const int64_t rows = 4;
  Tensor x = random_tensor({rows, fc.in()}, 1.f, 11), r = random_tensor({rows, fc.out()}, 1.f, 12);
  Tensor y = act({rows, fc.out()}), dx = act({rows, fc.in()});
  auto loss = [&] {
    fc.forward(x.f32(), y.f32(), rows);
    return dot(y.f32(), r.f32(), y.numel());
  };
  ASSERT_TRUE(fc.weight->grad.defined());
  ASSERT_EQ(fc.weight->grad.shape(), wgrad_shape);
  ASSERT_TRUE(fc.bias->grad.defined());
  ASSERT_EQ(fc.bias->grad.dim(0), bgrad_extent);
  fc.weight->grad.zero_();
  fc.bias->grad.zero_();
  loss();
  fc.backward(x.f32(), r.f32(), dx.f32(), rows);
  EXPECT_TRUE(check_gradient("fc.weight", fc.weight->value.f32(), fc.weight->grad.f32(), fc.weight->grad.numel(), loss,
                             {}, grad_value_index(*fc.weight)));
  EXPECT_TRUE(check_gradient("fc.bias", fc.bias->value.f32(), fc.bias->grad.f32(), fc.bias->grad.numel(), loss, {},
                             grad_value_index(*fc.bias)));
  EXPECT_TRUE(check_gradient("fc input", x.f32(), dx.f32(), x.numel(), loss));

  // Parameter gradients accumulate (+=) over backward calls; dx is overwritten.
  std::vector<float> g1(fc.weight->grad.f32(), fc.weight->grad.f32() + fc.weight->grad.numel());
  std::vector<float> b1(fc.bias->grad.f32(), fc.bias->grad.f32() + fc.bias->grad.numel());
  std::vector<float> dx1(dx.f32(), dx.f32() + dx.numel());
  fc.backward(x.f32(), r.f32(), dx.f32(), rows);
  for (size_t i = 0; i < g1.size(); ++i) ASSERT_FLOAT_EQ(fc.weight->grad.f32()[i], 2 * g1[i]) << i;
  for (size_t i = 0; i < b1.size(); ++i) ASSERT_FLOAT_EQ(fc.bias->grad.f32()[i], 2 * b1[i]) << i;
  for (size_t i = 0; i < dx1.size(); ++i) ASSERT_FLOAT_EQ(dx.f32()[i], dx1[i]) << i;
}

TEST(GradCheck, Linear) {
  SubnetMask mask;
  check_linear(mask, 7, 5, {}, {}, {5, 7}, 5);
}

TEST(GradCheck, LinearMaskedOutputUnitsBackwardRegime) {
  // 5 output units, kept {1, 3, 4}: dW rows and db entries only for the kept prefix.
  SubnetMask mask = prefix_mask(5, {1, 3, 4});
  check_linear(mask, 6, 5, UnitRef{0, 0, 1}, {}, {3, 6}, 3);
}

TEST(GradCheck, LinearMaskedOutputHeadsBackwardRegime) {
  // Units of 2 rows each (attention heads): 3 heads, kept {0, 2} -> 4 gradient rows.
  SubnetMask mask = prefix_mask(3, {2, 0});
  check_linear(mask, 5, 6, UnitRef{0, 0, 2}, {}, {4, 5}, 4);
}

TEST(GradCheck, LinearMaskedInputUnitsBackwardRegime) {
  // 6 input units (columns), kept {0, 2, 5}: dW (out, 3); the bias is dense.
  SubnetMask mask = prefix_mask(6, {0, 2, 5});
  check_linear(mask, 6, 4, {}, UnitRef{0, 1, 1}, {4, 3}, 4);
}

// ---------------------------------------------------------------------------------------------
// Conv2d

struct ConvCase {
  int cin, cout, k, stride, pad;
};

void check_conv(const SubnetMask& mask, ConvCase cc, UnitRef out_units, UnitRef in_units, const Shape& wgrad_shape) {
  ParamSet ps(mask, 5);
  Conv2d conv(ps, "conv", cc.cin, cc.cout, cc.k, cc.stride, cc.pad, out_units, in_units);
  const int N = 2, H = 5, W = 6;  // odd / non-square to catch H-W mix-ups and stride edges
  const cpu::ConvShape s = conv.shape(N, H, W);
  Tensor x = random_tensor({N, cc.cin, H, W}, 1.f, 21);
  Tensor r = random_tensor({N, cc.cout, s.Ho(), s.Wo()}, 1.f, 22);
  Tensor y = act({N, cc.cout, s.Ho(), s.Wo()}), dx = act({N, cc.cin, H, W});
  Tensor ws = act({conv.workspace_floats(N, H, W)});
  auto loss = [&] {
    conv.forward(x.f32(), y.f32(), N, H, W, ws.f32());
    return dot(y.f32(), r.f32(), y.numel());
  };
  ASSERT_TRUE(conv.weight->grad.defined());
  ASSERT_EQ(conv.weight->grad.shape(), wgrad_shape);
  conv.weight->grad.zero_();
  loss();
  conv.backward(x.f32(), r.f32(), dx.f32(), N, H, W, ws.f32());
  EXPECT_TRUE(check_gradient("conv.weight", conv.weight->value.f32(), conv.weight->grad.f32(),
                             conv.weight->grad.numel(), loss, {}, grad_value_index(*conv.weight)));
  EXPECT_TRUE(check_gradient("conv input", x.f32(), dx.f32(), x.numel(), loss));
  // Weight gradients accumulate; backward without dx still produces the same weight gradient.
  std::vector<float> g1(conv.weight->grad.f32(), conv.weight->grad.f32() + conv.weight->grad.numel());
  conv.backward(x.f32(), r.f32(), nullptr, N, H, W, ws.f32());
  for (size_t i = 0; i < g1.size(); ++i)
    ASSERT_NEAR(conv.weight->grad.f32()[i], 2 * g1[i], 1e-5 * (1 + std::abs(g1[i]))) << i;
}

TEST(GradCheck, Conv2d3x3Stride1Pad1) { check_conv(SubnetMask{}, {3, 4, 3, 1, 1}, {}, {}, {4, 3, 3, 3}); }
TEST(GradCheck, Conv2d3x3Stride2Pad1) { check_conv(SubnetMask{}, {3, 4, 3, 2, 1}, {}, {}, {4, 3, 3, 3}); }
TEST(GradCheck, Conv2d1x1Stride2) { check_conv(SubnetMask{}, {3, 4, 1, 2, 0}, {}, {}, {4, 3, 1, 1}); }
TEST(GradCheck, Conv2d1x1Stride1) { check_conv(SubnetMask{}, {3, 4, 1, 1, 0}, {}, {}, {4, 3, 1, 1}); }
TEST(GradCheck, Conv2d3x3Stride1Pad0) { check_conv(SubnetMask{}, {2, 3, 3, 1, 0}, {}, {}, {3, 2, 3, 3}); }
TEST(GradCheck, Conv2d3x3WinogradPath) { check_conv(SubnetMask{}, {8, 9, 3, 1, 1}, {}, {}, {9, 8, 3, 3}); }
TEST(GradCheck, Conv2d3x3WinogradMaskedOutputChannels) {
  // Backward masking on the Winograd path: 9 output channels, kept {0, 4, 7}.
  check_conv(prefix_mask(9, {0, 4, 7}), {8, 9, 3, 1, 1}, UnitRef{0, 0, 1}, {}, {3, 8, 3, 3});
}
TEST(GradCheck, Conv2d3x3Stride2ChannelsLastPath) { check_conv(SubnetMask{}, {8, 9, 3, 2, 1}, {}, {}, {9, 8, 3, 3}); }
TEST(GradCheck, Conv2d3x3Stride1Pad0ChannelsLastPath) {
  check_conv(SubnetMask{}, {9, 8, 3, 1, 0}, {}, {}, {8, 9, 3, 3});
}
TEST(GradCheck, Conv2dChannelsLastMaskedInputChannels) {
  // 10 input channels, kept {1, 6, 9}, stride 2: dW (8, 3, 3, 3).
  check_conv(prefix_mask(10, {1, 6, 9}), {10, 8, 3, 2, 1}, {}, UnitRef{0, 1, 1}, {8, 3, 3, 3});
}
TEST(GradCheck, Conv2d5x5Stride1Pad2) { check_conv(SubnetMask{}, {2, 3, 5, 1, 2}, {}, {}, {3, 2, 5, 5}); }

// The im2col kernel takes a flat-shift path for "same" convolutions (stride 1, 2*pad = k-1)
// and a row-by-row path otherwise; both must equal the textbook six-loop convolution.
void expect_conv_matches_naive(cpu::ConvShape s) {
  Tensor x = random_tensor({s.N, s.Cin, s.H, s.W}, 1.f, 31);
  Tensor w = random_tensor({s.Cout, s.Cin, s.k, s.k}, 1.f, 32);
  Tensor y = act({s.N, s.Cout, s.Ho(), s.Wo()});
  Tensor ws = act({cpu::conv2d_workspace_floats(s)});
  cpu::conv2d_forward(s, x.f32(), w.f32(), y.f32(), ws.f32());
  const float* X = x.f32();
  const float* Wt = w.f32();
  for (int n = 0; n < s.N; ++n)
    for (int co = 0; co < s.Cout; ++co)
      for (int oh = 0; oh < s.Ho(); ++oh)
        for (int ow = 0; ow < s.Wo(); ++ow) {
          double acc = 0;
          for (int ci = 0; ci < s.Cin; ++ci)
            for (int kh = 0; kh < s.k; ++kh)
              for (int kw = 0; kw < s.k; ++kw) {
                const int ih = oh * s.stride - s.pad + kh, iw = ow * s.stride - s.pad + kw;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc +=
                    double(X[((n * s.Cin + ci) * s.H + ih) * s.W + iw]) * Wt[((co * s.Cin + ci) * s.k + kh) * s.k + kw];
              }
          const float got = y.f32()[((n * s.Cout + co) * s.Ho() + oh) * s.Wo() + ow];
          ASSERT_NEAR(got, acc, 1e-4 * (1 + std::abs(acc))) << n << " " << co << " " << oh << " " << ow;
        }
}

TEST(Conv2dKernel, SameConvolutionsMatchNaive) {
  expect_conv_matches_naive({3, 4, 7, 7, 5, 3, 1, 1});
  expect_conv_matches_naive({2, 3, 5, 6, 2, 5, 1, 2});
  expect_conv_matches_naive({2, 2, 1, 9, 3, 3, 1, 1});  // one-row image: every row is an edge
}

TEST(Conv2dKernel, StridedAndUnpaddedConvolutionsMatchNaive) {
  expect_conv_matches_naive({3, 4, 7, 7, 5, 3, 2, 1});
  expect_conv_matches_naive({2, 3, 6, 5, 2, 3, 1, 0});
  expect_conv_matches_naive({2, 3, 6, 5, 2, 1, 2, 0});
  // Rows wide enough for the vectorised stride-2 gather (16- and 8-lane vectors plus tails).
  expect_conv_matches_naive({2, 3, 12, 40, 4, 3, 2, 1});
  expect_conv_matches_naive({1, 2, 5, 37, 3, 1, 2, 0});
  // At least 8 channels: the channels-last path (vector tails with 19 channels).
  expect_conv_matches_naive({2, 19, 9, 8, 8, 3, 2, 1});
  expect_conv_matches_naive({2, 8, 7, 6, 19, 5, 1, 2});
  expect_conv_matches_naive({2, 9, 6, 7, 10, 3, 1, 0});
}

TEST(GradCheck, Conv2dMaskedOutputChannelsBackwardRegime) {
  // 5 output channels, kept {4, 1}: dW (2, cin, 3, 3) for the kept prefix.
  check_conv(prefix_mask(5, {1, 4}), {3, 5, 3, 1, 1}, UnitRef{0, 0, 1}, {}, {2, 3, 3, 3});
}

TEST(GradCheck, Conv2dMaskedInputChannelsBackwardRegime) {
  // 5 input channels, kept {0, 3, 4}, stride 2: dW (cout, 3, 3, 3).
  check_conv(prefix_mask(5, {0, 3, 4}), {5, 4, 3, 2, 1}, {}, UnitRef{0, 1, 1}, {4, 3, 3, 3});
}

// ---------------------------------------------------------------------------------------------
// BatchNorm2d (training mode) and LayerNorm

void check_batchnorm(const SubnetMask& mask, int C, UnitRef units, int64_t grad_extent) {
  ParamSet ps(mask, 7);
  BatchNorm2d bn(ps, "bn", C, units);
  randomize(*bn.gamma, 1.f, 0.5f, 31);
  randomize(*bn.beta, 0.f, 0.5f, 32);
  const int N = 3, HW = 5;
  Tensor x = random_tensor({N, C, HW}, 2.f, 33), r = random_tensor({N, C, HW}, 1.f, 34);
  // Per-channel offsets so that the batch means differ from zero.
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 0.5f * static_cast<float>((i / HW) % C);
  Tensor y = act({N, C, HW}), dx = act({N, C, HW});
  auto loss = [&] {
    bn.forward(x.f32(), y.f32(), N, HW, true);
    return dot(y.f32(), r.f32(), y.numel());
  };
  ASSERT_EQ(bn.gamma->grad_extent(), grad_extent);
  ASSERT_EQ(bn.beta->grad_extent(), grad_extent);
  bn.gamma->grad.zero_();
  bn.beta->grad.zero_();
  loss();
  bn.backward(x.f32(), r.f32(), dx.f32(), N, HW);
  EXPECT_TRUE(check_gradient("bn.weight", bn.gamma->value.f32(), bn.gamma->grad.f32(), grad_extent, loss, {},
                             grad_value_index(*bn.gamma)));
  EXPECT_TRUE(check_gradient("bn.bias", bn.beta->value.f32(), bn.beta->grad.f32(), grad_extent, loss, {},
                             grad_value_index(*bn.beta)));
  EXPECT_TRUE(check_gradient("bn input", x.f32(), dx.f32(), x.numel(), loss));
}

TEST(GradCheck, BatchNorm2dTraining) { check_batchnorm(SubnetMask{}, 4, {}, 4); }

TEST(GradCheck, BatchNorm2dMaskedChannelsBackwardRegime) {
  check_batchnorm(prefix_mask(5, {3, 0}), 5, UnitRef{0, 0, 1}, 2);
}

TEST(GradCheck, BatchNorm2dRunningStatistics) {
  // Training forward updates running stats as PyTorch (momentum 0.1, unbiased variance);
  // eval forward then normalises with them.
  SubnetMask mask;
  ParamSet ps(mask, 7);
  BatchNorm2d bn(ps, "bn", 2);
  const int N = 2, HW = 3;
  Tensor x = random_tensor({N, 2, HW}, 1.f, 35), y = act({N, 2, HW});
  bn.forward(x.f32(), y.f32(), N, HW, true);
  for (int c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    for (int n = 0; n < N; ++n)
      for (int p = 0; p < HW; ++p) m += x.f32()[(n * 2 + c) * HW + p];
    m /= N * HW;
    for (int n = 0; n < N; ++n)
      for (int p = 0; p < HW; ++p) v += std::pow(x.f32()[(n * 2 + c) * HW + p] - m, 2);
    EXPECT_NEAR(bn.running_mean->value.f32()[c], 0.1 * m, 1e-6);
    EXPECT_NEAR(bn.running_var->value.f32()[c], 0.9 + 0.1 * v / (N * HW - 1), 1e-6);
  }
  Tensor ye = act({N, 2, HW});
  bn.forward(x.f32(), ye.f32(), N, HW, false);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < 2; ++c)
      for (int p = 0; p < HW; ++p) {
        const int i = (n * 2 + c) * HW + p;
        const double want =
            (x.f32()[i] - bn.running_mean->value.f32()[c]) / std::sqrt(bn.running_var->value.f32()[c] + 1e-5);
        EXPECT_NEAR(ye.f32()[i], want, 1e-5);
      }
}

/// Statistics for `rows` rows and gamma ~ 1 +- 0.5, beta ~ 0 +- 0.5 drawn from `seed`, `seed` + 1.
void randomize_layernorm(LayerNorm& ln, int64_t rows, uint64_t seed) {
  ln.allocate_stats(rows);
  randomize(*ln.gamma, 1.f, 0.5f, seed);
  randomize(*ln.beta, 0.f, 0.5f, seed + 1);
}

TEST(GradCheck, LayerNorm) {
  SubnetMask mask;
  ParamSet ps(mask, 9);
  const int C = 6;
  const int64_t rows = 4;
  LayerNorm ln(ps, "ln", C);
  randomize_layernorm(ln, rows, 41);
  Tensor x = random_tensor({rows, C}, 2.f, 43), r = random_tensor({rows, C}, 1.f, 44);
  Tensor y = act({rows, C});
  auto loss = [&] {
    ln.forward(x.f32(), y.f32(), rows);
    return dot(y.f32(), r.f32(), y.numel());
  };
  ln.gamma->grad.zero_();
  ln.beta->grad.zero_();
  loss();
  // dx accumulates (+=, the residual stream): start from a known non-zero dx.
  Tensor base = random_tensor({rows, C}, 1.f, 45), dx = random_tensor({rows, C}, 1.f, 45);
  ln.backward(x.f32(), r.f32(), dx.f32(), rows);
  Tensor g = act({rows, C});
  for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] = dx.f32()[i] - base.f32()[i];
  EXPECT_TRUE(check_gradient("ln.weight", ln.gamma->value.f32(), ln.gamma->grad.f32(), C, loss));
  EXPECT_TRUE(check_gradient("ln.bias", ln.beta->value.f32(), ln.beta->grad.f32(), C, loss));
  EXPECT_TRUE(check_gradient("ln input (accumulated)", x.f32(), g.f32(), x.numel(), loss));
}

// The GPT stores no LayerNorm output: backward recomputes it from the stored statistics and
// must get the forward's bits (odd width: vector remainder; 1 and 2 threads: row split).
TEST(LayerNorm, RecomputedOutputHasTheForwardsBits) {
  SubnetMask mask;
  ParamSet ps(mask, 9);
  const int C = 37;
  const int64_t rows = 23;
  LayerNorm ln(ps, "ln", C);
  randomize_layernorm(ln, rows, 51);
  Tensor x = random_tensor({rows, C}, 3.f, 53), y = act({rows, C}), again = act({rows, C});
  const int saved = omp_get_max_threads();
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    ln.forward(x.f32(), y.f32(), rows);
    std::fill(again.f32(), again.f32() + again.numel(), std::nanf(""));
    ln.recompute(x.f32(), again.f32(), rows);
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(again.f32()[i], y.f32()[i]) << i << " threads " << threads;
  }
  omp_set_num_threads(saved);
}

// ---------------------------------------------------------------------------------------------
// Activations, pooling, softmax cross-entropy (kernels)

TEST(GradCheck, Relu) {
  const int64_t n = 40;
  Tensor x = random_tensor({n}, 1.f, 51), r = random_tensor({n}, 1.f, 52), y = act({n});
  // Keep inputs away from the kink at 0 (the step never crosses it).
  for (int64_t i = 0; i < n; ++i) x.f32()[i] += x.f32()[i] < 0 ? -0.05f : 0.05f;
  auto loss = [&] {
    cpu::relu_forward(x.f32(), y.f32(), n);
    return dot(y.f32(), r.f32(), n);
  };
  loss();
  Tensor dx = act({n});
  cpu::relu_backward(y.f32(), r.f32(), dx.f32(), n, false);
  EXPECT_TRUE(check_gradient("relu input", x.f32(), dx.f32(), n, loss));
  // accumulate = true adds to dx; false overwrites.
  Tensor acc = random_tensor({n}, 1.f, 53), base = random_tensor({n}, 1.f, 53);
  cpu::relu_backward(y.f32(), r.f32(), acc.f32(), n, true);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(acc.f32()[i], base.f32()[i] + dx.f32()[i]) << i;
  Tensor over = random_tensor({n}, 1.f, 54);
  cpu::relu_backward(y.f32(), r.f32(), over.f32(), n, false);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(over.f32()[i], dx.f32()[i]) << i;
}

TEST(GradCheck, Gelu) {
  const int64_t n = 48;
  Tensor x = random_tensor({n}, 3.f, 55), r = random_tensor({n}, 1.f, 56), y = act({n});
  auto loss = [&] {
    cpu::gelu_forward(x.f32(), y.f32(), n);
    return dot(y.f32(), r.f32(), n);
  };
  loss();
  for (int64_t i = 0; i < n; ++i) {  // tanh approximation (Hendrycks & Gimpel)
    const double v = x.f32()[i];
    const double want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y.f32()[i], want, 1e-5) << v;
  }
  Tensor dx = act({n});
  cpu::gelu_backward(x.f32(), r.f32(), dx.f32(), n);
  EXPECT_TRUE(check_gradient("gelu input", x.f32(), dx.f32(), n, loss, {1e-3f}));
}

TEST(GradCheck, GlobalAvgPool) {
  const int N = 2, C = 3, HW = 10;
  Tensor x = random_tensor({N, C, HW}, 1.f, 61), r = random_tensor({N, C}, 1.f, 62), y = act({N, C});
  auto loss = [&] {
    cpu::global_avg_pool_forward(x.f32(), y.f32(), N, C, HW);
    return dot(y.f32(), r.f32(), y.numel());
  };
  loss();
  Tensor dx = act({N, C, HW});
  cpu::global_avg_pool_backward(r.f32(), dx.f32(), N, C, HW);
  EXPECT_TRUE(check_gradient("avgpool input", x.f32(), dx.f32(), x.numel(), loss));
}

void check_max_pool(int k, int s) {
  const int N = 2, C = 2, H = 6, W = 7;
  const int Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
  // Distinct values 0.05 apart in a random order: a step of 1e-2 never changes an argmax.
  Tensor x = act({N, C, H, W});
  std::vector<int> perm(x.numel());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(63));
  for (size_t i = 0; i < perm.size(); ++i) x.f32()[i] = 0.05f * perm[i] - 3.f;
  Tensor r = random_tensor({N, C, Ho, Wo}, 1.f, 64), y = act({N, C, Ho, Wo});
  Tensor arg = Tensor::zeros({N, C, Ho, Wo}, MemCategory::activations, DType::i32);
  auto loss = [&] {
    cpu::max_pool_forward(x.f32(), y.f32(), arg.i32(), N, C, H, W, k, s);
    return dot(y.f32(), r.f32(), y.numel());
  };
  loss();
  for (int nc = 0; nc < N * C; ++nc)  // forward value: the window maximum
    for (int oh = 0; oh < Ho; ++oh)
      for (int ow = 0; ow < Wo; ++ow) {
        float m = -1e30f;
        for (int i = 0; i < k; ++i)
          for (int j = 0; j < k; ++j) m = std::max(m, x.f32()[nc * H * W + (oh * s + i) * W + ow * s + j]);
        EXPECT_EQ(y.f32()[(nc * Ho + oh) * Wo + ow], m);
      }
  Tensor dx = random_tensor({N, C, H, W}, 1.f, 65);  // garbage: backward must zero it first
  cpu::max_pool_backward(r.f32(), arg.i32(), dx.f32(), N, C, H, W, Ho, Wo);
  FdOptions opt;
  opt.max_probes = 1000;  // every input
  EXPECT_TRUE(check_gradient("maxpool input", x.f32(), dx.f32(), x.numel(), loss, opt));
}

TEST(GradCheck, MaxPool2x2Stride2) { check_max_pool(2, 2); }
TEST(GradCheck, MaxPool3x3Stride2Overlapping) { check_max_pool(3, 2); }
TEST(GradCheck, MaxPool3x3Stride1Overlapping) { check_max_pool(3, 1); }

TEST(GradCheck, SoftmaxCrossEntropy) {
  const int64_t rows = 5;
  const int V = 7;
  Tensor logits = random_tensor({rows, V}, 2.f, 71);
  Tensor t = Tensor::zeros({rows}, MemCategory::activations, DType::i32);
  for (int64_t i = 0; i < rows; ++i) t.i32()[i] = static_cast<int32_t>((3 * i + 1) % V);
  auto loss = [&] { return cpu::cross_entropy(logits.f32(), t.i32(), nullptr, rows, V, 0.f, nullptr); };
  // Value against a double-precision reference, and the argmax count.
  double want = 0;
  int64_t want_correct = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* l = logits.f32() + i * V;
    const double m = *std::max_element(l, l + V);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(l[v] - m);
    want += -(l[t.i32()[i]] - m - std::log(z));
    want_correct += std::max_element(l, l + V) - l == t.i32()[i];
  }
  want /= rows;
  int64_t correct = -1;
  Tensor dl = act({rows, V});
  EXPECT_NEAR(cpu::cross_entropy(logits.f32(), t.i32(), dl.f32(), rows, V, 1.f / rows, &correct), want, 1e-6);
  EXPECT_EQ(correct, want_correct);
  for (int64_t i = 0; i < rows; ++i) {  // each row of dlogits = (softmax - onehot) / rows sums to 0
    double s = 0;
    for (int v = 0; v < V; ++v) s += dl.f32()[i * V + v];
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
  EXPECT_TRUE(check_gradient("cross-entropy logits", logits.f32(), dl.f32(), logits.numel(), loss));
  // softmax_rows agrees with the probabilities dlogits hold (rows * dl + onehot).
  Tensor sm = act({rows, V});
  sm.copy_from(logits);
  cpu::softmax_rows(sm.f32(), rows, V);
  for (int64_t i = 0; i < rows; ++i)
    for (int v = 0; v < V; ++v)
      EXPECT_NEAR(sm.f32()[i * V + v], rows * dl.f32()[i * V + v] + (v == t.i32()[i]), 1e-6) << i << " " << v;
  // In place (the classifier head writes dlogits over the logits): the same loss and bits.
  Tensor in_place = act({rows, V});
  in_place.copy_from(logits);
  EXPECT_EQ(cpu::cross_entropy(in_place.f32(), t.i32(), in_place.f32(), rows, V, 1.f / rows, nullptr), loss());
  EXPECT_EQ(std::memcmp(in_place.f32(), dl.f32(), dl.nbytes()), 0);
}

// ---------------------------------------------------------------------------------------------
// Whole models

ModelConfig mlp_config() {
  ModelConfig c;
  c.name = ModelKind::mlp;
  c.hidden = {16, 12};
  c.in_channels = 1;
  c.image_size = 4;
  c.classes = 10;
  return c;
}

ModelConfig resnet_config() {
  ModelConfig c = test::tiny_resnet();
  c.blocks_per_stage = 1;  // one block per stage keeps the finite differences short
  return c;
}

/// Finite-difference check of every held gradient of `model` (a sample of each tensor).
void check_model(Model& model, const Batch& batch, const FdOptions& opt, int* checked_params) {
  randomize_norms(model);
  model.zero_grad();
  model.forward(batch, true, nullptr);
  model.backward();
  auto loss = [&] { return model.forward(batch, true, nullptr); };
  *checked_params = 0;
  for (Param* p : model.params().trainable()) {
    if (!p->grad.defined()) continue;
    // Copy: FD forwards do not touch gradients, but keep the analytic values fixed anyway.
    std::vector<float> g(p->grad.f32(), p->grad.f32() + p->grad.numel());
    FdOptions o = opt;
    o.seed = opt.seed + *checked_params;
    EXPECT_TRUE(check_gradient(p->name, p->value.f32(), g.data(), p->grad.numel(), loss, o, grad_value_index(*p)));
    ++*checked_params;
  }
}

FdOptions model_options() {
  FdOptions o;
  o.eps = 1e-3f;
  o.max_probes = 12;
  o.witness_steps = {3e-4f, 1e-4f};
  o.max_nonsmooth = 0.34;  // ReLU kinks inside the steps
  return o;
}

TEST(GradCheck, MlpModel) {
  ModelConfig c = mlp_config();
  auto units = model_units(c);
  SubnetMask mask = full_mask(units);
  auto model = make_model(c, mask, 6, 17);
  Batch b = random_image_batch(c, 6, 81);
  int n = 0;
  check_model(*model, b, model_options(), &n);
  EXPECT_EQ(n, 6);  // net.1, net.3, net.5: weight + bias
}

TEST(GradCheck, ResNetModel) {
  // Stem conv + BN, block 0 (identity shortcut: the residual add), block 1 (stride 2 with a
  // 1x1 projection shortcut + BN), global average pool, Linear head.
  ModelConfig c = resnet_config();
  auto units = model_units(c);
  SubnetMask mask = full_mask(units);
  auto model = make_model(c, mask, 3, 19);
  Batch b = random_image_batch(c, 3, 83);
  int n = 0;
  check_model(*model, b, model_options(), &n);
  EXPECT_EQ(n, 3 + 2 * 6 + 3 + 2);  // stem (3), 2 branches (6 each), shortcut (3), fc (2)
}

/// Subnetwork s of an S = 4, keep = 0.5 plan.
SubnetMask subnet(const ModelConfig& c, const char* regime, const char* granularity, int s) {
  return test::planned_mask(model_units(c), regime, granularity, 4, 0.5, s, 3);
}

struct MaskedCase {
  const char* model;
  const char* regime;
  const char* granularity;
};

class MaskedModelGradCheck : public ::testing::TestWithParam<MaskedCase> {};

TEST_P(MaskedModelGradCheck, HeldGradientsMatchFiniteDifferences) {
  // The subnetwork's own loss: forward masking (compact layers, 1/keep scaling, dropped
  // blocks are the identity or the shortcut alone) and backward masking (kept-prefix weight
  // gradients, full input gradients).
  const MaskedCase mc = GetParam();
  ModelConfig c = std::string(mc.model) == "mlp" ? mlp_config() : resnet_config();
  for (int s = 0; s < 4; ++s) {
    SCOPED_TRACE("subnetwork " + std::to_string(s));
    SubnetMask mask = subnet(c, mc.regime, mc.granularity, s);
    auto model = make_model(c, mask, 3, 23);
    Batch b = random_image_batch(c, 3, 85 + s);
    int n = 0;
    FdOptions o = model_options();
    o.max_probes = 6;
    check_model(*model, b, o, &n);
    EXPECT_GT(n, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    GradCheck, MaskedModelGradCheck,
    ::testing::Values(MaskedCase{"mlp", "forward", "neuron"}, MaskedCase{"mlp", "backward", "neuron"},
                      MaskedCase{"resnet", "forward", "neuron"}, MaskedCase{"resnet", "backward", "neuron"},
                      MaskedCase{"resnet", "forward", "block"}, MaskedCase{"resnet", "backward", "block"}),
    [](const ::testing::TestParamInfo<MaskedCase>& i) {
      return std::string(i.param.model) + "_" + i.param.regime + "_" + i.param.granularity;
    });

}  // namespace
}  // namespace subdp
