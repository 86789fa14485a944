// Masking invariants of the design brief on the MLP and the ResNet, block and neuron level:
//  3. a forward-masked subnetwork equals the full model (same seed) with the dropped units
//     zeroed and the same 1/keep scaling moved into the weights;
//  4. backward-masked gradients equal the full model's gradients restricted to kept units,
//     and parameters of dropped blocks hold no gradient tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"
#include "tests/unit/gradcheck.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

using test::grad_value_index;
using test::random_image_batch;
using test::randomize_norms;
using test::tiny_resnet;
using test::value_full_index;

constexpr int kS = 4;
constexpr uint64_t kSeed = 1234;

ModelConfig mlp_config() {
  ModelConfig c;
  c.name = ModelKind::mlp;
  c.hidden = {16, 12, 8};  // hidden layers 0 and 2 are maskable (two unit layers)
  c.in_channels = 1;
  c.image_size = 4;
  c.classes = 10;
  return c;
}

/// Largest |gradient| over all held gradients (an absolute floor for comparisons of
/// parameters whose own gradient is tiny).
double max_grad(Model& m) {
  double g = 0;
  for (Param* p : m.params().trainable())
    if (p->grad.defined())
      for (int64_t i = 0; i < p->grad.numel(); ++i) g = std::max(g, static_cast<double>(std::abs(p->grad.f32()[i])));
  return g;
}

Param* find_param(Model& m, const std::string& name) {
  for (Param* p : m.params().all())
    if (p->name == name) return p;
  return nullptr;
}

/// Unit index (global) of element `full_index` of a unit-sliced parameter.
int unit_of(const Param& p, int64_t full_index) {
  int64_t inner = 1;
  for (size_t i = p.unit.axis + 1; i < p.full_shape.size(); ++i) inner *= p.full_shape[i];
  const int64_t ext = p.full_shape.at(p.unit.axis);
  return static_cast<int>((full_index / inner) % ext / p.unit.unit_size);
}

struct Case {
  const char* model;
  const char* granularity;
  double keep;
  std::vector<int> pinned = {};
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  std::string s = std::string(i.param.model) + "_" + i.param.granularity + "_keep" +
                  std::to_string(static_cast<int>(std::lround(i.param.keep * 100)));
  for (int b : i.param.pinned) s += "_pin" + std::to_string(b);
  return s;
}

struct PlanSetup {
  ModelConfig config;
  ModelUnits units;
  SubnetworkPlan plan;
};

PlanSetup make_setup(const Case& c, const char* regime) {
  PlanSetup s;
  s.config = std::string(c.model) == "mlp" ? mlp_config() : tiny_resnet();
  s.units = model_units(s.config);
  MaskConfig mc;
  mc.regime = test::named<MaskRegime>(regime);
  mc.granularity = test::named<Granularity>(c.granularity);
  mc.keep = c.keep;
  mc.seed = 5;
  mc.pinned = c.pinned;
  s.plan = make_plan(s.units, mc, kS);
  return s;
}

/// Zeroes the units subnetwork s drops in the full model and moves the forward-masking
/// scale into the weights. Returns, per parameter name, the factor applied to each element
/// (0 = dropped, scale = scaled, 1 = untouched).
/// The unit structure comes from the subnetwork's parameter of the same name: a model built
/// with full_mask() does not know the granularity (the ResNet marks no channel units then).
std::map<std::string, std::vector<float>> zero_and_scale(Model& full, Model& sub, const PlanSetup& st, int s,
                                                         float scale) {
  std::map<std::string, std::vector<float>> mult;
  const bool neuron = st.plan.granularity == Granularity::neuron;
  for (Param* p : full.params().trainable()) {
    std::vector<float> m(p->value.numel(), 1.f);
    const Param* sp = find_param(sub, p->name);
    if (neuron && sp && sp->unit.layer >= 0) {
      // Axis 0: the unit's producer (rows / bias / BN entries) -> zero when dropped.
      // Axis 1: its consumer (columns of the next Linear, input channels of conv2) -> zero
      // when dropped, scaled by 1/keep when kept (the scale sits on the hidden activation).
      for (int64_t i = 0; i < p->value.numel(); ++i) {
        const bool kept = st.plan.keeps_unit(s, sp->unit.layer, unit_of(*sp, i));
        m[i] = !kept ? 0.f : sp->unit.axis == 1 ? scale : 1.f;
      }
    }
    if (!neuron && p->block >= 0) {
      // Block level: the branch output bn2 is multiplied by 0 (dropped) or 1/keep (kept
      // unit); a pinned block is dense and not scaled.
      const std::string b2 = "blocks." + std::to_string(p->block) + ".b2.";
      if (p->name.rfind(b2, 0) == 0) {
        const bool pinned = st.plan.block_group.at(p->block) < 0;
        const float f = !st.plan.keeps_block(s, p->block) ? 0.f : pinned ? 1.f : scale;
        std::fill(m.begin(), m.end(), f);
      }
    }
    float* v = p->value.f32();
    for (int64_t i = 0; i < p->value.numel(); ++i) v[i] *= m[i];
    mult[p->name] = m;
  }
  return mult;
}

