// Tiny model configurations and random batches shared by the model-level unit tests
// (finite differences, masking invariants, GPT, zero-initialised branches).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/hash.h"
#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"
#include "tests/unit/gradcheck.h"

namespace subdp::test {

/// ResNet on 1x8x8 images: widths {4, 8}, 2 blocks per stage, so blocks 0, 1 (stage 0),
/// 2 (stride 2 + projection shortcut), 3 (stage 1); 10 classes.
inline ModelConfig tiny_resnet() {
  ModelConfig c;
  c.name = ModelKind::resnet;
  c.widths = {4, 8};
  c.blocks_per_stage = 2;
  c.in_channels = 1;
  c.image_size = 8;
  c.classes = 10;
  return c;
}

/// GPT: vocabulary 11, context 5, width 8, 2 heads, 2 blocks, MLP ratio 4.
inline ModelConfig tiny_gpt() {
  ModelConfig c;
  c.name = ModelKind::gpt;
  c.vocab = 11;
  c.context = 5;
  c.width = 8;
  c.heads = 2;
  c.depth = 2;
  c.mlp_ratio = 4;
  return c;
}

/// LLaMA: vocabulary 11, context 5, width 8, 2 heads (head width 4), 2 blocks, SwiGLU width 12.
inline ModelConfig tiny_llama() {
  ModelConfig c = tiny_gpt();
  c.name = ModelKind::llama;
  c.ffn_width = 12;
  return c;
}

/// n images (n, C, H, W) uniform in (-1.5, 1.5) and labels uniform over c.classes, from seed.
inline Batch random_image_batch(const ModelConfig& c, int n, uint64_t seed) {
  Batch b;
  b.x = random_tensor({n, c.in_channels, c.image_size, c.image_size}, 1.5f, seed);
  b.y = Tensor::zeros({n}, MemCategory::activations, DType::i32);
  std::mt19937_64 rng(seed + 1);
  for (int i = 0; i < n; ++i) b.y.i32()[i] = static_cast<int32_t>(rng() % c.classes);
  b.n = n;
  return b;
}

/// B rows of T input and target tokens (B, T) int32 in [0, V), from seed.
inline Batch token_batch(int B, int T, int V, uint64_t seed) {
  Batch b;
  b.x = Tensor::empty({B, T}, MemCategory::activations, DType::i32);
  b.y = Tensor::empty({B, T}, MemCategory::activations, DType::i32);
  b.n = B;
  for (int64_t i = 0; i < b.x.numel(); ++i) {
    b.x.i32()[i] = static_cast<int32_t>(mix64(seed * 1000 + i) % V);
    b.y.i32()[i] = static_cast<int32_t>(mix64(seed * 1000 + i + 500) % V);
  }
  return b;
}

/// Moves norm parameters (constant-initialised: BatchNorm / LayerNorm gamma = 1, beta = 0) to
/// layout-independent random values (a function of the full-model index), so that gamma /
/// beta mistakes, scaling included, cannot hide behind 1 / 0.
inline void randomize_norms(Model& m) {
  for (Param* p : m.params().trainable()) {
    if (p->init.kind != InitSpec::constant) continue;
    const bool gamma = p->init.a == 1.f;
    float* v = p->value.f32();
    for_each_value_run(*p, [&](int64_t loff, int64_t foff, int64_t len) {
      for (int64_t i = 0; i < len; ++i) {
        const float u = init_value(99, p->name, foff + i, {InitSpec::uniform, 1.f});
        v[loff + i] = gamma ? 1.f + 0.4f * u : 0.3f * u;
      }
    });
  }
}

/// Local mask of subnetwork s of the plan (regime, granularity, keep, mask.seed = seed) over
/// S subnetworks, kept units scaled by 1/keep.
inline SubnetMask planned_mask(const ModelUnits& units, MaskRegime regime, Granularity granularity, int S, double keep,
                               int s, uint64_t seed) {
  MaskConfig mc;
  mc.regime = regime;
  mc.granularity = granularity;
  mc.keep = keep;
  mc.seed = seed;
  return make_subnet_mask(make_plan(units, mc, S), units, s, true);
}

/// The config enum spelled `name`, for tests that loop over spellings ("forward", "neuron").
template <class E>
E named(const std::string& name) {
  const std::optional<E> e = choice_named<E>(name);
  if (!e) throw Error("test: no " + name + " among the choices");
  return *e;
}

/// planned_mask with the regime and granularity as spelled in a config.
inline SubnetMask planned_mask(const ModelUnits& units, const std::string& regime, const std::string& granularity,
                               int S, double keep, int s, uint64_t seed) {
  return planned_mask(units, named<MaskRegime>(regime), named<Granularity>(granularity), S, keep, s, seed);
}

/// Replaces every value by a draw keyed on (name, full index), so models of any layout get the
/// same full-model values: U(-0.4, 0.4), norm gains (initialised to 1) 1 + U(-0.3, 0.3).
/// GPT-2's N(0, 0.02) would make every gradient tiny.
inline void randomize(Model& m, uint64_t seed) {
  for (Param* p : m.params().all()) {
    const bool gain = p->init.kind == InitSpec::constant && p->init.a == 1.f;
    const InitSpec spec{InitSpec::uniform, gain ? 0.3f : 0.4f};
    float* v = p->value.f32();
    for_each_value_run(*p, [&](int64_t lo, int64_t fo, int64_t len) {
      for (int64_t i = 0; i < len; ++i) v[lo + i] = (gain ? 1.f : 0.f) + init_value(seed, p->name, fo + i, spec);
    });
  }
}

/// Every parameter of m by name.
inline std::map<std::string, Param*> by_name(Model& m) {
  std::map<std::string, Param*> out;
  for (Param* p : m.params().all()) out[p->name] = p;
  return out;
}

/// Zeroes, in a full-model (identity-order) param, the units / blocks subnetwork s drops.
inline void zero_dropped(Param& p, const SubnetworkPlan& plan, int s) {
  float* v = p.value.f32();
  if (plan.granularity == Granularity::block) {
    if (p.block >= 0 && !plan.keeps_block(s, p.block)) p.value.zero_();
    return;
  }
  if (p.unit.layer < 0) return;
  const int64_t outer = p.outer(), inner = p.inner(), ext = p.value_extent(), us = p.unit.unit_size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < ext; ++a)
      if (!plan.keeps_unit(s, p.unit.layer, p.mask->order[a / us]))
        std::fill(v + (o * ext + a) * inner, v + (o * ext + a + 1) * inner, 0.f);
}

