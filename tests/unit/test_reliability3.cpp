// Issue 39's failing inputs that a unit test can hold: checkpoints of another format stop
// resume "auto" and are never pruned; free space is checked before a checkpoint is written;
// the metrics file holds whole lines and is cut back on resume; checkpoint.dir is locked;
// the memory check's message; train.stop_signals.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/core/error.h"
#include "tests/unit/error_of.h"
#include "engine/io/dir_lock.h"
#include "engine/io/metrics_file.h"
#include "engine/io/safetensors.h"
#include "engine/core/memory.h"
#include "engine/train/stop_signals.h"

namespace subdp {
namespace {

namespace fs = std::filesystem;

using subdp::testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// A fresh folder under the test temp dir.
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void save_step(const fs::path& dir, int64_t step, int keep_last, CheckpointLedger* ledger = nullptr) {
  CheckpointInfo info;
  info.step = step;
  info.model_name = "mlp";
  NamedTensor a{"a", {2, 3}, std::vector<float>(6, static_cast<float>(step))};
  save_checkpoint(dir.string(), info, {a}, {}, keep_last, ledger);
}

void edit_manifest(const fs::path& checkpoint, const char* key, const nlohmann::json& value) {
  std::ifstream in(checkpoint / "manifest.json");
  nlohmann::json m = nlohmann::json::parse(in);
  m[key] = value;
  write_file_atomic((checkpoint / "manifest.json").string(), m.dump());
}

TEST(CheckpointFormats, AnotherFormatStopsAutoNamingIt) {
  const fs::path dir = fresh_dir("subdp_test_format_ckpt");
  save_step(dir, 1, 5);
  save_step(dir, 2, 5);
  const fs::path step2 = dir / "step-00000002";
  edit_manifest(step2, "format", "subdp-checkpoint-v2");
  ::testing::internal::CaptureStderr();
  std::string e = error_of([&] { newest_checkpoint(dir.string()); });
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(e, (step2 / "manifest.json").string())) << e;
  EXPECT_TRUE(contains(e, "\"subdp-checkpoint-v2\"")) << e;
  EXPECT_TRUE(contains(e, "reads \"subdp-checkpoint-v1\" only")) << e;
  EXPECT_FALSE(contains(warned, "skipping")) << warned;
  // A number where a string belongs: the key is named, not nlohmann's type_error.302.
  edit_manifest(step2, "format", 2);
  e = error_of([&] { newest_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(e, "\"format\" = 2: expected a string")) << e;
  EXPECT_FALSE(contains(e, "type_error")) << e;
  edit_manifest(step2, "format", "subdp-checkpoint-v1");
  edit_manifest(step2, "world", "four");
  e = error_of([&] { newest_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(e, "\"world\" = \"four\": expected a whole number")) << e;
  fs::remove_all(dir);
}

// "auto" orders checkpoints by folder name: a step-N folder holding another step (renamed by
// hand) stops it, naming both; a copy under another name still loads by its path.
TEST(CheckpointFormats, StepFolderHoldingAnotherStepStopsAuto) {
  const fs::path dir = fresh_dir("subdp_test_renamed_ckpt");
  save_step(dir, 2, 5);
  fs::rename(dir / "step-00000002", dir / "step-00000040");
  const std::string e = error_of([&] { newest_checkpoint(dir.string()); });
  EXPECT_TRUE(contains(e, "the manifest's \"step\" is 2 but the folder is named step-00000040")) << e;
  EXPECT_TRUE(contains(e, "rename it to step-00000002")) << e;
  fs::rename(dir / "step-00000040", dir / "best");
  CheckpointInfo info;
  std::vector<NamedTensor> model, optimizer;
  EXPECT_EQ(error_of([&] { load_checkpoint((dir / "best").string(), info, model, optimizer); }), "(no error)");
  EXPECT_EQ(info.step, 2);
  fs::remove_all(dir);
}

// A fresh run into a folder of an earlier run's checkpoints would prune them (they verify) and
// leave "auto" to pick the highest step of either run: refused, naming them and the ways on.
TEST(CheckpointFormats, FreshRunRefusesAFolderOfCheckpoints) {
  const fs::path dir = fresh_dir("subdp_test_fresh_ckpt");
  EXPECT_EQ(error_of([&] { check_fresh_checkpoint_dir(dir.string()); }), "(no error)");
  EXPECT_EQ(error_of([&] { check_fresh_checkpoint_dir((dir / "absent").string()); }), "(no error)");
  fs::create_directories(dir / "step-00000009.tmp");  // an unfinished write is not a checkpoint
  EXPECT_EQ(error_of([&] { check_fresh_checkpoint_dir(dir.string()); }), "(no error)");
  save_step(dir, 12, 5);
  save_step(dir, 20, 5);
  const std::string e = error_of([&] { check_fresh_checkpoint_dir(dir.string()); });
  EXPECT_TRUE(contains(e, "already holds 2 checkpoint(s) of an earlier run (step-00000012 .. step-00000020)")) << e;
  EXPECT_TRUE(contains(e, "checkpoint.resume = \"auto\"")) << e;
  fs::remove_all(dir);
}

// An interrupted save's step-N.tmp folder, stray files in it, is removed with a warning before
// the save of step N writes its own: its files never enter the checkpoint.
TEST(CheckpointFormats, LeftoverPartialFolderIsRemovedWithAWarning) {
  const fs::path dir = fresh_dir("subdp_test_leftover_tmp");
  fs::create_directories(dir / "step-00000007.tmp");
  std::ofstream(dir / "step-00000007.tmp" / "stray.txt") << "not ours";
  ::testing::internal::CaptureStderr();
  save_step(dir, 7, 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "removing " + (dir / "step-00000007.tmp").string() + ", the partial folder")) << err;
  EXPECT_FALSE(fs::exists(dir / "step-00000007" / "stray.txt"));
  EXPECT_FALSE(fs::exists(dir / "step-00000007.tmp"));
  fs::remove_all(dir);
}

TEST(CheckpointFormats, PruningDeletesOnlyWhatItWroteOrVerified) {
  const fs::path dir = fresh_dir("subdp_test_prune_ckpt");
  save_step(dir, 1, 9);
  save_step(dir, 2, 9);
  save_step(dir, 3, 9);
  edit_manifest(dir / "step-00000002", "format", "subdp-checkpoint-v2");  // another version's
  // step 3 damaged after it was written: this run did not write it, it cannot verify it.
  std::ofstream(dir / "step-00000003" / "model.safetensors", std::ios::app) << "x";
  CheckpointLedger ledger;
  ::testing::internal::CaptureStderr();
  save_step(dir, 4, 1, &ledger);
  save_step(dir, 5, 1, &ledger);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fs::exists(dir / "step-00000001"));  // verified now (format, CRCs): pruned
  EXPECT_TRUE(fs::exists(dir / "step-00000002"));
  EXPECT_TRUE(fs::exists(dir / "step-00000003"));
  EXPECT_FALSE(fs::exists(dir / "step-00000004"));  // this run's own
  EXPECT_TRUE(fs::exists(dir / "step-00000005"));
  EXPECT_TRUE(contains(warned, "not deleting " + (dir / "step-00000002").string())) << warned;
  EXPECT_TRUE(contains(warned, "not deleting " + (dir / "step-00000003").string())) << warned;
  // Each warned about once, not at every save.
  EXPECT_EQ(warned.find("step-00000002,"), warned.rfind("step-00000002,")) << warned;
  fs::remove_all(dir);
}

// A user's copy (step-best, step-00000004.keep) sorted among the checkpoints by name: "auto"
// resumed from step-best although step 4 was newer, and keep_last deleted the copies.
// Folders named otherwise than step-N are left alone; step-N are ordered by N, not by name.
TEST(CheckpointFormats, CopiesOfOtherNamesAreNeitherResumedNorPruned) {
  const fs::path dir = fresh_dir("subdp_test_copies_ckpt");
  save_step(dir, 2, 9);
  fs::copy(dir / "step-00000002", dir / "step-best");
  save_step(dir, 4, 9);
  fs::copy(dir / "step-00000004", dir / "step-00000004.keep");
  EXPECT_EQ(newest_checkpoint(dir.string()), (dir / "step-00000004").string());
  save_step(dir, 123456789, 1);  // 9 digits: after step-00000004, though it sorts before it by name
  EXPECT_EQ(newest_checkpoint(dir.string()), (dir / "step-123456789").string());
  EXPECT_FALSE(fs::exists(dir / "step-00000002"));
  EXPECT_FALSE(fs::exists(dir / "step-00000004"));
  EXPECT_TRUE(fs::exists(dir / "step-best" / "manifest.json"));
  EXPECT_TRUE(fs::exists(dir / "step-00000004.keep" / "manifest.json"));
  fs::remove_all(dir);
}

TEST(CheckpointSpace, RefusedWithBothFiguresAndTheRoomForKeepLastPlusOne) {
  const std::string e = error_of([] { check_free_space("/data/ckpt", 40, 300 << 20, 200 << 20, 3); });
  EXPECT_TRUE(contains(e, "checkpoint.dir = \"/data/ckpt\"")) << e;
  EXPECT_TRUE(contains(e, "step 40 needs 300.0 MiB")) << e;
  EXPECT_TRUE(contains(e, "has 200.0 MiB free")) << e;
  EXPECT_TRUE(contains(e, "keep_last = 3 are kept")) << e;
  EXPECT_TRUE(contains(e, "room for 4 (1200.0 MiB)")) << e;
  EXPECT_TRUE(contains(e, "lower checkpoint.keep_last")) << e;
  const std::string one = error_of([] { check_free_space("/d", 1, 300 << 20, 0, 1); });
  EXPECT_TRUE(contains(one, "room for 2 (600.0 MiB)")) << one;
  EXPECT_FALSE(contains(one, "lower checkpoint.keep_last")) << one;  // it is 1 already
  const std::string most = error_of([] { check_free_space("/d", 1, 1 << 20, 0, 2147483647); });
  EXPECT_TRUE(contains(most, "room for 2147483648 (2147483648.0 MiB)")) << most;
  EXPECT_EQ(error_of([] { check_free_space("/d", 1, 100, 100, 3); }), "(no error)");
  EXPECT_EQ(error_of([] { check_free_space("/d", 1, 100, -1, 3); }), "(no error)");  // unknown: not refused
  // The estimate covers the data of every tensor.
  NamedTensor big{"w", {1000}, std::vector<float>(1000)};
  EXPECT_GE(checkpoint_bytes({big}, {big}), 8000);
}

TEST(CheckpointSpace, TheStartUpEstimateCoversTheSavesFigure) {
  // Before step 1 the trainer sizes the checkpoint from the specs: each trainable tensor's
  // values and its optimizer states ("<name>::k"), a buffer's values alone.
  const std::vector<FullTensorSpec> specs = {{"w", {30, 40}, true}, {"running_mean", {40}, false}};
  std::vector<NamedTensor> model = {{"w", {30, 40}, std::vector<float>(1200)},
                                    {"running_mean", {40}, std::vector<float>(40)}};
  std::vector<NamedTensor> opt = {{"w::0", {30, 40}, std::vector<float>(1200)},
                                  {"w::1", {30, 40}, std::vector<float>(1200)}};
  const int64_t saved = checkpoint_bytes(model, opt), estimated = checkpoint_bytes(specs, 2);
  EXPECT_GE(estimated, saved);
  EXPECT_LE(estimated, saved + 64);  // names counted 4 characters longer, no more
  EXPECT_EQ(checkpoint_bytes(specs, 0), checkpoint_bytes(model, {}) + 2 * 4 * 2);
}

std::vector<int64_t> steps_in(const fs::path& path) {
  std::ifstream in(path);
  std::vector<int64_t> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line).at("step"));
  return steps;
}

