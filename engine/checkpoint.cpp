// Checkpoint directories: atomic write, manifest with CRCs, rotation, resume auto.
#include "engine/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "engine/error.h"

namespace fs = std::filesystem;

namespace subdp {

namespace {

constexpr const char* kFormat = "subdp-checkpoint-v1";

std::string step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && n.find(".tmp") == std::string::npos) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<NamedTensor>& model,
                            const std::vector<NamedTensor>& optimizer, int keep_last) {
  const fs::path final_path = fs::path(dir) / step_name(info.step);
  for (const auto& t : model) check_finite((final_path / "model.safetensors").string(), t);
  for (const auto& t : optimizer) check_finite((final_path / "optimizer.safetensors").string(), t);
  const fs::path tmp = fs::path(dir) / (step_name(info.step) + ".tmp");
  std::error_code ec;
  fs::create_directories(tmp, ec);
  SUBDP_CHECK(!ec, "checkpoint.dir = \"{}\": cannot create {}: {}", dir, tmp.string(), ec.message());
  save_safetensors((tmp / "model.safetensors").string(), model, {{"format", "pt"}});
  save_safetensors((tmp / "optimizer.safetensors").string(), optimizer);
  nlohmann::json m;
  m["format"] = kFormat;
  m["step"] = info.step;
  m["optimizer_steps"] = info.optimizer_steps;
  m["model"] = info.model_name;
  m["plan_hash"] = fmt::format("{:016x}", info.plan_hash);
  m["world"] = info.world;
  m["subnetworks"] = info.subnetworks;
  m["config"] = info.config_toml;
  if (std::isfinite(info.train_loss)) m["train_loss"] = info.train_loss;  // JSON has no NaN
  m["files"] = {{"model.safetensors", file_crc32((tmp / "model.safetensors").string())},
                {"optimizer.safetensors", file_crc32((tmp / "optimizer.safetensors").string())}};
  write_file_atomic((tmp / "manifest.json").string(), m.dump(2));
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  SUBDP_CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), final_path.string(), ec.message());
  auto all = complete_checkpoints(dir);
  for (size_t i = 0; i + keep_last < all.size(); ++i) fs::remove_all(all[i], ec);
  return final_path.string();
}

void load_checkpoint(const std::string& path, CheckpointInfo& info, std::vector<NamedTensor>& model,
                     std::vector<NamedTensor>& optimizer, bool read_optimizer) {
  const fs::path dir(path);
  const fs::path manifest = dir / "manifest.json";
  std::ifstream in(manifest);
  SUBDP_CHECK(in.good(), "{}: missing or unreadable (not a subdp checkpoint directory?)", manifest.string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(ss.str());
    SUBDP_CHECK(m.value("format", "") == kFormat, "{}: format \"{}\", expected \"{}\"", manifest.string(),
                m.value("format", ""), kFormat);
    for (const char* key : {"step", "optimizer_steps"})
      SUBDP_CHECK(m.at(key).is_number_integer() && m.at(key).get<int64_t>() >= 0 &&
                      m.at(key).get<int64_t>() <= (int64_t{1} << 50),
                  "{}: \"{}\" = {}: expected a whole number in [0, 2^50]", manifest.string(), key, m.at(key).dump());
    info.step = m.at("step").get<int64_t>();
    info.optimizer_steps = m.at("optimizer_steps").get<int64_t>();
    info.model_name = m.at("model").get<std::string>();
    info.config_toml = m.at("config").get<std::string>();
    info.plan_hash = std::stoull(m.at("plan_hash").get<std::string>(), nullptr, 16);
    info.world = m.at("world").get<int>();
    info.subnetworks = m.at("subnetworks").get<int>();
    info.train_loss = m.contains("train_loss") ? m["train_loss"].get<double>() : std::nan("");
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      SUBDP_CHECK(m.at("files").contains(file), "{}: \"files\" lists no CRC32 for {} (damaged manifest)",
                  manifest.string(), file);
    for (auto& [file, crc] : m.at("files").items()) {
      const std::string actual = file_crc32((dir / file).string());
      SUBDP_CHECK(actual == crc.get<std::string>(), "{}: CRC32 {} does not match the manifest's {} (damaged checkpoint)",
                  (dir / file).string(), actual, crc.get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: malformed manifest: {}", manifest.string(), e.what()));
  }
  model = load_safetensors((dir / "model.safetensors").string());
  optimizer.clear();
  if (read_optimizer) optimizer = load_safetensors((dir / "optimizer.safetensors").string());
  for (const auto& t : model) check_finite((dir / "model.safetensors").string(), t);
  for (const auto& t : optimizer) check_finite((dir / "optimizer.safetensors").string(), t);
}

std::string resolve_checkpoint(const std::string& resume, const std::string& dir, LoadedCheckpoint* loaded) {
  if (resume != "auto") return resume;
  auto all = complete_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      LoadedCheckpoint c;
      load_checkpoint(it->string(), c.info, c.model, c.optimizer);
      c.loaded = true;
      if (loaded) *loaded = std::move(c);
      return it->string();
    } catch (const Error& e) {
      std::cerr << "subdp: warning: skipping damaged checkpoint: " << e.what() << "\n";  // CRC, inf/NaN, ...
    }
  }
  // Starting fresh would write new checkpoints over the damaged ones: refuse instead.
  SUBDP_CHECK(all.empty(), "checkpoint.resume = \"auto\": every one of the {} checkpoints in {} is damaged (see the "
              "warnings above); move them away to start fresh, or resume from a path", all.size(), dir);
  return "";
}

}  // namespace subdp