/// Expects each held gradient of `sub` to equal the gradient of the same full-model element in
/// `full` (whose values are in identity order: grad index = full index).
inline void expect_grads_restricted(Model& sub, Model& full, const std::string& what) {
  auto ref = by_name(full);
  for (Param* p : sub.params().trainable()) {
    if (!p->grad.defined()) continue;
    const Param& q = *ref.at(p->name);
    ASSERT_TRUE(q.grad.defined()) << p->name;
    const auto gv = grad_value_index(*p);
    const auto vf = value_full_index(*p);
    double scale = 0;
    for (int64_t i = 0; i < q.grad.numel(); ++i)
      scale = std::max(scale, std::abs(static_cast<double>(q.grad.f32()[i])));
    for (int64_t i = 0; i < p->grad.numel(); ++i) {
      const int64_t f = vf.at(gv.at(i));
      ASSERT_NEAR(p->grad.f32()[i], q.grad.f32()[f], 1e-5 * scale + 1e-7) << what << " " << p->name << "[" << i << "]";
    }
  }
}

/// Finite-difference check of every held gradient of a token model after one training step
/// on `batch` (the transformers' settings: eps 3e-3, since 1e-2 leaves a truncation error of a
/// few % on some probes; rtol 2e-2; 24 probes a tensor). Expects more than 4 tensors checked.
inline void check_model_gradients(Model& model, const Batch& batch, const std::string& what) {
  auto loss = [&] { return model.forward(batch, true, nullptr); };
  model.zero_grad();
  loss();
  model.backward();
  FdOptions opt;
  opt.eps = 3e-3f;
  opt.rtol = 2e-2;
  opt.max_probes = 24;
  int checked = 0;
  for (Param* p : model.params().trainable()) {
    if (!p->grad.defined()) continue;
    EXPECT_TRUE(check_gradient(what + " " + p->name, p->value.f32(), p->grad.f32(), p->grad.numel(), loss, opt,
                               grad_value_index(*p)));
    ++checked;
  }
  EXPECT_GT(checked, 4);
}

/// One training step's forward and backward from zeroed gradients; returns the loss.
inline double forward_backward(Model& m, const Batch& batch) {
  m.zero_grad();
  const double loss = m.forward(batch, true, nullptr);
  m.backward();
  return loss;
}

