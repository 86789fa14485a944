// Stochastic depth (mask.regime = "stochastic", issue 25): the per-step draw drops each block
// with probability 1 - keep, independently per rank and step; a step with some blocks
// dropped computes exactly what the forward-masked model of the same kept blocks computes
// (same losses and gradients, bit for bit), and dropped blocks get no gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

TEST(StochasticDepth, DropRateIsOneMinusKeepAndDrawsDiffer) {
  for (const double keep : {0.25, 0.5, 0.8}) {
    const int steps = 1000, blocks = 4;
    int dropped = 0;
    for (int64_t t = 0; t < steps; ++t)
      for (int b = 0; b < blocks; ++b) dropped += stochastic_drop(7, 0, t, b, keep);
    const double n = steps * blocks, p = 1 - keep, sigma = std::sqrt(n * p * (1 - p));
    EXPECT_LE(std::abs(dropped - n * p), 3 * sigma) << "keep " << keep << ": " << dropped << " of " << n;
  }
  // Ranks and steps draw differently: over 200 steps of 4 blocks the patterns disagree often.
  int rank_diff = 0, step_diff = 0;
  for (int64_t t = 0; t < 200; ++t)
    for (int b = 0; b < 4; ++b) {
      rank_diff += stochastic_drop(7, 0, t, b, 0.5) != stochastic_drop(7, 1, t, b, 0.5);
      step_diff += stochastic_drop(7, 0, t, b, 0.5) != stochastic_drop(7, 0, t + 1, b, 0.5);
    }
  EXPECT_GT(rank_diff, 300);  // about 400 expected for independent draws
  EXPECT_GT(step_diff, 300);
  for (int64_t t = 0; t < 100; ++t) EXPECT_FALSE(stochastic_drop(7, 0, t, 0, 1.0));  // keep 1 drops nothing
}

/// A step of the full model with the blocks that subnetwork 0 of a forward block plan drops
/// skipped (and its scale) equals that forward-masked subnetwork's step.
void expect_drop_equals_forward_masked(const ModelConfig& c, const Batch& batch) {
  const ModelUnits units = model_units(c);
  const SubnetMask sub_mask = test::planned_mask(units, "forward", "block", 2, 0.5, 0, 3);
  auto full = make_model(c, full_mask(units), static_cast<int>(batch.n), 11);
  auto sub = make_model(c, sub_mask, static_cast<int>(batch.n), 11);
  std::vector<char> dropped(units.blocks.size()), dense(units.blocks.size());
  for (size_t b = 0; b < dropped.size(); ++b) {
    dropped[b] = !sub_mask.block_kept[b];
    dense[b] = sub_mask.block_dense[b];
  }
  ASSERT_GT(std::count(dropped.begin(), dropped.end(), 1), 0);
  full->set_dropped_blocks(dropped, dense, sub_mask.scale);
  // Evaluation runs every block unscaled: the full model's own loss (before any training
  // forward, which would move BatchNorm running statistics).
  auto plain = make_model(c, full_mask(units), static_cast<int>(batch.n), 11);
  EXPECT_EQ(full->forward(batch, false, nullptr), plain->forward(batch, false, nullptr)) << c.name;
  const double loss = test::forward_backward(*full, batch);
  EXPECT_EQ(loss, test::forward_backward(*sub, batch)) << c.name;
  std::map<std::string, Param*> held;
  for (Param* p : sub->params().trainable()) held[p->name] = p;
  for (Param* p : full->params().trainable()) {
    const bool dropped_block = p->block >= 0 && dropped[p->block];
    if (dropped_block) {
      for (int64_t i = 0; i < p->grad.numel(); ++i) ASSERT_EQ(p->grad.f32()[i], 0.f) << p->name;
      continue;
    }
    ASSERT_TRUE(held.count(p->name)) << p->name;
    ASSERT_EQ(std::memcmp(p->grad.f32(), held[p->name]->grad.f32(), p->grad.nbytes()), 0) << c.name << " " << p->name;
  }
}

TEST(StochasticDepth, DroppedStepEqualsForwardMaskedSubnetworkResNet) {
  const ModelConfig c = test::tiny_resnet();
  expect_drop_equals_forward_masked(c, test::random_image_batch(c, 3, 5));
}

TEST(StochasticDepth, DroppedStepEqualsForwardMaskedSubnetworkGpt) {
  ModelConfig c = test::tiny_gpt();
  c.depth = 4;
  expect_drop_equals_forward_masked(c, test::token_batch(2, c.context, c.vocab, 5));
}

TEST(StochasticDepth, DroppedStepEqualsForwardMaskedSubnetworkLlama) {
  ModelConfig c = test::tiny_llama();
  c.depth = 4;
  expect_drop_equals_forward_masked(c, test::token_batch(2, c.context, c.vocab, 5));
}

}  // namespace
}  // namespace subdp