bool block_kept(const PlanSetup& st, int s, int b) { return st.plan.keeps_block(s, b); }

class ForwardMasking : public ::testing::TestWithParam<Case> {};

// Invariant 3.
TEST_P(ForwardMasking, SubnetworkEqualsZeroedAndScaledFullModel) {
  const Case c = GetParam();
  const PlanSetup st = make_setup(c, "forward");
  const float scale = static_cast<float>(1.0 / c.keep);
  const int N = 6;
  for (int s = 0; s < kS; ++s) {
    SCOPED_TRACE("subnetwork " + std::to_string(s));
    SubnetMask mask = make_subnet_mask(st.plan, st.units, s, true);
    EXPECT_FLOAT_EQ(mask.scale, scale);
    auto sub = make_model(st.config, mask, N, kSeed);
    auto full = make_model(st.config, full_mask(st.units), N, kSeed);
    randomize_norms(*sub);
    randomize_norms(*full);

    // The subnetwork is compact: kept prefix only along unit axes, no parameters at all
    // for a dropped block's branch.
    for (Param* p : sub->params().all()) {
      if (p->unit.layer >= 0) {
        ASSERT_EQ(p->value_extent(), static_cast<int64_t>(mask.layers[p->unit.layer].kept) * p->unit.unit_size)
            << p->name;
      } else {
        ASSERT_EQ(p->value.shape(), p->full_shape) << p->name;
      }
      if (p->block >= 0) EXPECT_TRUE(block_kept(st, s, p->block)) << p->name << " of a dropped block";
      // Values are the full model's at the mapped positions (same seed, own layout).
      Param* f = find_param(*full, p->name);
      ASSERT_NE(f, nullptr) << p->name;
      const auto full_idx = value_full_index(*p);
      for (int64_t i = 0; i < p->value.numel(); ++i)
        ASSERT_EQ(p->value.f32()[i], f->value.f32()[full_idx[i]]) << p->name << " [" << i << "]";
    }

    const auto mult = zero_and_scale(*full, *sub, st, s, scale);
    Batch b = random_image_batch(st.config, N, 700 + s);
    sub->zero_grad();
    full->zero_grad();
    int64_t correct_sub = -1, correct_full = -1;
    const double loss_sub = sub->forward(b, true, &correct_sub);
    const double loss_full = full->forward(b, true, &correct_full);
    EXPECT_NEAR(loss_sub, loss_full, 1e-5 * std::abs(loss_full)) << "training-mode loss";
    EXPECT_EQ(correct_sub, correct_full);

    // Gradients agree too: d/dW of the subnetwork = factor * d/dW of the modified full model
    // (the subnetwork's weight W stands for factor * W in the full model).
    sub->backward();
    full->backward();
    const double gall = max_grad(*full);
    ASSERT_GT(gall, 0);
    for (Param* p : sub->params().trainable()) {
      ASSERT_TRUE(p->grad.defined()) << p->name;  // forward masking: every local param is trained
      Param* f = find_param(*full, p->name);
      const auto& m = mult.at(p->name);
      const auto gv = grad_value_index(*p);
      const auto vf = value_full_index(*p);
      double gmax = 0;
      for (int64_t i = 0; i < f->grad.numel(); ++i)
        gmax = std::max(gmax, static_cast<double>(std::abs(f->grad.f32()[i])));
      for (int64_t g = 0; g < p->grad.numel(); ++g) {
        const int64_t fi = vf[gv[g]];
        ASSERT_NE(m[fi], 0.f) << p->name << ": subnetwork holds a dropped element";
        const double want = m[fi] * f->grad.f32()[fi];
        ASSERT_NEAR(p->grad.f32()[g], want, 1e-4 * std::abs(want) + 1e-4 * gmax * scale + 1e-6 * gall)
            << p->name << " grad [" << g << "] (full index " << fi << ")";
      }
    }
  }
}

