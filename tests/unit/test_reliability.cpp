// Issue 22's failing inputs that a unit test can hold: non-finite values written by the
// optimizer (counted inside the update loop, located by tensor and unit), checkpoints
// checked against the model (names, shapes, optimizer state, finiteness), and the first
// differing key of two configs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/backend.h"
#include "engine/io/checkpoint.h"
#include "engine/config/config_diff.h"
#include "engine/core/error.h"
#include "tests/unit/error_of.h"
#include "engine/optim/optimizer.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"

namespace subdp {
namespace {

using subdp::testing::error_of;

/// An MLP whose hidden layer 0 (16 units) is masked forward at S = 4, keep 0.25: this rank
/// (subnetwork 3) holds 4 of its units.
struct MaskedMlp {
  ModelConfig config;
  ModelUnits units;
  SubnetworkPlan plan;
  SubnetMask mask;
  std::unique_ptr<Model> model;
  MaskedMlp() {
    config.name = ModelKind::mlp;
    config.hidden = {16, 8};
    units = model_units(config);
    MaskConfig m;
    m.regime = MaskRegime::forward;
    m.granularity = Granularity::neuron;
    m.keep = 0.25;
    plan = make_plan(units, m, 4);
    mask = make_subnet_mask(plan, units, 3, true);
    model = make_model(config, mask, 2, 0);
  }
  Param& param(const std::string& name) {
    for (Param* p : model->params().all())
      if (p->name == name) return *p;
    throw Error("no parameter " + name);
  }
};

TEST(OptimizerNonFinite, OverflowingUpdateIsCountedAndLocated) {
  for (const OptimizerKind name : {OptimizerKind::sgd, OptimizerKind::adamw}) {
    SCOPED_TRACE(name_of(name));
    MaskedMlp m;
    OptimConfig c;
    c.name = name;
    c.lr = 1.0;
    c.momentum = 0.9;
    auto opt = make_optimizer(c, m.model->params().trainable());
    for (Param* p : opt->params()) std::fill(p->grad.f32(), p->grad.f32() + p->grad.numel(), 0.5f);
    opt->step(0.01);
    EXPECT_EQ(backend().take_counters().nonfinite_writes, 0);  // an ordinary update
    EXPECT_EQ(opt->locate_nonfinite(), -1);
    // A finite state whose update overflows: SGD momentum 3e38 with w = -3e38, AdamW's
    // first moment 3e38 (divided by sqrt(v) + eps), at local unit 1 of net.1.weight (784 inputs).
    Param& w = m.param("net.1.weight");
    size_t i = 0;
    while (opt->params()[i] != &w) ++i;
    const int64_t element = 1 * 784 + 5;
    opt->state(i)[0]->f32()[element] = 3e38f;
    w.value.f32()[element] = -3e38f;
    opt->step(1.0);
    EXPECT_GT(backend().take_counters().nonfinite_writes, 0);
    EXPECT_EQ(opt->locate_nonfinite(), static_cast<int>(i));
    const std::string where = locate_nonfinite(w, w.value.f32());
    const int unit = m.mask.layers[0].order[1];
    EXPECT_EQ(where,
              fmt::format("element ({}, 5) of the full (16, 784) tensor, unit {} of maskable layer 0", unit, unit));
    EXPECT_EQ(locate_nonfinite(m.param("net.1.bias"), m.param("net.1.bias").value.f32()), "");
  }
}

TEST(OptimizerNonFinite, StateLocatedInGradientLayout) {
  MaskedMlp m;
  Param& w = m.param("net.3.weight");  // (8, 16): units along axis 1, 4 of 16 held
  ASSERT_EQ(w.grad.shape(), (Shape{8, 4}));
  const int unit = m.mask.layers[0].order[2];
  EXPECT_EQ(describe_grad_element(w, 3 * 4 + 2),  // row 3, local unit 2 of the gradient layout
            fmt::format("element (3, {}) of the full (8, 16) tensor, unit {} of maskable layer 0", unit, unit));
}

std::vector<FullTensorSpec> specs() { return {{"a", {2, 3}, true}, {"b", {4}, false}}; }

NamedTensor zeros(const std::string& name, std::vector<int64_t> shape) {
  return {name, shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)), 0.f)};
}