TEST(MetricsFile, ResumeCutsBackToTheStepAndDropsAHalfLine) {
  const fs::path dir = fresh_dir("subdp_test_metrics");
  const fs::path path = dir / "sub" / "m.jsonl";
  {
    MetricsFile f;
    f.open(path.string(), 0, "log.metrics_file");
    for (int64_t s = 1; s <= 5; ++s) f.write({{"step", s}, {"loss", 1.0 / s}});
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"lo";  // a crash mid-line
  {
    MetricsFile f;
    f.open(path.string(), 3, "log.metrics_file");  // resumed at step 3
    f.write({{"step", 4}, {"loss", 0.0}});
    f.sync();
  }
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3, 4}));
  {
    MetricsFile f;
    f.open(path.string(), 0, "log.metrics_file");  // a fresh start keeps nothing
  }
  EXPECT_TRUE(steps_in(path).empty());
  const std::string e = error_of([&] { check_writable_file((dir / "sub").string(), "log.metrics_file"); });
  EXPECT_TRUE(contains(e, "log.metrics_file = \"" + (dir / "sub").string() + "\": is a directory")) << e;
  fs::remove_all(dir);
}

// A device or FIFO at the path is refused, never replaced by a file (root could turn /dev/null
// into one) nor opened (a FIFO's open blocks); a symlink's target is written, the link stays;
// a second live run on the same file is refused before anything is cut.
TEST(MetricsFile, DevicesAndFifosRefusedSymlinksFollowedLiveFileLocked) {
  const fs::path dir = fresh_dir("subdp_test_metrics_kinds");
  // A copy of /dev/null's node (root only), so that a regression replaces the copy, not /dev/null.
  const bool device = ::mknod((dir / "null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  for (const fs::path& node : {dir / "null", dir / "fifo"}) {
    if (!device && node.filename() == "null") continue;
    const std::string path = node.string();
    MetricsFile f;
    const std::string e = error_of([&] { f.open(path, 0, "log.metrics_file"); });
    EXPECT_TRUE(contains(e, "log.metrics_file = \"" + path + "\": not a regular file")) << e;
    EXPECT_TRUE(contains(error_of([&] { check_writable_file(path, "log.metrics_file"); }), "not a regular file"));
  }
  EXPECT_TRUE(!device || fs::is_character_file(dir / "null"));
  EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
  const fs::path target = dir / "real" / "m.jsonl", link = dir / "link.jsonl";
  {
    MetricsFile f;
    f.open(target.string(), 0, "log.metrics_file");
    f.write({{"step", 1}});
  }
  fs::create_symlink(target, link);
  {
    MetricsFile f;
    f.open(link.string(), 1, "log.metrics_file");  // resumed at step 1 through the link
    f.write({{"step", 2}});
    MetricsFile second;
    const std::string e = error_of([&] { second.open(link.string(), 0, "log.metrics_file"); });
    EXPECT_TRUE(contains(e, "in use by another run")) << e;
    f.write({{"step", 3}});
  }
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(steps_in(target), (std::vector<int64_t>{1, 2, 3}));
  fs::remove_all(dir);
}

// A file that is not a metrics file (the training text, the config, a checkpoint's tensors) is
// refused whole, never cut or emptied; an empty file or one of records is reused.
TEST(MetricsFile, AFileOfOtherContentsIsRefusedAndKept) {
  const fs::path dir = fresh_dir("subdp_test_metrics_foreign");
  const std::string corpus = "The Fulton County Grand Jury said Friday\nan investigation\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"corpus.txt", corpus},
      {"config.toml", "[model]\nname = \"mlp\"\n"},
      {"model.safetensors", std::string("\x08\0\0\0\0\0\0\0{}      \n\x01\x02", 19)},
      {"mixed.jsonl", "{\"step\": 1}\n{\"loss\": 2}\n"},  // a JSON line that is not a record
      {"one_line.txt", "no newline at the end"},          // not the half record of a crash
  };
  for (const auto& [name, contents] : cases) {
    const fs::path path = dir / name;
    std::ofstream(path, std::ios::binary) << contents;
    for (int64_t resumed_at : {0, 3}) {
      MetricsFile f;
      const std::string e = error_of([&] { f.open(path.string(), resumed_at, "log.metrics_file"); });
      EXPECT_TRUE(contains(e, "log.metrics_file = \"" + path.string() + "\": line ")) << name << ": " << e;
      EXPECT_TRUE(contains(e, "is not a metrics record")) << e;
    }
    std::ifstream in(path, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), contents) << name << " was changed";
  }
  const fs::path empty = dir / "empty.jsonl";
  std::ofstream(empty).flush();
  MetricsFile f;
  f.open(empty.string(), 0, "log.metrics_file");
  f.write({{"step", 1}});
  EXPECT_EQ(steps_in(empty), (std::vector<int64_t>{1}));
  fs::remove_all(dir);
}

