// Checkpoint directories: atomic write, manifest with CRCs, rotation, resume auto.
#include "engine/io/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include <sys/statvfs.h>

#include "engine/core/error.h"
#include "engine/core/tensor.h"

namespace fs = std::filesystem;

namespace subdp {

namespace {

constexpr const char* kFormat = "subdp-checkpoint-v1";

std::string step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

/// The step of a folder named step-N (N digits only, as save_checkpoint names them), or -1 for
/// any other name: a copy named step-best or step-00000004.keep is the user's, which "auto"
/// never resumes from and keep_last never deletes.
int64_t folder_step(const std::string& name) {
  if (name.size() <= 5 || name.size() > 5 + 18 || name.rfind("step-", 0) != 0 ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  return std::stoll(name.substr(5));  // 18 digits fit
}

/// True for a folder named step-N, N digits only: the names "auto" orders checkpoints by.
bool is_step_folder(const std::string& name) { return folder_step(name) >= 0; }

/// The complete checkpoints save_checkpoint wrote in dir (step-N folders; step-N.tmp is one
/// being written), oldest first by N.
std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir)) {
    const int64_t step = folder_step(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) found.emplace_back(step, e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

/// "step-A", or "step-A .. step-B": the first and last of sorted checkpoint folders (not empty).
std::string first_to_last(const std::vector<fs::path>& all) {
  std::string names = all.front().filename().string();
  if (all.size() > 1) names += " .. " + all.back().filename().string();
  return names;
}

/// A folder named step-N must hold the checkpoint of step N: "auto" orders checkpoints by their
/// folder names, so a renamed one would resume from another step than the one it looks like.
/// Folders of other names (a copy in best/) are not checked.
void check_folder_names_step(const fs::path& dir, int64_t step) {
  const std::string name = dir.filename().string();
  SUBDP_CHECK(!is_step_folder(name) || name == step_name(step),
              "{}: the manifest's \"step\" is {} but the folder is named {} (renamed by hand?); rename it to {}, "
              "or resume from it by a path whose name is not step-N",
              (dir / "manifest.json").string(), step, name, step_name(step));
}

/// The manifest of checkpoint `path`, parsed and checked: this format, and every key of the
/// expected JSON type. Errors name the manifest and the key.
nlohmann::json read_manifest(const std::string& path) {
  const std::string manifest = (fs::path(path) / "manifest.json").string();
  std::ifstream in(manifest);
  if (!in.good()) {
    // A checkpoint.dir named where one of its checkpoints was meant: say which.
    const auto inside = complete_checkpoints(path);
    SUBDP_CHECK(inside.empty(),
                "{}: not a checkpoint but a folder of {} checkpoint(s) ({}): name one of them, or resume its "
                "newest with checkpoint.dir = \"{}\" and checkpoint.resume = \"auto\"",
                path, inside.size(), first_to_last(inside), path);
  }
  SUBDP_CHECK(in.good(), "{}: missing or unreadable (not a subdp checkpoint directory?)", manifest);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json m = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  SUBDP_CHECK(m.is_object(), "{}: malformed manifest: not a JSON object", manifest);
  auto has = [&](const char* key, bool ok, const std::string& expected) {
    SUBDP_CHECK(m.contains(key), "{}: malformed manifest: no \"{}\"", manifest, key);
    SUBDP_CHECK(ok, "{}: \"{}\" = {}: expected {}", manifest, key, m[key].dump(), expected);
  };
  has("format", m.contains("format") && m["format"].is_string(), "a string such as \"" + std::string(kFormat) + "\"");
  SUBDP_CHECK(m["format"] == kFormat,
              "{}: \"format\" = {}: this subdp reads \"{}\" only (a checkpoint of another "
              "subdp version?)",
              manifest, m["format"].dump(), kFormat);
  for (const char* key : {"step", "optimizer_steps"})
    has(key,
        m.contains(key) && m[key].is_number_integer() && m[key].get<int64_t>() >= 0 &&
            m[key].get<int64_t>() <= (int64_t{1} << 50),
        "a whole number in [0, 2^50]");
  for (const char* key : {"model", "config", "plan_hash"}) has(key, m.contains(key) && m[key].is_string(), "a string");
  for (const char* key : {"world", "subnetworks"})
    has(key,
        m.contains(key) && m[key].is_number_integer() && m[key].get<int64_t>() >= 1 &&
            m[key].get<int64_t>() <= (1 << 20),
        "a whole number in [1, 2^20]");
  if (m.contains("train_loss")) has("train_loss", m["train_loss"].is_number(), "a number");
  has("files", m.contains("files") && m["files"].is_object(), "an object of file name -> CRC32");
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    SUBDP_CHECK(m["files"].contains(file), "{}: \"files\" lists no CRC32 for {} (damaged manifest)", manifest, file);
  for (auto& [file, crc] : m["files"].items())
    SUBDP_CHECK(crc.is_string() && file.find('/') == std::string::npos && file.find("..") == std::string::npos,
                "{}: \"files\": entry \"{}\" = {}: expected a file of the checkpoint and its CRC32 as a string",
                manifest, file, crc.dump());
  return m;
}

/// "" when checkpoint `path` has this format and every file its CRC32; else why not.
std::string verify_checkpoint_files(const std::string& path) {
  try {
    const nlohmann::json m = read_manifest(path);
    for (auto& [file, crc] : m["files"].items())
      SUBDP_CHECK(file_crc32((fs::path(path) / file).string()) == crc.get<std::string>(),
                  "{}: CRC32 does not match the manifest's", (fs::path(path) / file).string());
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

constexpr int64_t kCheckpointFixedBytes = 2 * 65536;  // the manifest (the config's text), both files' headers
/// A tensor's float32 data and its header entry (name, dtype, shape, offsets), generously.
int64_t tensor_entry_bytes(int64_t elements, size_t name_length) {
  return elements * 4 + 128 + 2 * static_cast<int64_t>(name_length);
}

}  // namespace

int64_t checkpoint_bytes(const std::vector<NamedTensor>& model, const std::vector<NamedTensor>& optimizer) {
  int64_t bytes = kCheckpointFixedBytes;
  for (const auto* tensors : {&model, &optimizer})
    for (const NamedTensor& t : *tensors)
      bytes += tensor_entry_bytes(static_cast<int64_t>(t.data.size()), t.name.size());
  return bytes;
}

int64_t checkpoint_bytes(const std::vector<FullTensorSpec>& specs, int states) {
  int64_t bytes = kCheckpointFixedBytes;
  for (const FullTensorSpec& s : specs) {
    const int copies = 1 + (s.trainable ? states : 0);  // the values, then "<name>::k" per state
    bytes += copies * tensor_entry_bytes(shape_numel(s.shape), s.name.size() + 4);
  }
  return bytes;
}

int64_t free_disk_bytes(const std::string& path) {
  struct statvfs fs_info;
  if (::statvfs(path.c_str(), &fs_info) != 0) return -1;
  return static_cast<int64_t>(fs_info.f_bavail) * static_cast<int64_t>(fs_info.f_frsize);
}

void check_free_space(const std::string& dir, int64_t step, int64_t needed, int64_t free_bytes, int keep_last) {
  const int64_t room = int64_t{keep_last} + 1;  // keep_last may be INT_MAX
  SUBDP_CHECK(free_bytes < 0 || free_bytes >= needed,
              "checkpoint.dir = \"{}\": the checkpoint of step {} needs {:.1f} MiB, the file system has {:.1f} MiB "
              "free; nothing was written. checkpoint.keep_last = {} are kept and the oldest is deleted only once a "
              "new one is complete, so the run needs room for {} ({:.1f} MiB); free space, {}or set checkpoint.dir "
              "elsewhere",
              dir, step, needed / 1048576.0, free_bytes / 1048576.0, keep_last, room,
              static_cast<double>(room) * (needed / 1048576.0),
              keep_last > 1 ? "lower checkpoint.keep_last (1 needs room for two), " : "");
}

std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<NamedTensor>& model,
                            const std::vector<NamedTensor>& optimizer, int keep_last, CheckpointLedger* ledger) {
  const fs::path final_path = fs::path(dir) / step_name(info.step);
  for (const auto& t : model) check_finite((final_path / "model.safetensors").string(), t);
  for (const auto& t : optimizer) check_finite((final_path / "optimizer.safetensors").string(), t);
  const fs::path tmp = fs::path(dir) / (step_name(info.step) + ".tmp");
  std::error_code ec;
  fs::create_directories(dir, ec);
  SUBDP_CHECK(!ec, "checkpoint.dir = \"{}\": cannot create it: {}", dir, ec.message());
  check_free_space(dir, info.step, checkpoint_bytes(model, optimizer), free_disk_bytes(dir), keep_last);
  if (fs::exists(tmp)) {  // an interrupted save's partial folder: never renamed into a checkpoint
    std::cerr << "subdp: warning: removing " << tmp.string() << ", the partial folder of an interrupted save\n";
    fs::remove_all(tmp, ec);
    SUBDP_CHECK(!ec, "checkpoint.dir = \"{}\": cannot remove the leftover {}: {}", dir, tmp.string(), ec.message());
  }
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
  CheckpointLedger local;
  CheckpointLedger& book = ledger ? *ledger : local;
  if (fs::exists(final_path) && !book.trusted.count(final_path.string())) {
    // A checkpoint of this step that this run did not write: replaced only when it verifies
    // (a rerun of the same step); one it cannot read is never destroyed unread.
    const std::string why = verify_checkpoint_files(final_path.string());
    if (!why.empty()) {
      fs::remove_all(tmp, ec);
      throw Error(
          fmt::format("checkpoint.dir = \"{}\": {} exists and is not a checkpoint this run can verify ({}); "
                      "not overwriting it: move it away, or set checkpoint.dir elsewhere",
                      dir, final_path.string(), why));
    }
  }
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  SUBDP_CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), final_path.string(), ec.message());
  book.trusted.insert(final_path.string());
  prune_checkpoints(dir, keep_last, book, final_path.string());
  return final_path.string();
}

void prune_checkpoints(const std::string& dir, int keep_last, CheckpointLedger& ledger, const std::string& newest) {
  const auto all = complete_checkpoints(dir);
  for (size_t i = 0; i + keep_last < all.size(); ++i) {
    const std::string path = all[i].string();
    if (path == newest || ledger.refused.count(path)) continue;
    std::string why;
    if (!ledger.trusted.count(path)) why = verify_checkpoint_files(path);
    if (!why.empty()) {
      ledger.refused.insert(path);
      std::cerr << "subdp: warning: checkpoint.keep_last: not deleting " << path
                << ", which this run did not write and cannot verify: " << why << "\n";
      continue;
    }
    std::error_code ec;
    fs::remove_all(all[i], ec);
    ledger.trusted.erase(path);
  }
}

void load_checkpoint(const std::string& path, CheckpointInfo& info, std::vector<NamedTensor>& model,
                     std::vector<NamedTensor>& optimizer, bool read_optimizer) {
  const fs::path dir(path);
  const nlohmann::json m = read_manifest(path);
  const std::string manifest = (dir / "manifest.json").string();
  info.step = m["step"].get<int64_t>();
  check_folder_names_step(dir, info.step);
  info.optimizer_steps = m["optimizer_steps"].get<int64_t>();
  info.model_name = m["model"].get<std::string>();
  info.config_toml = m["config"].get<std::string>();
  const std::string hash = m["plan_hash"].get<std::string>();
  SUBDP_CHECK(hash.size() == 16 && hash.find_first_not_of("0123456789abcdef") == std::string::npos,
              "{}: \"plan_hash\" = \"{}\": expected 16 hex digits", manifest, hash);
  info.plan_hash = std::stoull(hash, nullptr, 16);
  info.world = m["world"].get<int>();
  info.subnetworks = m["subnetworks"].get<int>();
  info.train_loss = m.contains("train_loss") ? m["train_loss"].get<double>() : std::nan("");
  for (auto& [file, crc] : m["files"].items()) {
    // Weights only (sample): the optimizer state is not read, so it may be absent (deleted to
    // keep a trained model small) without the weights being refused.
    if (!read_optimizer && file == "optimizer.safetensors") continue;
    const std::string actual = file_crc32((dir / file).string());
    if (actual != crc.get<std::string>())
      throw DamagedCheckpoint(fmt::format("{}: CRC32 {} does not match the manifest's {} (damaged checkpoint)",
                                          (dir / file).string(), actual, crc.get<std::string>()));
  }
  model = load_safetensors((dir / "model.safetensors").string());
  optimizer.clear();
  if (read_optimizer) optimizer = load_safetensors((dir / "optimizer.safetensors").string());
  try {
    for (const auto& t : model) check_finite((dir / "model.safetensors").string(), t);
    for (const auto& t : optimizer) check_finite((dir / "optimizer.safetensors").string(), t);
  } catch (const Error& e) {
    throw DamagedCheckpoint(e.what());
  }
}

void check_fresh_checkpoint_dir(const std::string& dir) {
  const auto all = complete_checkpoints(dir);
  if (all.empty()) return;
  throw Error(fmt::format(
      "checkpoint.dir = \"{}\" already holds {} checkpoint(s) of an earlier run ({}), and checkpoint.resume is "
      "empty: a fresh run would write its own among them and checkpoint.keep_last would delete them. Set "
      "checkpoint.resume = \"auto\" to continue that run, or give this one another checkpoint.dir",
      dir, all.size(), first_to_last(all)));
}

void check_no_later_checkpoints(const std::string& dir, const std::string& resume, int64_t step) {
  std::vector<fs::path> later;
  for (const fs::path& p : complete_checkpoints(dir)) {
    if (folder_step(p.filename().string()) > step) later.push_back(p);
  }
  if (later.empty()) return;
  throw Error(fmt::format(
      "checkpoint.resume = \"{}\" is step {} of checkpoint.dir = \"{}\", which also holds {} later checkpoint(s) "
      "({}) of the run that went on from it: this run would overwrite those of the same steps and leave the "
      "others for a later resume = \"auto\" to pick instead of its own. Give this run another checkpoint.dir "
      "(it still resumes from {}), or move the later checkpoints out of {}",
      resume, step, dir, later.size(), first_to_last(later), resume, dir));
}

std::string newest_checkpoint(const std::string& dir, LoadedCheckpoint* loaded, bool for_resume) {
  auto all = complete_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      LoadedCheckpoint c;
      load_checkpoint(it->string(), c.info, c.model, c.optimizer);
      c.loaded = true;
      if (loaded) *loaded = std::move(c);
      return it->string();
    } catch (const DamagedCheckpoint& e) {
      std::cerr << "subdp: warning: skipping damaged checkpoint: " << e.what() << "\n";  // CRC, inf/NaN
    } catch (const Error& e) {
      // Not damaged but unreadable here (another format version, ...): skipping it would let
      // this run write newer checkpoints past it and keep_last prune it.
      if (!for_resume)
        throw Error(fmt::format("{}: its newest checkpoint {} cannot be read: {}; name an older step-N folder instead",
                                dir, it->string(), e.what()));
      throw Error(
          fmt::format("checkpoint.resume = \"auto\": cannot read {}: {}; \"auto\" neither skips nor "
                      "overwrites a checkpoint it cannot read: resume from an older one by its path, or move "
                      "it out of {}",
                      it->string(), e.what(), dir));
    }
  }
  // Starting fresh would write new checkpoints over the damaged ones: refuse instead.
  SUBDP_CHECK(all.empty() || for_resume, "{}: every one of its {} checkpoints is damaged (see the warnings above)", dir,
              all.size());
  SUBDP_CHECK(all.empty(),
              "checkpoint.resume = \"auto\": every one of the {} checkpoints in {} is damaged (see the "
              "warnings above); move them away to start fresh, or resume from a path",
              all.size(), dir);
  return "";
}

}  // namespace subdp