/// Two training steps (batches seeded 40, 41) of models a and b give the same losses and every
/// held gradient bit for bit (recompute against stored activations).
inline void expect_same_steps_bitwise(Model& a, Model& b, const ModelConfig& c, int B, const std::string& what) {
  for (int step = 0; step < 2; ++step) {
    const Batch batch = token_batch(B, c.context, c.vocab, 40 + step);
    const double loss = forward_backward(a, batch);
    EXPECT_EQ(loss, forward_backward(b, batch)) << what << " step " << step;
    auto pa = by_name(a), pb = by_name(b);
    for (auto& [name, p] : pa) {
      if (!p->grad.defined()) continue;
      ASSERT_EQ(std::memcmp(p->grad.f32(), pb[name]->grad.f32(), p->grad.nbytes()), 0)
          << what << " step " << step << ": gradient of " << name;
    }
  }
}

/// The recompute invariant of a token model `c` (train.recompute = "blocks"): in DP and in both
/// subnetworks of each masking regime (S = 2, keep 0.5, plan seed 5), a model that rebuilds
/// each block's activations from its input in backward gives the stored-activation model's
/// losses and gradients bit for bit over two steps (nothing of one step leaks into the next).
inline void expect_recompute_bitwise(const ModelConfig& c, int B) {
  const ModelUnits units = model_units(c);
  std::vector<std::pair<std::string, SubnetMask>> masks = {{"dp", full_mask(units)}};
  for (const std::string regime : {"forward", "backward"})
    for (const std::string gran : {"block", "neuron"})
      for (int s = 0; s < 2; ++s)
        masks.emplace_back(regime + "-" + gran + "-" + std::to_string(s),
                           planned_mask(units, regime, gran, 2, 0.5, s, 5));
  for (const auto& [what, mask] : masks) {
    auto stored = make_model(c, mask, B, 3, false), recomputed = make_model(c, mask, B, 3, true);
    randomize(*stored, 9);
    randomize(*recomputed, 9);
    expect_same_steps_bitwise(*stored, *recomputed, c, B, what);
  }
}

/// MLP on 1x8x8 images: hidden {16, 12, 8}, 10 classes.
inline ModelConfig tiny_mlp() {
  ModelConfig c;
  c.name = ModelKind::mlp;
  c.hidden = {16, 12, 8};
  c.in_channels = 1;
  c.image_size = 8;
  c.classes = 10;
  return c;
}

/// One model, regime and granularity with its batch (host tensors), for backend comparisons.
struct BackendCase {
  ModelConfig config;
  MaskRegime regime;
  Granularity granularity;
  Batch batch;
  std::string label() const { return fmt::format("{} {} {}", config.name, regime, granularity); }
};

/// Every tiny model under DP and forward / backward masking at block and neuron level (the
/// MLP has no blocks), each with a fixed random batch.
inline std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  const std::vector<std::pair<ModelConfig, Batch>> models = {{tiny_mlp(), random_image_batch(tiny_mlp(), 6, 3)},
                                                             {tiny_resnet(), random_image_batch(tiny_resnet(), 4, 5)},
                                                             {tiny_gpt(), token_batch(3, 5, 11, 9)},
                                                             {tiny_llama(), token_batch(3, 5, 11, 10)}};
  using R = MaskRegime;
  using G = Granularity;
  const std::vector<std::pair<R, G>> regimes = {{R::none, G::block},
                                                {R::forward, G::block},
                                                {R::backward, G::block},
                                                {R::forward, G::neuron},
                                                {R::backward, G::neuron}};
  for (const auto& [config, batch] : models)
    for (const auto& [regime, granularity] : regimes)
      if (config.name != ModelKind::mlp || granularity != G::block || regime == R::none)
        out.push_back({config, regime, granularity, batch});
  return out;
}

/// The loss and held gradients (host copies) of one step.
struct StepResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
};

/// One forward and backward of subnetwork 1 of S = 2 (keep 0.5) of case c, built and run on the
/// current backend; the host batch is staged into backend memory (Batch::allocate / upload).
inline StepResult backend_step(const BackendCase& c) {
  const ModelUnits units = model_units(c.config);
  const SubnetMask mask =
      c.regime == MaskRegime::none ? full_mask(units) : planned_mask(units, c.regime, c.granularity, 2, 0.5, 1, 7);
  auto model = make_model(c.config, mask, static_cast<int>(c.batch.n), 11);
  Batch batch = Batch::allocate(c.batch.x.shape(), c.batch.x.dtype(), c.batch.y.shape(), c.batch.y.dtype());
  batch.x_host.copy_from(c.batch.x);
  batch.y_host.copy_from(c.batch.y);
  batch.n = c.batch.n;
  batch.upload();
  StepResult r;
  r.loss = forward_backward(*model, batch);
  for (Param* p : model->params().trainable())
    if (p->grad.defined()) r.grads.push_back(host_values(p->grad));
  return r;
}

}  // namespace subdp::test