TEST(MetricsFile, ResumeDropsFinalRecordsAndEvalsOfAStepEvaluatedAgain) {
  const fs::path dir = fresh_dir("subdp_test_metrics_events");
  const fs::path path = dir / "m.jsonl";
  auto write_run = [&](int64_t keep, int64_t keep_evals) {
    MetricsFile f;
    f.open(path.string(), keep, "log.metrics_file", keep_evals);
    if (keep > 0) return;
    for (int64_t s = 1; s <= 4; ++s) f.write({{"step", s}, {"loss", 1.0 / s}});
    f.write({{"event", "eval"}, {"step", 2}, {"test_loss", 0.5}});
    f.write({{"event", "eval"}, {"step", 4}, {"test_loss", 0.25}});
    f.write({{"event", "final"}, {"step", 4}, {"test_loss", 0.25}});
  };
  auto events_in = [&] {
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      out.push_back(j.value("event", std::string("step")) + std::to_string(j.at("step").get<int64_t>()));
    }
    return out;
  };
  write_run(0, -1);
  write_run(4, -1);  // resumed at step 4 of more: the final record goes, the evals stay
  EXPECT_EQ(events_in(), (std::vector<std::string>{"step1", "step2", "step3", "step4", "eval2", "eval4"}));
  write_run(0, -1);
  write_run(4, 3);  // resumed at its last step, 4: evaluated again
  EXPECT_EQ(events_in(), (std::vector<std::string>{"step1", "step2", "step3", "step4", "eval2"}));
  fs::remove_all(dir);
}

