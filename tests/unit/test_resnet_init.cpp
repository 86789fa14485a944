// model.zero_init_residual: the last BatchNorm gamma of every residual branch starts at 0
// (Goyal et al. 2017, section 5.1), so each block starts as its shortcut and, on the first
// backward, no gradient reaches the branch's convolutions while bn2's gamma does learn.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "engine/plan.h"
#include "models/model.h"
#include "tests/unit/gradcheck.h"

namespace subdp {
namespace {

ModelConfig small_resnet(bool zero_init) {
  ModelConfig c;
  c.name = "resnet";
  c.widths = {4, 8};
  c.blocks_per_stage = 2;
  c.image_size = 8;
  c.zero_init_residual = zero_init;
  return c;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.f32()[i])));
  return m;
}

/// Runs one forward and backward of a 6-example batch on the full model.
std::unique_ptr<Model> model_after_backward(bool zero_init) {
  const ModelConfig c = small_resnet(zero_init);
  auto model = make_model(c, full_mask(model_units(c)), 6, 7);
  Batch b;
  b.x = test::random_tensor({6, 1, 8, 8}, 1.f, 3);
  b.y = Tensor::zeros({6}, MemCategory::activations, DType::i32);
  for (int i = 0; i < 6; ++i) b.y.i32()[i] = i % 10;
  b.n = 6;
  model->zero_grad();
  model->forward(b, true, nullptr);
  model->backward();
  return model;
}

TEST(ResNetInit, ZeroInitResidualZeroesOnlyTheBranchTailGamma) {
  auto model = model_after_backward(true);
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
  auto model = model_after_backward(true);
  for (Param* p : model->params().trainable()) {
    if (p->block < 0 || !p->grad.defined()) continue;
    const bool conv = p->name.find(".c1.") != std::string::npos || p->name.find(".c2.") != std::string::npos ||
                      p->name.find(".b1.") != std::string::npos;
    if (conv) EXPECT_EQ(max_abs(p->grad), 0.0) << p->name;
    if (ends_with(p->name, ".b2.weight")) EXPECT_GT(max_abs(p->grad), 1e-6) << p->name;
  }
}

TEST(ResNetInit, DefaultInitGivesTheBranchConvsGradients) {
  auto model = model_after_backward(false);
  for (Param* p : model->params().trainable())
    if (ends_with(p->name, ".c2.weight")) EXPECT_GT(max_abs(p->grad), 1e-6) << p->name;
}

}  // namespace
}  // namespace subdp
