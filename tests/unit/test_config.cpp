// Config parsing: defaults, overrides, canonical output and the error table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

const char* kMinimal = "[train]\nsteps = 10\n";

/// Message of the subdp::Error thrown by parse_config, or "" when it does not throw.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "configs/x.toml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, Defaults) {
  Config c = parse_config(kMinimal, "configs/x.toml", {});
  Config d;
  EXPECT_EQ(c.source, "configs/x.toml");
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_EQ(c.train.epochs, 0);
  EXPECT_EQ(c.model.name, d.model.name);
  EXPECT_EQ(c.model.hidden, d.model.hidden);
  EXPECT_EQ(c.train.batch_size, d.train.batch_size);
  EXPECT_DOUBLE_EQ(c.optim.lr, d.optim.lr);
  EXPECT_EQ(c.mask.regime, MaskRegime::none);
  EXPECT_DOUBLE_EQ(c.mask.keep, 1.0);
  EXPECT_EQ(c.parallel.backend, CommBackend::automatic);
  EXPECT_EQ(c.device.type, DeviceType::cpu);
  EXPECT_EQ(c.log.every, 50);
  d.train.steps = 10;
  d.source = c.source;
  EXPECT_EQ(config_to_toml(c), config_to_toml(d));
}

TEST(Config, ParsesEveryKind) {
  Config c = parse_config(R"(
[model]
name = "gpt"
width = 96
heads = 6
zero_init_residual = true
[data]
name = "text"
path = "/data/brown"
val_fraction = 0.05
normalize = false
[train]
epochs = 3
seed = 42
[optim]
name = "adamw"
lr = 1          # integer for a float key
beta2 = 0.95
[parallel]
subnetworks = 4
[mask]
regime = "forward"
granularity = "block"
keep = 0.5
pinned = [0, 3]
)",
                          "a.toml", {});
  EXPECT_EQ(c.model.name, ModelKind::gpt);
  EXPECT_EQ(c.model.width, 96);
  EXPECT_TRUE(c.model.zero_init_residual);
  EXPECT_EQ(c.data.path, "/data/brown");
  EXPECT_FALSE(c.data.normalize);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_DOUBLE_EQ(c.optim.lr, 1.0);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.95);
  EXPECT_EQ(c.mask.pinned, (std::vector<int>{0, 3}));
}

TEST(Config, OverridesApply) {
  Config c =
      parse_config("[train]\nsteps = 10\nbatch_size = 32\n", "x.toml",
                   {"train.batch_size=64", "mask.regime=forward", "mask.regime = backward", "mask.pinned=[0,1]",
                    "optim.lr=1e-3", "data.path=/tmp/a b", "checkpoint.resume=\"auto\"", "checkpoint.dir=2024-01-01",
                    "log.metrics_file=", "optim.nesterov=true", "parallel.subnetworks=2", "mask.keep=0.5"});
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_FALSE(c.model.zero_init_residual);        // default
  EXPECT_EQ(c.mask.regime, MaskRegime::backward);  // later overrides win
  EXPECT_EQ(c.mask.pinned, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.data.path, "/tmp/a b");
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.checkpoint.dir, "2024-01-01");  // string keys take the text as is
  EXPECT_EQ(c.log.metrics_file, "");
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_EQ(c.parallel.subnetworks, 2);
}

