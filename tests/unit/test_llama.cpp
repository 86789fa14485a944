// LLaMA tests: finite-difference checks of RMSNorm, RoPE and SwiGLU (invariant 6) and of the
// whole tiny LLaMA, unmasked and in every masking regime; RoPE's defining property (scores
// depend on relative positions only); units and parameter names; forward masking equals the
// full model with dropped units zeroed (invariant 3), backward-masked gradients equal the
// full ones restricted (invariant 4); recompute bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/layers/rmsnorm.h"
#include "engine/layers/rope.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rope.h"
#include "models/llama.h"
#include "tests/unit/gradcheck.h"
#include "tests/unit/tiny_models.h"

namespace subdp {
namespace {

using test::check_gradient;
using test::dot;
using test::random_tensor;
using test::randomize;
using test::tiny_llama;
using test::token_batch;

constexpr int kBatch = 3;

struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { cpu::set_num_threads(1); }
  ~OneThread() { cpu::set_num_threads(saved); }
};

Tensor act(const Shape& s) { return Tensor::zeros(s, MemCategory::activations); }

TEST(GradCheck, RMSNorm) {
  SubnetMask mask;
  ParamSet ps(mask, 9);
  const int C = 6;
  const int64_t rows = 4;
  RMSNorm norm(ps, "norm", C);
  norm.allocate_stats(rows);
  test::fill_uniform(norm.gamma->value, 0.5f, 41);
  for (int i = 0; i < C; ++i) norm.gamma->value.f32()[i] += 1.f;
  Tensor x = random_tensor({rows, C}, 2.f, 43), r = random_tensor({rows, C}, 1.f, 44), y = act({rows, C});
  auto loss = [&] {
    norm.forward(x.f32(), y.f32(), rows);
    return dot(y.f32(), r.f32(), y.numel());
  };
  loss();
  for (int64_t row = 0; row < rows; ++row) {  // y = x / rms(x) * gamma
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += double{x.f32()[row * C + i]} * x.f32()[row * C + i];
    const double rs = 1 / std::sqrt(ss / C + 1e-5);
    for (int i = 0; i < C; ++i)
      EXPECT_NEAR(y.f32()[row * C + i], x.f32()[row * C + i] * rs * norm.gamma->value.f32()[i], 1e-5);
  }
  norm.gamma->grad.zero_();
  // dx accumulates (+=, the residual stream): start from a known non-zero dx.
  Tensor base = random_tensor({rows, C}, 1.f, 45), dx = random_tensor({rows, C}, 1.f, 45), g = act({rows, C});
  norm.backward(x.f32(), r.f32(), dx.f32(), rows);
  for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] = dx.f32()[i] - base.f32()[i];
  EXPECT_TRUE(check_gradient("norm.weight", norm.gamma->value.f32(), norm.gamma->grad.f32(), C, loss));
  EXPECT_TRUE(check_gradient("norm input (accumulated)", x.f32(), g.f32(), x.numel(), loss));
  // The LLaMA block stores no RMSNorm output: recompute gives the forward's bits.
  Tensor again = act({rows, C});
  loss();  // the probes left y and rstd of a perturbed x
  norm.recompute(x.f32(), again.f32(), rows);
  EXPECT_EQ(std::memcmp(again.f32(), y.f32(), y.nbytes()), 0);
}

TEST(GradCheck, SwiGLU) {
  const int64_t n = 48;
  Tensor g = random_tensor({n}, 4.f, 55), u = random_tensor({n}, 1.f, 56), r = random_tensor({n}, 1.f, 57);
  Tensor h = act({n});
  auto loss = [&] {
    cpu::swiglu_forward(g.f32(), u.f32(), h.f32(), n);
    return dot(h.f32(), r.f32(), n);
  };
  loss();
  for (int64_t i = 0; i < n; ++i) {  // silu(g) u
    const double v = g.f32()[i];
    EXPECT_NEAR(h.f32()[i], v / (1 + std::exp(-v)) * u.f32()[i], 1e-5) << v;
  }
  Tensor dg = act({n}), du = act({n});
  cpu::swiglu_backward(g.f32(), u.f32(), r.f32(), dg.f32(), du.f32(), n);
  EXPECT_TRUE(check_gradient("swiglu gate", g.f32(), dg.f32(), n, loss, {1e-3f}));
  EXPECT_TRUE(check_gradient("swiglu up", u.f32(), du.f32(), n, loss, {1e-3f}));
}