TEST(CheckpointTensors, NamesShapesAndOptimizerStateChecked) {
  const std::vector<NamedTensor> model = {zeros("a", {2, 3}), zeros("b", {4})};
  std::vector<NamedTensor> opt = {zeros("a::0", {2, 3}), zeros("a::1", {2, 3})};
  auto check = [&](std::vector<NamedTensor> m, std::vector<NamedTensor> o,
                   OptimizerLoad policy = OptimizerLoad::require) {
    return error_of([&] { check_checkpoint_tensors("ck/step-1", specs(), 2, policy, m, o); });
  };
  EXPECT_EQ(check(model, opt), "(no error)");
  std::string e = check({zeros("a", {3, 2}), zeros("b", {4})}, opt);
  EXPECT_NE(e.find("ck/step-1/model.safetensors: tensor a has shape (3, 2), the model expects (2, 3)"),
            std::string::npos)
      << e;
  e = check({zeros("a", {2, 3}), zeros("b", {4}), zeros("lm_head.weight", {5})}, opt);
  EXPECT_NE(e.find("model.safetensors: holds tensor lm_head.weight (5) that the model does not have"),
            std::string::npos)
      << e;
  e = check({zeros("a", {2, 3})}, opt);
  EXPECT_NE(e.find("model.safetensors: lacks tensor b (4) that the model has"), std::string::npos) << e;
  e = check(model, {zeros("a::0", {2, 3})});
  EXPECT_NE(e.find("optimizer.safetensors: lacks optimizer state a::1 (2, 3)"), std::string::npos) << e;
  EXPECT_NE(e.find("checkpoint.reset_optimizer = true"), std::string::npos) << e;
  e = check(model, {});
  EXPECT_NE(e.find("lacks optimizer state a::0"), std::string::npos) << e;
  e = check(model, {zeros("a::0", {2, 3}), zeros("a::1", {2, 3}), zeros("a::2", {2, 3})});
  EXPECT_NE(e.find("holds optimizer state a::2"), std::string::npos) << e;
  // reset and ignore load weights only; the optimizer tensors are dropped.
  std::vector<NamedTensor> dropped = {zeros("a::0", {2, 3})};
  check_checkpoint_tensors("ck", specs(), 2, OptimizerLoad::reset, model, dropped);
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(check(model, {}, OptimizerLoad::ignore), "(no error)");
}