TEST(DirectoryLock, ASecondHolderIsRefusedNamingTheFirst) {
  const fs::path dir = fresh_dir("subdp_test_lock") / "ckpt";
  {
    DirectoryLock first(dir.string(), "checkpoint.dir");
    // flock conflicts between two open files even in one process: the second run's case.
    const std::string e = error_of([&] { DirectoryLock second(dir.string(), "checkpoint.dir"); });
    EXPECT_TRUE(contains(e, "checkpoint.dir = \"" + dir.string() + "\" is in use by another run")) << e;
    EXPECT_TRUE(contains(e, "pid " + std::to_string(::getpid()))) << e;
    EXPECT_TRUE(contains(e, "host ")) << e;
  }
  // Released with its holder; a lock file left by a dead run (no flock held) does not block.
  std::ofstream(dir / "subdp.lock") << "host elsewhere pid 999999\n";
  EXPECT_EQ(error_of([&] { DirectoryLock again(dir.string(), "checkpoint.dir"); }), "(no error)");
  // A file in the way of the folder.
  std::ofstream(dir.parent_path() / "file") << "x";
  const std::string e =
      error_of([&] { DirectoryLock no((dir.parent_path() / "file" / "ckpt").string(), "checkpoint.dir"); });
  EXPECT_TRUE(contains(e, "checkpoint.dir = \"")) << e;
  EXPECT_TRUE(contains(e, "cannot create the folder")) << e;
  fs::remove_all(dir.parent_path());
}