class BackwardMasking : public ::testing::TestWithParam<Case> {};

// Invariant 4.
TEST_P(BackwardMasking, GradientsEqualFullGradientsOnKeptUnits) {
  const Case c = GetParam();
  const PlanSetup st = make_setup(c, "backward");
  const int N = 6;
  const bool neuron = st.plan.granularity == Granularity::neuron;
  for (int s = 0; s < kS; ++s) {
    SCOPED_TRACE("subnetwork " + std::to_string(s));
    SubnetMask mask = make_subnet_mask(st.plan, st.units, s, true);
    EXPECT_FLOAT_EQ(mask.scale, 1.f);  // backward masking never scales
    auto sub = make_model(st.config, mask, N, kSeed);
    auto full = make_model(st.config, full_mask(st.units), N, kSeed);
    randomize_norms(*sub);
    randomize_norms(*full);
    Batch b = random_image_batch(st.config, N, 900 + s);
    sub->zero_grad();
    full->zero_grad();
    const double loss_sub = sub->forward(b, true, nullptr);
    const double loss_full = full->forward(b, true, nullptr);
    EXPECT_NEAR(loss_sub, loss_full, 1e-5 * std::abs(loss_full)) << "backward masking runs the full model";
    sub->backward();
    full->backward();
    const double gall = max_grad(*full);
    ASSERT_GT(gall, 0);

    int dropped_blocks = 0, held = 0;
    for (Param* p : sub->params().all()) {
      ASSERT_EQ(p->value.shape(), p->full_shape) << p->name << ": backward masking keeps full values";
      Param* f = find_param(*full, p->name);
      ASSERT_NE(f, nullptr) << p->name;
      if (!p->trainable) {
        EXPECT_FALSE(p->grad.defined()) << p->name << " is a buffer";
        continue;
      }
      if (!neuron && p->block >= 0 && !block_kept(st, s, p->block)) {
        EXPECT_FALSE(p->grad.defined()) << p->name << ": dropped block holds a gradient";
        ++dropped_blocks;
        continue;
      }
      ASSERT_TRUE(p->grad.defined()) << p->name;
      ++held;
      if (p->unit.layer >= 0) {
        // Gradient only for the kept prefix, and the prefix is exactly the kept units.
        const LayerMask& lm = mask.layers.at(p->unit.layer);
        int kept = 0;
        for (int u = 0; u < lm.units(); ++u) kept += st.plan.keeps_unit(s, p->unit.layer, u);
        ASSERT_EQ(lm.kept, kept);
        ASSERT_EQ(p->grad_extent(), static_cast<int64_t>(kept) * p->unit.unit_size) << p->name;
        for (int q = 0; q < lm.units(); ++q)
          ASSERT_EQ(st.plan.keeps_unit(s, p->unit.layer, lm.order[q]), q < lm.kept) << p->name << " position " << q;
      } else {
        ASSERT_EQ(p->grad.shape(), p->full_shape) << p->name;
      }
      const auto gv = grad_value_index(*p);
      const auto vf = value_full_index(*p);
      double gmax = 0;
      for (int64_t i = 0; i < f->grad.numel(); ++i)
        gmax = std::max(gmax, static_cast<double>(std::abs(f->grad.f32()[i])));
      std::vector<char> seen(f->grad.numel(), 0);
      for (int64_t g = 0; g < p->grad.numel(); ++g) {
        const int64_t fi = vf[gv[g]];
        seen[fi] = 1;
        if (p->unit.layer >= 0) ASSERT_TRUE(st.plan.keeps_unit(s, p->unit.layer, unit_of(*p, fi))) << p->name;
        const double want = f->grad.f32()[fi];
        ASSERT_NEAR(p->grad.f32()[g], want, 1e-4 * std::abs(want) + 1e-5 * gmax + 1e-6 * gall)
            << p->name << " grad [" << g << "] (full index " << fi << ")";
      }
      // Every element of every kept unit (and of a dense parameter) is covered.
      for (int64_t fi = 0; fi < f->grad.numel(); ++fi)
        if (p->unit.layer < 0 || st.plan.keeps_unit(s, p->unit.layer, unit_of(*p, fi)))
          ASSERT_TRUE(seen[fi]) << p->name << ": kept element " << fi << " has no gradient";
    }
    EXPECT_GT(held, 0);
    if (!neuron) {
      int dropped = 0;
      for (size_t bl = 0; bl < st.units.blocks.size(); ++bl) dropped += !block_kept(st, s, static_cast<int>(bl));
      EXPECT_EQ(dropped_blocks, 6 * dropped);  // c1, b1 (2), c2, b2 (2) per dropped branch
    }
  }
}