// A bare --set word may be any UTF-8 (a path in a user's own language): the canonical text a
// checkpoint keeps writes it as \u / \U escapes, ASCII that parses back to the same bytes
// (before, `sample` of such a run's checkpoint refused its manifest as non-ASCII). Bytes
// that are not UTF-8 are refused naming the key; a file's non-ASCII byte is refused with the
// escape as the way out, and the escape reads as the character.
TEST(Config, UnicodeValuesRoundTripAsAsciiEscapes) {
  const std::string path = "m\xc3\xa9triques-\xe2\x82\xac-\xf0\x9f\x98\x80.jsonl";  // é, €, U+1F600
  const Config c = parse_config(kMinimal, "x.toml", {"log.metrics_file=" + path});
  EXPECT_EQ(c.log.metrics_file, path);
  const std::string text = config_to_toml(c);
  EXPECT_NE(text.find("\"m\\u00E9triques-\\u20AC-\\U0001F600.jsonl\""), std::string::npos) << text;
  EXPECT_TRUE(std::all_of(text.begin(), text.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; }));
  EXPECT_EQ(parse_config(text, "manifest.json", {}).log.metrics_file, path);
  for (const std::string bad : {"a\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80"}) {  // stray, cut, overlong, surrogate
    const std::string msg = error_of(kMinimal, {"log.metrics_file=" + bad});
    EXPECT_NE(msg.find("--set log.metrics_file="), std::string::npos) << msg;
    EXPECT_NE(msg.find("is not valid UTF-8"), std::string::npos) << msg;
  }
  const std::string msg = error_of(std::string(kMinimal) + "[log]\nmetrics_file = \"" + path + "\"\n");
  EXPECT_NE(msg.find("configs/x.toml:4: non-ASCII byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\\uXXXX escapes"), std::string::npos) << msg;
  EXPECT_EQ(parse_config(std::string(kMinimal) + "[log]\nmetrics_file = \"\\u00E9\"\n", "x.toml", {}).log.metrics_file,
            "\xc3\xa9");
}

TEST(Config, OverrideCanSetStepsWhenFileHasNone) {
  Config c = parse_config("", "x.toml", {"train.steps=5"});
  EXPECT_EQ(c.train.steps, 5);
}

// Keys with a fixed set of values are enums: each spelling reads as its value, anything else
// is refused naming the key and the spellings.
TEST(Config, ChoiceKeysReadEverySpellingAndRefuseOthers) {
  for (const char* regime : Choices<MaskRegime>::names) {
    const Config c = parse_config(kMinimal, "x.toml",
                                  {std::string("mask.regime=") + regime,
                                   regime == std::string("stochastic") ? "parallel.subnetworks=1" : "mask.keep=1"});
    EXPECT_STREQ(name_of(c.mask.regime), regime);
  }
  EXPECT_EQ(parse_config(kMinimal, "x.toml", {"parallel.backend=auto"}).parallel.backend, CommBackend::automatic);
  EXPECT_EQ(parse_config(kMinimal, "x.toml", {"train.winograd_tile=4x4"}).train.winograd_tile, WinogradTile::t4x4);
  EXPECT_NE(error_of(kMinimal, {"device.type=tpu"})
                .find("[device] type = \"tpu\" (from --set): must be one of cpu, cuda, fenced"),
            std::string::npos)
      << error_of(kMinimal, {"device.type=tpu"});
  EXPECT_NE(
      error_of("[train]\nsteps = 1\n[optim]\nname = 3\n").find("[optim] name = 3: expected a string, found an integer"),
      std::string::npos);
  EXPECT_EQ(fmt::format("{}", MaskScale::inverse_keep), "inverse_keep");
}

TEST(Config, RoundTrip) {
  Config c = parse_config(kMinimal, "x.toml", {});
  c.model.name = ModelKind::resnet;
  c.model.widths = {16, 32};
  c.data.path = "dir with \"quotes\" and \\ slash\tand tab";
  c.optim.lr = 0.1;
  c.optim.eps = 1e-8;
  c.optim.weight_decay = 5e-4;
  c.optim.beta1 = 0.0;
  c.parallel.bucket_mb = 1.0 / 3.0;
  c.mask.regime = MaskRegime::stochastic;  // pinned blocks need a regime that drops blocks
  c.mask.keep = 0.5;
  c.mask.pinned = {1, 2, 5};
  c.mask.seed = 1234567890123ull;
  c.checkpoint.every = 100;
  std::string text = config_to_toml(c);
  Config back = parse_config(text, "roundtrip.toml", {});
  EXPECT_EQ(config_to_toml(back), text);
  EXPECT_EQ(back.data.path, c.data.path);
  EXPECT_EQ(back.optim.lr, c.optim.lr);
  EXPECT_EQ(back.optim.eps, c.optim.eps);
  EXPECT_EQ(back.parallel.bucket_mb, c.parallel.bucket_mb);  // bit-exact
  EXPECT_EQ(back.mask.seed, c.mask.seed);
  EXPECT_EQ(back.mask.pinned, c.mask.pinned);
}