/// cos / sin tables of RopeTables on the host (the CPU backend's memory).
struct HostRope {
  RopeTables tables;
  HostRope(int context, int hd, double theta) : tables(context, hd, theta) { tables.fill(); }
  const float* cos() const { return tables.cos.f32(); }
  const float* sin() const { return tables.sin.f32(); }
};

TEST(GradCheck, RopeIsARotationAndItsInverseIsTheBackward) {
  const int T = 5, heads = 2, hd = 6, B = 2;
  const int64_t rows = B * T, ld = 3 * heads * hd;  // (rows, 3 Ck): q and k rotated, v not
  const HostRope rope(T, hd, 10000.0);
  Tensor x = random_tensor({rows, ld}, 1.f, 60), r = random_tensor({rows, ld}, 1.f, 61), y = act({rows, ld});
  auto loss = [&] {
    std::memcpy(y.f32(), x.f32(), x.nbytes());
    cpu::rope_rotate(y.f32(), rows, T, ld, 2 * heads, hd, rope.cos(), rope.sin(), false);
    return dot(y.f32(), r.f32(), y.numel());
  };
  loss();
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t c = 2 * heads * hd; c < ld; ++c) ASSERT_EQ(y.f32()[row * ld + c], x.f32()[row * ld + c]);
  // Position 0 is the identity; norms are kept per pair.
  for (int64_t c = 0; c < ld; ++c) ASSERT_FLOAT_EQ(y.f32()[c], x.f32()[c]);
  Tensor dx = act({rows, ld});
  std::memcpy(dx.f32(), r.f32(), r.nbytes());
  cpu::rope_rotate(dx.f32(), rows, T, ld, 2 * heads, hd, rope.cos(), rope.sin(), true);
  EXPECT_TRUE(check_gradient("rope input", x.f32(), dx.f32(), x.numel(), loss));
}

TEST(Rope, ScoresDependOnTheRelativePositionOnly) {
  // RoFormer's property: <R(m) q, R(n) k> is a function of n - m.
  const int T = 12, hd = 8;
  const HostRope rope(T, hd, 100.0);
  const Tensor q = random_tensor({1, hd}, 1.f, 70), k = random_tensor({1, hd}, 1.f, 71);
  auto score = [&](int m, int n) {
    std::vector<float> a(q.f32(), q.f32() + hd), b(k.f32(), k.f32() + hd);
    cpu::rope_rotate(a.data(), 1, T, hd, 1, hd, rope.cos() + m * hd / 2, rope.sin() + m * hd / 2, false);
    cpu::rope_rotate(b.data(), 1, T, hd, 1, hd, rope.cos() + n * hd / 2, rope.sin() + n * hd / 2, false);
    return dot(a.data(), b.data(), hd);
  };
  for (int d = 0; d < 4; ++d) EXPECT_NEAR(score(1, 1 + d), score(7, 7 + d), 1e-5) << d;
  EXPECT_GT(std::abs(score(1, 2) - score(1, 5)), 1e-3);  // and it does depend on it
}

// ---------------------------------------------------------------------------------------------
// Whole tiny LLaMA

void check_llama_gradients(const SubnetMask& mask, const std::string& what, const ModelConfig& c = tiny_llama()) {
  OneThread one;
  auto model = make_llama(c, mask, kBatch, 7);
  randomize(*model, 11);
  test::check_model_gradients(*model, token_batch(kBatch, c.context, c.vocab, 2), what);
}

TEST(Llama, FiniteDifferenceFullModel) { check_llama_gradients(full_mask(llama_units(tiny_llama())), "full"); }

