// log.metrics_file: one JSON record per line, each line written by one write(2), so a crash
// (even SIGKILL) leaves whole lines only and nothing buffered in the process is lost. A
// resume first cuts the file back to the resumed step, so that every step appears once.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace subdp {

class MetricsFile {
 public:
  MetricsFile() = default;
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  ~MetricsFile();

  /// Opens `path` (parent folders created) for appending. Records whose "step" is above
  /// `keep_through_step`, lines that do not parse (the half line a crash left) and records
  /// without a step are dropped first, by an atomic rewrite (temporary file, fsync, rename);
  /// 0 keeps nothing (a fresh run). So are "final" records (the resumed run writes its own)
  /// and "eval" records above `keep_evals_through_step` (a run resumed at its last step
  /// evaluates that step again); -1: keep_through_step. The file is locked (flock) while open;
  /// a symlink's target is written. Errors name `key` (the config key) and the path: a
  /// device, FIFO or socket at the path, a file another live run holds, an unwritable folder.
  void open(const std::string& path, int64_t keep_through_step, const std::string& key,
            int64_t keep_evals_through_step = -1);
  bool is_open() const { return fd_ >= 0; }
  /// Appends `record` as one line in one write(2). Errors name the path.
  void write(const nlohmann::json& record);
  /// Durable on disk (fdatasync): called with every checkpoint, so a checkpoint's steps are
  /// in the file even after a machine crash.
  void sync();

 private:
  int fd_ = -1;
  std::string path_;
};

/// Checks, before training, that `path` can be created and appended to (parent folders
/// created) and is a regular file; the file is left as it was, or created empty. Errors name
/// `key` and the path.
void check_writable_file(const std::string& path, const std::string& key);

}  // namespace subdp