TEST(Config, CanonicalTextListsEveryTableInOrder) {
  std::string text = config_to_toml(parse_config(kMinimal, "x.toml", {}));
  size_t last = 0;
  for (const char* t :
       {"[model]", "[data]", "[train]", "[optim]", "[parallel]", "[mask]", "[device]", "[checkpoint]", "[log]"}) {
    size_t at = text.find(t);
    ASSERT_NE(at, std::string::npos) << t;
    EXPECT_GE(at, last) << t;
    last = at;
  }
  EXPECT_NE(text.find("keep = 1.0\n"), std::string::npos);  // floats stay floats
  EXPECT_NE(text.find("hidden = [1024, 1024]\n"), std::string::npos);
}

TEST(Config, LoadConfigReadsFileAndNamesMissingOne) {
  std::string path = ::testing::TempDir() + "subdp_test_config.toml";
  {
    std::ofstream out(path);
    out << "[train]\nepochs = 2\n[model]\nname = \"resnet\"\n";
  }
  Config c = load_config(path, {"train.batch_size=8"});
  EXPECT_EQ(c.model.name, ModelKind::resnet);
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_EQ(c.train.batch_size, 8);
  EXPECT_EQ(c.source, path);
  std::remove(path.c_str());
  try {
    load_config(path, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Config, ExampleMessageFormat) {
  EXPECT_EQ(error_of("[train]\nsteps = 10\nbatch_size = -3\n"),
            "configs/x.toml: [train] batch_size = -3: must be in [1, 1048576]");
}

// Each case: TOML text, overrides, strings the message must contain.
struct ErrorCase {
  const char* name;
  std::string text;
  std::vector<std::string> overrides;
  std::vector<std::string> expect;
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class ConfigErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrors, MessageNamesTheKey) {
  const ErrorCase& c = GetParam();
  std::string msg = error_of(c.text, c.overrides);
  ASSERT_FALSE(msg.empty()) << "no error for case " << c.name;
  for (const auto& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
}

const std::string S = "[train]\nsteps = 10\n";  // a valid base

INSTANTIATE_TEST_SUITE_P(
    Table, ConfigErrors,
    ::testing::Values(
        ErrorCase{"unknown_table",
                  S + "[trian]\nx = 1\n",
                  {},
                  {"configs/x.toml", "unknown table [trian]", "valid tables", "model", "log"}},
        ErrorCase{"unknown_key",
                  S + "bach_size = 3\n",
                  {},
                  {"configs/x.toml", "train.bach_size", "batch_size", "valid keys of [train]"}},
        ErrorCase{"nested_unknown", S + "[model.extra]\nx = 1\n", {}, {"model.extra", "valid keys of [model]"}},
        ErrorCase{"top_level_key", "steps = 10\n", {}, {"unknown table [steps]"}},
        ErrorCase{"table_as_value", S + "model = 3\n", {}, {"train.model"}},
        ErrorCase{"wrong_type_int",
                  S + "batch_size = \"big\"\n",
                  {},
                  {"[train] batch_size = \"big\"", "expected an integer", "string"}},
        ErrorCase{"float_for_int", S + "batch_size = 64.0\n", {}, {"batch_size", "expected an integer", "float"}},
        ErrorCase{"wrong_type_float", S + "[optim]\nlr = \"fast\"\n", {}, {"[optim] lr", "expected a number"}},
        ErrorCase{"wrong_type_bool", S + "[data]\nnormalize = 1\n", {}, {"[data] normalize", "expected a boolean"}},
        ErrorCase{"wrong_type_string", S + "[mask]\nregime = 1\n", {}, {"[mask] regime", "expected a string"}},
        ErrorCase{"wrong_type_list", S + "[model]\nhidden = 64\n", {}, {"[model] hidden", "expected an array"}},
        ErrorCase{"list_element_type", S + "[model]\nhidden = [64, \"a\"]\n", {}, {"[model] hidden", "integers"}},
        ErrorCase{"empty_list", S + "[model]\nwidths = []\n", {}, {"[model] widths", "must not be empty"}},
        ErrorCase{"list_element_range", S + "[model]\nhidden = [64, 0]\n", {}, {"[model] hidden", "[1, 16777216]"}},
        ErrorCase{"batch_size", S + "batch_size = 0\n", {}, {"[train] batch_size = 0", "must be in [1, 1048576]"}},
        ErrorCase{"keep_zero", S + "[mask]\nkeep = 0.0\n", {}, {"[mask] keep", "(0, 1]"}},
        ErrorCase{"keep_big", S + "[mask]\nkeep = 1.5\n", {}, {"[mask] keep = 1.5", "(0, 1]"}},
        ErrorCase{"lr", S + "[optim]\nlr = 0\n", {}, {"[optim] lr = 0", "> 0"}},
        ErrorCase{"lr_nan", S + "[optim]\nlr = nan\n", {}, {"[optim] lr", "finite"}},
        // Issue 22: lr = 1e39 was accepted and every weight became inf at the first update.
        ErrorCase{"lr_beyond_float32", S, {"optim.lr=1e39"}, {"[optim] lr = 9.99", "(from --set)", "float32"}},
        ErrorCase{"eps_below_float32", S + "[optim]\neps = 1e-50\n", {}, {"[optim] eps", "float32"}},
        ErrorCase{
            "max_skipped_steps", S + "max_skipped_steps = -1\n", {}, {"[train] max_skipped_steps", "[0, 1000000]"}},
        ErrorCase{"recompute_mlp",
                  S + "recompute = \"blocks\"\n",
                  {},
                  {"[train] recompute = \"blocks\"", "MLP has no blocks"}},
        ErrorCase{"fsdp_backward",
                  S,
                  {"parallel.shard=parameters", "mask.regime=backward"},
                  {"[parallel] shard = \"parameters\"", "regime = \"backward\""}},
        ErrorCase{"alignment_fsdp",
                  S,
                  {"log.alignment_every=5", "mask.regime=forward", "parallel.shard=parameters"},
                  {"[log] alignment_every = 5", "shard = \"parameters\""}},
        ErrorCase{"alignment_zero2",
                  S,
                  {"log.alignment_every=5", "mask.regime=backward", "parallel.shard=gradients"},
                  {"[log] alignment_every = 5", "shard = \"gradients\""}},
        ErrorCase{"alignment_dp", S + "[log]\nalignment_every = 5\n", {}, {"[log] alignment_every = 5", "forward"}},
        ErrorCase{"stochastic_subnetworks",
                  S + "[mask]\nregime = \"stochastic\"\n[parallel]\nsubnetworks = 2\n",
                  {},
                  {"[mask] regime = \"stochastic\"", "subnetworks = 1"}},
        // Only the setting that is wrong is named (was: "subnetworks = 1 (got 1)" as well).
        ErrorCase{"stochastic_neuron",
                  S + "[mask]\nregime = \"stochastic\"\ngranularity = \"neuron\"\n",
                  {},
                  {"it needs [mask] granularity = \"block\" (got \"neuron\")"}},
        ErrorCase{"reset_optimizer_without_resume",
                  S + "[checkpoint]\nreset_optimizer = true\n",
                  {},
                  {"[checkpoint] reset_optimizer = true", "set [checkpoint] resume"}},
        ErrorCase{"reset_optimizer_type",
                  S + "[checkpoint]\nreset_optimizer = 1\n",
                  {},
                  {"[checkpoint] reset_optimizer", "boolean"}},
        ErrorCase{"beta", S + "[optim]\nbeta2 = 1.0\n", {}, {"[optim] beta2", "[0, 1)"}},
        ErrorCase{"threads", S + "threads = -1\n", {}, {"[train] threads = -1", "[0, 1024]"}},
        ErrorCase{"threads_too_many", S + "threads = 100000\n", {}, {"[train] threads = 100000", "[0, 1024]"}},
        ErrorCase{"width_huge",
                  S + "[model]\nwidth = 2000000000\nheads = 1\n",
                  {},
                  {"[model] width = 2000000000", "[1, 65536]"}},
        ErrorCase{"seed_negative", S + "seed = -1\n", {}, {"[train] seed", ">= 0"}},
        ErrorCase{"int_overflow", S + "eval_batches = 10000000000\n", {}, {"[train] eval_batches", "does not fit"}},
        ErrorCase{"subnetworks", S + "[parallel]\nsubnetworks = 0\n", {}, {"[parallel] subnetworks", "[1, 4096]"}},
        ErrorCase{"log_every", S + "[log]\nevery = 0\n", {}, {"[log] every", ">= 1"}},
        ErrorCase{"val_fraction", S + "[data]\nval_fraction = 1\n", {}, {"[data] val_fraction", "(0, 1)"}},
        ErrorCase{"model_enum", S + "[model]\nname = \"vgg\"\n", {}, {"[model] name = \"vgg\"", "mlp, resnet, gpt"}},
        ErrorCase{"data_enum", S + "[data]\nname = \"imagenet\"\n", {}, {"[data] name", "fashion_mnist"}},
        ErrorCase{
            "regime_enum", S + "[mask]\nregime = \"sideways\"\n", {}, {"[mask] regime", "none, forward, backward"}},
        ErrorCase{
            "granularity_enum", S + "[mask]\ngranularity = \"layer\"\n", {}, {"[mask] granularity", "block, neuron"}},
        ErrorCase{"scale_enum", S + "[mask]\nscale = \"keep\"\n", {}, {"[mask] scale", "inverse_keep, none"}},
        ErrorCase{"backend_enum",
                  S + "[parallel]\nbackend = \"gloo\"\n",
                  {},
                  {"[parallel] backend", "auto, mpi, nccl, local"}},
        ErrorCase{"device_enum", S + "[device]\ntype = \"tpu\"\n", {}, {"[device] type", "cpu, cuda"}},
        ErrorCase{"precision_bf16_cpu",
                  S + "[device]\nprecision = \"bf16\"\n",
                  {},
                  {"[device] precision = \"bf16\"", "CUDA devices only", "device.type = \"cpu\""}},
        ErrorCase{"precision_tf32_cpu",
                  S + "[device]\nprecision = \"tf32\"\n",
                  {},
                  {"[device] precision = \"tf32\"", "CUDA devices only", "device.type = \"cpu\""}},
        ErrorCase{
            "precision_enum", S + "[device]\nprecision = \"fp16\"\n", {}, {"[device] precision", "fp32, tf32, bf16"}},
        ErrorCase{"schedule_enum", S + "[optim]\nschedule = \"step\"\n", {}, {"[optim] schedule", "cosine, constant"}},
        ErrorCase{
            "lr_scaling_enum", S + "[optim]\nlr_scaling = \"sqrt\"\n", {}, {"[optim] lr_scaling", "none, linear"}},
        ErrorCase{"nonfinite_enum", S + "nonfinite = \"ignore\"\n", {}, {"[train] nonfinite", "stop, skip"}},
        ErrorCase{"both_epochs_steps",
                  "[train]\nepochs = 2\nsteps = 10\n",
                  {},
                  {"[train]", "epochs", "steps", "exactly one"}},
        ErrorCase{"neither_epochs_steps", "[train]\nbatch_size = 4\n", {}, {"epochs", "steps", "exactly one"}},
        ErrorCase{"zero_init_mlp",
                  S + "[model]\nzero_init_residual = true\n",
                  {},
                  {"[model] zero_init_residual = true", "no residual branches"}},
        ErrorCase{"kv_heads_divide",
                  S + "[model]\nname = \"llama\"\nwidth = 96\nheads = 6\nkv_heads = 4\n",
                  {},
                  {"[model] kv_heads = 4", "must divide heads = 6"}},
        ErrorCase{"kv_heads_neuron",
                  S + "[model]\nname = \"llama\"\nkv_heads = 2\n[mask]\nregime = \"forward\"\ngranularity = "
                      "\"neuron\"\n",
                  {},
                  {"[model] kv_heads = 2 < heads = 8", "granularity = \"block\""}},
        ErrorCase{"kv_heads_neuron_unmasked",  // was an internal assertion in the attention layer
                  S + "[model]\nname = \"llama\"\nkv_heads = 2\n[mask]\ngranularity = \"neuron\"\n",
                  {},
                  {"[model] kv_heads = 2 < heads = 8", "granularity = \"block\""}},
        ErrorCase{"collective_timeout_below_tick",  // was a random "peer lost" abort after 0.0 s
                  S,
                  {"parallel.collective_timeout_s=0.001"},
                  {"[parallel] collective_timeout_s = 0.001", "must be >= 1"}},
        ErrorCase{"units_cap",  // was the OOM killer (plan) or std::bad_alloc
                  S + "[model]\nname = \"llama\"\nwidth = 32\nheads = 4\ndepth = 4096\nffn_width = 16777216\n",
                  {},
                  {"[model] depth x (heads + ffn_width) = 4096 x (4 + 16777216)", "at most 67108864"}},
        ErrorCase{"gemm_rows_32bit",  // plan printed wrapped byte counts
                  S + "[model]\nname = \"llama\"\ncontext = 1048576\n",
                  {"train.batch_size=2048"},
                  {"batch_size x [model] context = 2048 x 1048576 = 2147483648 rows", "2^31 - 1"}},
        ErrorCase{"rank_bytes_past_2_56",  // plan printed a total below its own activations
                  S + "[model]\nname = \"llama\"\ncontext = 1048576\nwidth = 65536\nheads = 512\ndepth = "
                      "4096\nffn_width = 64\n",
                  {"train.batch_size=1"},
                  {"batch_size = 1 need about", "bytes per rank, past 2^56"}},
        ErrorCase{"token_data_for_an_image_model",  // was found only when the data source was built
                  S + "[data]\nname = \"text\"\n",
                  {},
                  {"configs/x.toml", "[data] name = \"text\" with [model] name = \"mlp\"", "token data needs"}},
        ErrorCase{"image_data_for_a_language_model",
                  S + "[model]\nname = \"llama\"\n[data]\nname = \"cifar10\"\n",
                  {},
                  {"configs/x.toml", "[data] name = \"cifar10\" with [model] name = \"llama\"", "\"token_shards\""}},
        ErrorCase{"cuda_head_wider_than_its_attention",  // was found at the first attention layer
                  S + "[model]\nname = \"gpt\"\nwidth = 512\nheads = 2\n[data]\nname = \"text\"\n",
                  {"device.type=cuda"},
                  {"configs/x.toml", "width / heads = 512 / 2", "a head of 256 columns", "at most 128"}},
        ErrorCase{"resnet_sample_32bit",
                  S + "[model]\nname = \"resnet\"\nimage_size = 16384\nwidths = [64, 128]\n",
                  {},
                  {"[model] image_size = 16384 with widths up to 128", "17179869184 values", "2^31 - 1"}},
        ErrorCase{"kv_heads_gpt",
                  S + "[model]\nname = \"gpt\"\nkv_heads = 2\n",
                  {},
                  {"[model] kv_heads is set", "model.name = \"gpt\" does not read it", "applies to llama"}},
        ErrorCase{"mlp_ratio_llama",
                  S + "[model]\nname = \"llama\"\nmlp_ratio = 7\n",
                  {},
                  {"[model] mlp_ratio is set", "\"llama\" does not read it", "applies to gpt"}},
        ErrorCase{"ffn_width_gpt", S + "[model]\nname = \"gpt\"\n", {"model.ffn_width=100"}, {"ffn_width", "llama"}},
        ErrorCase{"width_mlp", S, {"model.width=64"}, {"[model] width is set", "\"mlp\"", "gpt, llama"}},
        ErrorCase{"pinned_neuron",
                  S + "[parallel]\nsubnetworks = 2\n[mask]\nregime = \"forward\"\ngranularity = "
                      "\"neuron\"\nkeep = 0.5\npinned = [0]\n",
                  {},
                  {"[mask] pinned = [0]", "granularity = \"block\"", "ignored"}},
        ErrorCase{"pinned_no_regime", S + "[mask]\npinned = [1]\n", {}, {"[mask] pinned = [1]", "regime \"none\""}},
        ErrorCase{"pinned_twice",
                  S + "[mask]\nregime = \"stochastic\"\nkeep = 0.5\npinned = [2, 0, 2]\n",
                  {},
                  {"[mask] pinned = [2, 0, 2]", "block 2 is listed twice"}},
        ErrorCase{"width_heads",
                  S + "[model]\nwidth = 100\nheads = 8\n",
                  {},
                  {"[model] width = 100", "divisible by heads = 8"}},
        ErrorCase{"coverage",
                  S + "[parallel]\nsubnetworks = 4\n[mask]\nregime = \"forward\"\nkeep = 0.3\n",
                  {},
                  {"[mask] keep", "whole number"}},
        ErrorCase{"coverage_product_unrounded",
                  S + "[parallel]\nsubnetworks = 3\n[mask]\nregime = \"forward\"\nkeep = 0.6666667\n",
                  {},
                  {"0.6666667 * 3 = 2.0000001 must be a whole number"}},
        ErrorCase{"resume_auto_no_dir", S + "[checkpoint]\nresume = \"auto\"\n", {}, {"[checkpoint] resume", "dir"}},
        ErrorCase{"invalid_toml", S + "batch_size = = 3\n", {}, {"configs/x.toml:3", "invalid TOML"}},
        ErrorCase{"override_unknown_key",
                  S,
                  {"train.bach_size=3"},
                  {"--set train.bach_size=3", "unknown key train.bach_size", "did you mean 'batch_size'"}},
        ErrorCase{"override_unknown_table", S, {"trian.steps=3"}, {"unknown table [trian]", "trian.steps"}},
        ErrorCase{"override_malformed", S, {"train.batch_size"}, {"--set train.batch_size", "table.key=value"}},
        ErrorCase{"override_no_table", S, {"batch_size=3"}, {"batch_size", "table.key"}},
        ErrorCase{
            "override_bad_value", S, {"train.batch_size=-3"}, {"[train] batch_size = -3 (from --set)", "[1, 1048576]"}},
        ErrorCase{"override_bare_word_for_int",
                  S,
                  {"train.batch_size=big"},
                  {"[train] batch_size = \"big\"", "expected an integer"}},
        ErrorCase{"override_huge_int",
                  S,
                  {"train.batch_size=99999999999999999999"},
                  {"train.batch_size", "99999999999999999999", "64-bit range"}},
        ErrorCase{"override_float_out_of_range", S, {"optim.lr=1e400"}, {"optim.lr=1e400", "not a TOML number"}},
        ErrorCase{"override_float_bare_point", S, {"optim.lr=.5"}, {"optim.lr=.5", "not a TOML number"}},
        ErrorCase{
            "override_enum", S, {"mask.regime=sideways"}, {"[mask] regime = \"sideways\"", "none, forward, backward"}}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

TEST(Config, ADirectoryOrDeviceIsNotAConfigFile) {
  for (const std::string path : {::testing::TempDir(), std::string("/dev/null")}) {
    try {
      load_config(path, {});
      FAIL() << "accepted " << path;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("not a"), std::string::npos) << msg;
    }
  }
}

TEST(Config, ASubnormalKeepIsNotCalledZeroOrValid) {
  // keep must be in (0, 1]: the float32 message must not offer 0 as a way out.
  const std::string msg = error_of(S + "[mask]\nkeep = 1e-45\n");
  EXPECT_NE(msg.find("[mask] keep"), std::string::npos) << msg;
  EXPECT_NE(msg.find("normal float32"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("must be 0"), std::string::npos) << msg;
  // A key that allows 0 still says so.
  EXPECT_NE(error_of(S + "[optim]\nweight_decay = 1e-45\n").find("must be 0 or a normal float32"), std::string::npos);
}

}  // namespace
}  // namespace subdp