const Case kCases[] = {
    {"mlp", "neuron", 0.5},    {"mlp", "neuron", 0.25},    {"mlp", "neuron", 0.75},
    {"resnet", "neuron", 0.5}, {"resnet", "neuron", 0.25}, {"resnet", "neuron", 0.75},
    {"resnet", "block", 0.5},  {"resnet", "block", 0.25},  {"resnet", "block", 0.75},
};

INSTANTIATE_TEST_SUITE_P(Masking, ForwardMasking, ::testing::ValuesIn(kCases), case_name);
INSTANTIATE_TEST_SUITE_P(Masking, BackwardMasking, ::testing::ValuesIn(kCases), case_name);

// A pinned block is dense: kept by every subnetwork, holding gradients everywhere, and (as a
// dense part, not a unit) not scaled by 1/keep under forward masking.
// (With blocks 0 and 2 pinned, 2 blocks are dealt: keep 0.5 so that each of the 4 subnetworks
// keeps one; make_plan refuses a plan that leaves one empty.)
const Case kPinned[] = {{"resnet", "block", 0.5, {1}}, {"resnet", "block", 0.5, {0, 2}}};
INSTANTIATE_TEST_SUITE_P(MaskingPinned, ForwardMasking, ::testing::ValuesIn(kPinned), case_name);
INSTANTIATE_TEST_SUITE_P(MaskingPinned, BackwardMasking, ::testing::ValuesIn(kPinned), case_name);

TEST(Masking, ScaleNoneLeavesKeptUnitsUnscaled) {
  // mask.scale = "none": the subnetwork equals the zeroed full model without any scaling.
  for (const char* gran : {"neuron", "block"}) {
    SCOPED_TRACE(gran);
    const PlanSetup st = make_setup({"resnet", gran, 0.5}, "forward");
    for (int s = 0; s < kS; ++s) {
      SubnetMask mask = make_subnet_mask(st.plan, st.units, s, false);
      EXPECT_FLOAT_EQ(mask.scale, 1.f);
      auto sub = make_model(st.config, mask, 4, kSeed);
      auto full = make_model(st.config, full_mask(st.units), 4, kSeed);
      randomize_norms(*sub);
      randomize_norms(*full);
      zero_and_scale(*full, *sub, st, s, 1.f);
      Batch b = random_image_batch(st.config, 4, 800 + s);
      const double ls = sub->forward(b, true, nullptr), lf = full->forward(b, true, nullptr);
      EXPECT_NEAR(ls, lf, 1e-5 * std::abs(lf)) << "subnetwork " << s;
    }
  }
}

TEST(Masking, ZeroingIsNotVacuous) {
  // Guards the invariant-3 test itself: the masked subnetwork differs from the unmodified
  // full model, and the zeroed-but-unscaled full model differs from the scaled subnetwork.
  const PlanSetup st = make_setup({"mlp", "neuron", 0.5}, "forward");
  SubnetMask mask = make_subnet_mask(st.plan, st.units, 0, true);
  auto sub = make_model(st.config, mask, 6, kSeed);
  auto full = make_model(st.config, full_mask(st.units), 6, kSeed);
  Batch b = random_image_batch(st.config, 6, 1);
  const double ls = sub->forward(b, true, nullptr);
  const double l0 = full->forward(b, true, nullptr);
  // 10x the tolerance of the invariant-3 comparison.
  EXPECT_GT(std::abs(ls - l0), 1e-4 * std::abs(l0));
  zero_and_scale(*full, *sub, st, 0, 1.f);
  const double l1 = full->forward(b, true, nullptr);
  EXPECT_GT(std::abs(ls - l1), 1e-4 * std::abs(l1));
}

}  // namespace
}  // namespace subdp