TEST(MemoryBudget, RefusalNamesBothFiguresAndTheOptIn) {
  const std::string e = memory_fit_error(int64_t{84300} << 20, int64_t{23} << 30, "MemAvailable in /proc/meminfo");
  EXPECT_TRUE(contains(e, "needs 82.32 GiB")) << e;
  EXPECT_TRUE(contains(e, "only 23.00 GiB are available")) << e;
  EXPECT_TRUE(contains(e, "MemAvailable")) << e;
  EXPECT_TRUE(contains(e, "train.allow_overcommit = true")) << e;
  const std::string small = memory_fit_error(3656704, 3600000, "free device memory");  // was "0.00 GiB"
  EXPECT_TRUE(contains(small, "needs 3.49 MiB")) << small;
  EXPECT_TRUE(contains(small, "only 3.43 MiB are available")) << small;
  EXPECT_EQ(memory_fit_error(100, 100, "x"), "");
  EXPECT_EQ(memory_fit_error(100, -1, "x"), "");  // unknown: not refused
  std::string where;
  EXPECT_GT(host_memory_available_bytes(&where), 0);
  EXPECT_FALSE(where.empty());
}

TEST(StopSignals, ParsedByNameWithTheKeyInErrors) {
  EXPECT_EQ(parse_stop_signals("SIGTERM,USR1"), (std::vector<int>{SIGTERM, SIGUSR1}));
  EXPECT_EQ(parse_stop_signals(" SIGUSR2 "), (std::vector<int>{SIGUSR2}));
  EXPECT_TRUE(parse_stop_signals("").empty());
  const std::string e = error_of([] { parse_stop_signals("SIGTERM,SIGKILL"); });
  EXPECT_TRUE(contains(e, "[train] stop_signals")) << e;
  EXPECT_TRUE(contains(e, "\"SIGKILL\"")) << e;
  EXPECT_EQ(parse_stop_signals("sigterm,usr1"), (std::vector<int>{SIGTERM, SIGUSR1}));  // any case
  const std::string typed = error_of([] { parse_stop_signals("sigkil"); });
  EXPECT_TRUE(contains(typed, "unknown signal \"sigkil\"")) << typed;  // as typed, not "SIGsigkil"
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
}

}  // namespace
}  // namespace subdp