TEST(Llama, FiniteDifferenceMaskedModels) {
  const ModelUnits units = llama_units(tiny_llama());
  for (const char* regime : {"forward", "backward"})
    for (const char* gran : {"neuron", "block"})
      check_llama_gradients(test::planned_mask(units, regime, gran, 2, 0.5, 1, 5), std::string(regime) + "/" + gran);
}

/// The tiny LLaMA with grouped-query attention: 4 query heads of width 2 over 2 key / value heads.
ModelConfig tiny_grouped_llama() {
  ModelConfig c = tiny_llama();
  c.heads = 4;
  c.kv_heads = 2;
  return c;
}

TEST(Llama, GroupedQueryFiniteDifference) {
  const ModelConfig c = tiny_grouped_llama();
  const ModelUnits units = llama_units(c);
  check_llama_gradients(full_mask(units), "grouped full", c);
  for (const char* regime : {"forward", "backward"})
    check_llama_gradients(test::planned_mask(units, regime, "block", 2, 0.5, 1, 5), std::string("grouped ") + regime,
                          c);
}

TEST(Llama, GroupedQueryShapesAndUnits) {
  const ModelConfig c = tiny_grouped_llama();
  const ModelUnits u = llama_units(c);
  auto full = make_llama(c, full_mask(u), 1, 0);
  int64_t branch = 0;
  for (Param* p : full->params().all()) {
    if (p->name == "layers.0.attention.wqkv.weight") EXPECT_EQ(p->full_shape, (Shape{(4 + 2 * 2) * 2, 8}));
    if (p->block == 0) branch += shape_numel(p->full_shape);
  }
  EXPECT_EQ(branch, u.blocks[0].branch_params);
  ModelConfig uneven = c;
  uneven.kv_heads = 3;  // does not divide 4 heads
  EXPECT_THROW(llama_units(uneven), Error);
}

TEST(Llama, UnitsAndParameterNames) {
  const ModelConfig c = tiny_llama();
  const ModelUnits u = llama_units(c);
  ASSERT_EQ(u.layers.size(), 4u);
  EXPECT_EQ(u.layers[0].units, 2);   // heads
  EXPECT_EQ(u.layers[1].units, 12);  // SwiGLU neurons
  EXPECT_EQ(u.layers[0].unit_params, 3 * 4 * 8 + 4 * 8);
  EXPECT_EQ(u.layers[1].unit_params, 3 * 8);
  auto full = make_llama(c, full_mask(u), 1, 0);
  std::map<std::string, Shape> shapes;
  int64_t branch = 0;
  for (Param* p : full->params().all()) {
    shapes[p->name] = p->full_shape;
    if (p->block == 0) branch += shape_numel(p->full_shape);
  }
  EXPECT_EQ(branch, u.blocks[0].branch_params);
  EXPECT_EQ(shapes.at("tok_embeddings.weight"), (Shape{11, 8}));
  EXPECT_EQ(shapes.at("output.weight"), (Shape{11, 8}));
  EXPECT_EQ(shapes.at("norm.weight"), (Shape{8}));
  EXPECT_EQ(shapes.at("layers.1.attention.wqkv.weight"), (Shape{24, 8}));
  EXPECT_EQ(shapes.at("layers.1.attention.wo.weight"), (Shape{8, 8}));
  EXPECT_EQ(shapes.at("layers.1.feed_forward.w1.weight"), (Shape{12, 8}));
  EXPECT_EQ(shapes.at("layers.1.feed_forward.w3.weight"), (Shape{12, 8}));
  EXPECT_EQ(shapes.at("layers.1.feed_forward.w2.weight"), (Shape{8, 12}));
  EXPECT_EQ(shapes.at("layers.0.attention_norm.weight"), (Shape{8}));
  EXPECT_EQ(shapes.at("layers.0.ffn_norm.weight"), (Shape{8}));
  EXPECT_EQ(shapes.size(), 3u + 2 * 7);  // no biases anywhere
  EXPECT_EQ(full->positions_per_example(), 5);
  ModelConfig odd = c;
  odd.heads = 8;  // head width 1
  EXPECT_THROW(llama_units(odd), Error);
}

