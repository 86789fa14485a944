// `subdp sample CHECKPOINT`: loads a byte-level GPT or LLaMA from a checkpoint and generates text
// autoregressively (temperature, top-k), printing the prompt and its continuation.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <vector>

#include "engine/core/hash.h"
#include "engine/train/assemble.h"
#include "engine/io/checkpoint.h"
#include "engine/core/backend.h"
#include "engine/cli/commands.h"
#include "engine/cli/config_schema.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"
#include "engine/core/batch.h"
#include "models/model.h"

namespace subdp {

namespace {

/// The checkpoint directory itself, or the newest complete checkpoint under a checkpoint.dir.
std::string checkpoint_path(const std::string& path) {
  if (std::filesystem::exists(std::filesystem::path(path) / "manifest.json")) return path;
  SUBDP_CHECK(std::filesystem::exists(path), "{}: no such checkpoint directory", path);
  SUBDP_CHECK(std::filesystem::is_directory(path),
              "{}: a file, not a checkpoint directory (name the step-N folder or a checkpoint.dir)", path);
  const std::string newest = newest_checkpoint(path, nullptr, /*for_resume=*/false);
  SUBDP_CHECK(!newest.empty(), "{}: neither a checkpoint (no manifest.json) nor a directory holding one", path);
  std::cerr << "sample: " << path << ": its newest checkpoint, " << newest << "\n";  // stdout is the text
  return newest;
}

/// Copies every parameter of model from the checkpoint tensors (checked by
/// check_checkpoint_tensors: same names, same shapes), by name.
void load_weights(Model& model, const std::vector<NamedTensor>& tensors) {
  std::map<std::string, const NamedTensor*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t;
  for (Param* p : model.params().all()) {
    const NamedTensor* t = by_name.at(p->name);
    SUBDP_ASSERT(static_cast<int64_t>(t->data.size()) == p->value.numel());
    set_values(p->value, t->data);
  }
}

/// The logits (V) of the last of the `len` tokens ids[size - len ..], in one evaluation
/// forward of a (1, len) batch (its targets unused).
std::vector<float> last_logits(Model& model, const std::vector<int32_t>& ids, int len, int V) {
  Batch b = Batch::allocate({1, len}, DType::i32, {1, len}, DType::i32);
  std::copy(ids.end() - len, ids.end(), b.x_host.i32());
  std::fill(b.y_host.i32(), b.y_host.i32() + len, 0);
  b.n = 1;
  b.upload();
  model.forward(b, false, nullptr);
  std::vector<float> out = model.read_logits(len - 1, 1);
  SUBDP_CHECK(static_cast<int>(out.size()) == V, "internal: {} logits for a vocabulary of {}", out.size(), V);
  return out;
}

/// Next token from the logits (V) of the last position: argmax when temperature <= 0, else a
/// draw from softmax(logits / temperature) restricted to the top_k largest (top_k <= 0: all).
int next_token(const float* logits, int V, double temperature, int top_k, uint64_t draw) {
  if (temperature <= 0) return static_cast<int>(std::max_element(logits, logits + V) - logits);
  std::vector<int> order(V);
  for (int i = 0; i < V; ++i) order[i] = i;
  const int k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  const double u = (static_cast<double>(mix64(draw) >> 11) + 0.5) / 9007199254740992.0 * sum;
  double acc = 0;
  for (int i = 0; i < k; ++i)
    if ((acc += p[i]) >= u) return order[i];
  return order[k - 1];
}

/// Refuses a `sample --set` key that sample does not read: the checkpoint's weights fix
/// [model], sample runs the assembled full model on one process (no [mask], no [parallel]),
/// and of the rest it reads train.threads and the [device] table only. Throws naming the key;
/// leaves a key the schema does not know to parse_config, which suggests the nearest one.
void check_sample_override(const std::string& o) {
  // --set trims the key, so leading blanks do not hide it
  const std::string setting = o.substr(std::min(o.size(), o.find_first_not_of(" \t")));
  const std::string key = setting.substr(0, setting.find_first_of(" \t="));
  SUBDP_CHECK(key.rfind("model.", 0) != 0,
              "--set {}: the checkpoint's weights fix the [model] table; sample reads only "
              "train.threads, device.type and device.precision",
              o);
  SUBDP_CHECK(key.rfind("mask.", 0) != 0 && key.rfind("parallel.", 0) != 0,
              "--set {}: sample runs the checkpoint's assembled full model on one process, so [mask] and [parallel] "
              "do not apply; sample reads only train.threads, device.type and device.precision",
              o);
  Config scratch;
  const auto schema = schema::fields(scratch);
  const bool known = std::any_of(schema.begin(), schema.end(),
                                 [&](const schema::Field& f) { return key == std::string(f.table) + "." + f.key; });
  if (!known) return;  // parse_config names an unknown key, with the nearest known one
  SUBDP_CHECK(key == "train.threads" || key == "device.type" || key == "device.precision",
              "--set {}: sample does not read {}, so it would have no effect; sample reads only "
              "train.threads, device.type and device.precision",
              o, key);
}

}  // namespace

int run_sample(const std::string& checkpoint, const std::string& prompt, int tokens, double temperature, int top_k,
               uint64_t seed, const std::vector<std::string>& overrides) {
  SUBDP_CHECK(tokens >= 0, "--tokens {} must be >= 0", tokens);
  for (const std::string& o : overrides) check_sample_override(o);
  const std::string path = checkpoint_path(checkpoint);
  CheckpointInfo info;
  std::vector<NamedTensor> tensors, optimizer;
  load_checkpoint(path, info, tensors, optimizer,
                  /*read_optimizer=*/false);  // the manifest's config describes the model
  const Config config = parse_config(info.config_toml, path + "/manifest.json", overrides);
  SUBDP_CHECK(is_language_model(config.model.name), "{}: a checkpoint of model \"{}\"; sample needs a gpt or a llama",
              path, config.model.name);
  SUBDP_CHECK(config.data.name == DatasetKind::text,
              "{}: trained on data.name = \"{}\"; sample reads and writes bytes, so it "
              "needs a byte-level model (data.name = \"text\")",
              path, config.data.name);
  set_backend(make_backend(config.device.type));
  backend().configure(config.train.threads > 0 ? config.train.threads : omp_get_num_procs(),
                      winograd_tile_side(config.train), config.device.precision);
  std::vector<int32_t> ids;
  for (unsigned char ch : prompt) ids.push_back(ch);
  if (ids.empty()) ids.push_back('\n');  // the corpus separates paragraphs by newlines
  // The LLaMA's weights do not depend on the context (rotary embeddings): built for the
  // positions this sample reaches, its attention workspace is not (context, context) floats.
  ModelConfig built = config.model;
  if (built.name == ModelKind::llama)
    built.context = static_cast<int>(std::min<int64_t>(built.context, static_cast<int64_t>(ids.size()) + tokens));
  const ModelUnits units = model_units(built);
  const auto model = make_model(built, full_mask(units), 1, config.train.seed);
  check_checkpoint_tensors(path, full_specs(built), 0, OptimizerLoad::ignore, tensors, optimizer);
  load_weights(*model, tensors);
  tensors.clear();

  // The output is bytes: a vocab beyond 256 (padding) is never drawn from.
  const int T = built.context, V = config.model.vocab, bytes = std::min(V, 256);
  for (int32_t t : ids) SUBDP_CHECK(t < V, "prompt byte {} is >= model.vocab = {}", t, V);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  for (int i = 0; i < tokens; ++i) {
    const int len = std::min<int>(T, static_cast<int>(ids.size()));      // crop to the context
    const std::vector<float> logits = last_logits(*model, ids, len, V);  // (V)
    // Finite weights can still overflow (a checkpoint of a diverging run): a NaN logit would
    // make every draw fail and print the least likely byte, exit 0.
    const auto bad = std::find_if_not(logits.begin(), logits.begin() + bytes, [](float x) { return std::isfinite(x); });
    SUBDP_CHECK(bad == logits.begin() + bytes,
                "{}: the logit of byte {} at output token {} is {}: the checkpoint's weights overflow in the forward "
                "pass (a diverged run?); sample an earlier checkpoint",
                path, bad - logits.begin(), i, *bad);
    const int next = next_token(logits.data(), bytes, temperature, top_k, mix64(seed) ^ static_cast<uint64_t>(i));
    ids.push_back(next);
    std::fputc(next, stdout);
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace subdp