TEST(CheckpointTensors, NonFiniteValuesAreNeverWrittenNorLoaded) {
  const auto dir = std::filesystem::temp_directory_path() / "subdp_test_nonfinite_ckpt";
  std::filesystem::remove_all(dir);
  CheckpointInfo info;
  info.step = 3;
  info.model_name = "mlp";
  NamedTensor a = zeros("a", {2, 3});
  a.data[4] = std::numeric_limits<float>::infinity();
  std::string e = error_of([&] { save_checkpoint(dir.string(), info, {a, zeros("b", {4})}, {}, 2); });
  EXPECT_NE(e.find("model.safetensors: tensor a holds inf at element (1, 1) of (2, 3)"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000003"));
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000003.tmp"));
  NamedTensor s = zeros("a::0", {2, 3});
  s.data[0] = std::nanf("");
  e = error_of([&] { save_checkpoint(dir.string(), info, {zeros("a", {2, 3})}, {s}, 2); });
  EXPECT_NE(e.find("optimizer.safetensors: tensor a::0 holds nan at element (0, 0)"), std::string::npos) << e;
  // A NaN edited into a saved checkpoint, its CRC fixed, is refused on load, and resume
  // "auto" skips it for the previous one.
  info.step = 2;
  save_checkpoint(dir.string(), info, {zeros("a", {2, 3})}, {}, 2);
  info.step = 3;
  save_checkpoint(dir.string(), info, {zeros("a", {2, 3})}, {}, 2);
  const auto step3 = dir / "step-00000003";
  NamedTensor poisoned = zeros("a", {2, 3});
  poisoned.data[5] = std::nanf("");
  save_safetensors((step3 / "model.safetensors").string(), {poisoned});
  std::ifstream in(step3 / "manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  manifest["files"]["model.safetensors"] = file_crc32((step3 / "model.safetensors").string());
  write_file_atomic((step3 / "manifest.json").string(), manifest.dump());
  std::vector<NamedTensor> m, o;
  e = error_of([&] { load_checkpoint(step3.string(), info, m, o); });
  EXPECT_NE(e.find("model.safetensors: tensor a holds nan at element (1, 2)"), std::string::npos) << e;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(newest_checkpoint(dir.string()), (dir / "step-00000002").string());
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("skipping damaged checkpoint"), std::string::npos);
  // A manifest that lists no CRC for a file, or a step that is not a whole number >= 0.
  const auto step2 = dir / "step-00000002";
  std::ifstream in2(step2 / "manifest.json");
  const nlohmann::json good = nlohmann::json::parse(in2);
  auto manifest_error = [&](const nlohmann::json& edited) {
    write_file_atomic((step2 / "manifest.json").string(), edited.dump());
    return error_of([&] { load_checkpoint(step2.string(), info, m, o); });
  };
  nlohmann::json no_files = good;
  no_files["files"] = nlohmann::json::object();
  EXPECT_NE(manifest_error(no_files).find("lists no CRC32 for model.safetensors"), std::string::npos);
  for (const nlohmann::json bad : {nlohmann::json(-1), nlohmann::json(3.5), nlohmann::json(1e20)}) {
    nlohmann::json edited = good;
    edited["step"] = bad;
    e = manifest_error(edited);
    EXPECT_NE(e.find("manifest.json: \"step\" = "), std::string::npos) << e;
  }
  // A manifest "auto" cannot read (no CRC listed) is not skipped as damaged: it stops, naming it.
  write_file_atomic((step2 / "manifest.json").string(), no_files.dump());
  ::testing::internal::CaptureStderr();
  e = error_of([&] { newest_checkpoint(dir.string()); });
  ::testing::internal::GetCapturedStderr();
  EXPECT_NE(e.find("cannot read " + step2.string()), std::string::npos) << e;
  // Every checkpoint damaged (CRC32 mismatches): "auto" refuses to start fresh over them.
  nlohmann::json wrong_crc = good;
  wrong_crc["files"]["model.safetensors"] = "00000000";
  write_file_atomic((step2 / "manifest.json").string(), wrong_crc.dump());
  ::testing::internal::CaptureStderr();
  e = error_of([&] { newest_checkpoint(dir.string()); });
  ::testing::internal::GetCapturedStderr();
  EXPECT_NE(e.find("every one of the 2 checkpoints in"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

TEST(ConfigDifference, FirstDifferingKeyWithBothValues) {
  const std::string a = "[model]\nname = \"mlp\"\n\n[train]\nepochs = 0\nseed = 2\nthreads = 1\n";
  const std::string b = "[model]\nname = \"mlp\"\n\n[train]\nepochs = 0\nseed = 1\nthreads = 3\n";
  const ConfigDifference d = first_config_difference(a, b);
  EXPECT_EQ(d.key, "train.seed");
  EXPECT_EQ(d.a, "2");
  EXPECT_EQ(d.b, "1");
  EXPECT_TRUE(first_config_difference(a, a).key.empty());
  EXPECT_EQ(first_config_difference(a, a + "x = 1\n").key, "line 8");
}

TEST(BackendChoice, CudaWithoutADeviceSaysSoInOneLine) {
  EXPECT_EQ(make_backend(DeviceType::cpu)->name(), "cpu");
  // The NVIDIA driver creates /dev/nvidiactl; without it no device can be found.
  if (std::filesystem::exists("/dev/nvidiactl")) {
    EXPECT_EQ(make_backend(DeviceType::cuda)->name(), "cuda");
  } else {
    const std::string e = error_of([] { make_backend(DeviceType::cuda); });
    EXPECT_NE(e.find("[device] type = \"cuda\": no CUDA device was found"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace subdp