TEST(Llama, DefaultSwiGLUWidthIsEightThirdsRoundedToSixtyFour) {
  ModelConfig c;
  c.width = 256;
  EXPECT_EQ(llama_ffn_width(c), 704);
  c.width = 768;
  EXPECT_EQ(llama_ffn_width(c), 2048);
  c.ffn_width = 100;
  EXPECT_EQ(llama_ffn_width(c), 100);
}

/// The loss of `model` on `batch`, and its held gradients after the backward pass.
double step(Model& model, const Batch& batch) { return test::forward_backward(model, batch); }

TEST(Llama, ForwardMaskingEqualsTheZeroedFullModel) {
  OneThread one;
  const ModelConfig c = tiny_llama();
  const ModelUnits units = llama_units(c);
  const Batch batch = token_batch(kBatch, c.context, c.vocab, 4);
  for (const char* gran : {"neuron", "block"}) {
    MaskConfig mc;
    mc.regime = MaskRegime::forward;
    mc.granularity = test::named<Granularity>(gran);
    mc.keep = 0.5;
    mc.seed = 5;
    const SubnetworkPlan plan = make_plan(units, mc, 2);
    for (int s = 0; s < 2; ++s) {
      const SubnetMask mask = make_subnet_mask(plan, units, s, true);
      auto sub = make_llama(c, mask, kBatch, 3);
      randomize(*sub, 17);
      SubnetMask ref_mask = full_mask(units);
      ref_mask.granularity = plan.granularity;
      ref_mask.scale = mask.scale;
      ref_mask.block_dense = mask.block_dense;
      auto full = make_llama(c, ref_mask, kBatch, 3);
      randomize(*full, 17);
      for (Param* p : full->params().all()) test::zero_dropped(*p, plan, s);
      const double lf = step(*full, batch);
      EXPECT_NEAR(step(*sub, batch), lf, 1e-5 * std::abs(lf)) << gran << " s=" << s;
      test::expect_grads_restricted(*sub, *full, std::string(gran) + " forward");
    }
  }
}

TEST(Llama, BackwardMaskingGradientsAreTheFullOnesRestricted) {
  OneThread one;
  const ModelConfig c = tiny_llama();
  const ModelUnits units = llama_units(c);
  const Batch batch = token_batch(kBatch, c.context, c.vocab, 6);
  auto full = make_llama(c, full_mask(units), kBatch, 3);
  randomize(*full, 23);
  const double lf = step(*full, batch);
  for (const char* gran : {"neuron", "block"})
    for (int s = 0; s < 2; ++s) {
      auto sub = make_llama(c, test::planned_mask(units, "backward", gran, 2, 0.5, s, 9), kBatch, 3);
      randomize(*sub, 23);
      EXPECT_NEAR(step(*sub, batch), lf, 1e-5 * std::abs(lf)) << "backward masking runs the full model";
      test::expect_grads_restricted(*sub, *full, std::string(gran) + " backward");
    }
}

TEST(Llama, RecomputeGivesTheSameLossesAndGradientsBitForBit) {
  OneThread one;
  ModelConfig c = tiny_llama();
  c.depth = 3;
  test::expect_recompute_bitwise(c, kBatch);
}

TEST(Llama, RecomputeStoresLessThanStoredActivations) {
  const ModelConfig c = tiny_llama();
  auto bytes = [&](bool recompute) {
    const MemStats m =
        MemoryTracker::global().measure([&] { make_llama(c, full_mask(llama_units(c)), kBatch, 3, recompute); });
    return m.peak[static_cast<int>(MemCategory::activations)];
  };
  // Per block and row, stored: mid, gate, up, the attention area and 2 rstd (C + 2H + 4C + 2)
  // plus the output (C); under recompute the output only, and one set for all blocks.
  const int64_t rows = int64_t{kBatch} * c.context, C = c.width, H = 12, per_block = 5 * C + 2 * H + 2;
  EXPECT_EQ(bytes(false) - bytes(true), rows * int64_t{sizeof(float)} * per_block * (c.depth - 1));
}

}  // namespace
}  // namespace subdp
