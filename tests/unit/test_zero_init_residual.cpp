// model.zero_init_residual: every residual branch starts as the zero function (Goyal et al.
// 2017, section 5.1), so each block starts as its shortcut. ResNet: the last BatchNorm gamma
// of every branch is 0; on the first backward no gradient reaches the branch's convolutions
// while that gamma does learn. GPT: both output projections (attention proj, MLP fc2) are 0;
// no gradient reaches qkv or fc while the projections learn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/subnet/plan.h"
#include "models/model.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

/// config with model.zero_init_residual set to on.
ModelConfig with_zero_init(ModelConfig config, bool on) {
  config.zero_init_residual = on;
  return config;
}

ModelConfig small_resnet(bool zero_init) { return with_zero_init(test::tiny_resnet(), zero_init); }
ModelConfig small_gpt(bool zero_init) { return with_zero_init(test::tiny_gpt(), zero_init); }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.f32()[i])));
  return m;
}

/// Runs one forward and backward of a 6-example batch on the full model.
std::unique_ptr<Model> model_after_backward(const ModelConfig& c) {
  auto model = make_model(c, full_mask(model_units(c)), 6, 7);
  const Batch b = c.name == ModelKind::gpt ? test::token_batch(6, c.context, c.vocab, 3)  // (6, T) tokens
                                           : test::random_image_batch(c, 6, 3);           // (6, 1, 8, 8)
  model->zero_grad();
  model->forward(b, true, nullptr);
  model->backward();
  return model;
}

TEST(ResNetInit, ZeroInitResidualZeroesOnlyTheBranchTailGamma) {
  auto model = model_after_backward(small_resnet(true));
  int zeroed = 0, ones = 0;
  for (Param* p : model->params().all()) {
    if (!ends_with(p->name, ".weight") || p->full_shape.size() != 1) continue;  // BatchNorm gammas
    const bool tail = ends_with(p->name, ".b2.weight");
    EXPECT_EQ(max_abs(p->value), tail ? 0.0 : 1.0) << p->name;
    zeroed += tail;
    ones += !tail;
  }
  EXPECT_EQ(zeroed, 4);  // one per block
  EXPECT_EQ(ones, 6);    // stem, b1 of every block, the projection shortcut
}

TEST(ResNetInit, ZeroInitResidualGradientReachesGammaNotTheBranchConvs) {
  auto model = model_after_backward(small_resnet(true));
  int tails = 0;
  for (Param* p : model->params().trainable()) {
    if (p->block < 0) continue;                 // stem, projection shortcuts, head: outside the branches
    ASSERT_TRUE(p->grad.defined()) << p->name;  // the full model trains every branch
    const auto has = [&](const char* part) { return p->name.find(part) != std::string::npos; };
    const bool before_tail = has(".c1.") || has(".c2.") || has(".b1.");  // upstream of bn2
    if (before_tail) EXPECT_EQ(max_abs(p->grad), 0.0) << p->name;
    if (ends_with(p->name, ".b2.weight")) {
      EXPECT_GT(max_abs(p->grad), 1e-6) << p->name;
      ++tails;
    }
  }
  EXPECT_EQ(tails, 4);
}

TEST(ResNetInit, DefaultInitGivesTheBranchConvsGradients) {
  auto model = model_after_backward(small_resnet(false));
  for (Param* p : model->params().trainable())
    if (ends_with(p->name, ".c2.weight")) EXPECT_GT(max_abs(p->grad), 1e-6) << p->name;
}

TEST(ResNetInit, ZeroInitResidualInAForwardMaskedSubnetwork) {
  // Block level, keep 0.5, S = 4: each subnetwork holds 2 of the 4 branches, whose tail
  // gammas start at 0 as in the full model; dropped branches have no parameters at all.
  const ModelConfig c = small_resnet(true);
  MaskConfig m;
  m.regime = MaskRegime::forward;
  m.keep = 0.5;
  const ModelUnits units = model_units(c);
  const SubnetworkPlan plan = make_plan(units, m, 4);
  for (int subnet = 0; subnet < 4; ++subnet) {
    auto model = make_model(c, make_subnet_mask(plan, units, subnet, true), 6, 7);
    int tails = 0;
    for (Param* p : model->params().all())
      if (ends_with(p->name, ".b2.weight")) {
        EXPECT_EQ(max_abs(p->value), 0.0) << p->name;
        ++tails;
      }
    EXPECT_EQ(tails, 2) << "subnetwork " << subnet;
  }
}

bool is_branch_output(const std::string& name) {
  return ends_with(name, ".proj.weight") || ends_with(name, ".fc2.weight");
}

TEST(GptInit, ZeroInitResidualZeroesOnlyTheOutputProjections) {
  auto model = model_after_backward(small_gpt(true));
  int zeroed = 0;
  for (Param* p : model->params().trainable()) {
    if (is_branch_output(p->name)) {
      EXPECT_EQ(max_abs(p->value), 0.0) << p->name;
      EXPECT_GT(max_abs(p->grad), 1e-6) << p->name;  // the projections learn
      ++zeroed;
    }
    if (ends_with(p->name, ".qkv.weight") || ends_with(p->name, ".fc.weight")) {
      EXPECT_GT(max_abs(p->value), 0.0) << p->name;
      EXPECT_EQ(max_abs(p->grad), 0.0) << p->name;  // nothing flows back through a zero projection
    }
  }
  EXPECT_EQ(zeroed, 4);  // two per block
}

TEST(GptInit, DefaultInitDrawsTheOutputProjections) {
  auto model = model_after_backward(small_gpt(false));
  for (Param* p : model->params().trainable())
    if (is_branch_output(p->name)) EXPECT_GT(max_abs(p->value), 0.0) << p->name;
}

}  // namespace
}  // namespace subdp
