// Whole-line JSON records that survive a crash, cut back on resume.
#include "engine/io/metrics_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace subdp {

namespace {

/// Refuses a path that exists and is not a regular file once symlinks are followed: a device
/// (/dev/null, which the atomic rewrite would replace by a file for root) or a FIFO (whose
/// open blocks until a reader comes). A symlink to a file is fine: the target is written.
void check_regular_or_absent(const std::string& path, const std::string& key) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  SUBDP_CHECK(!std::filesystem::is_directory(status), "{} = \"{}\": is a directory, expected a file path", key, path);
  SUBDP_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status),
              "{} = \"{}\": not a regular file (a device, FIFO or socket); name a file, or leave {} empty to "
              "write none",
              key, path, key);
}

int open_append(const std::string& path, const std::string& key) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  SUBDP_CHECK(!ec, "{} = \"{}\": cannot create the folder {}: {}", key, path, parent.string(), ec.message());
  check_regular_or_absent(path, key);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  SUBDP_CHECK(fd >= 0, "{} = \"{}\": cannot open for writing: {}", key, path, std::strerror(errno));
  return fd;
}

/// Opens `path` for appending and takes its lock (flock, released when the fd closes). Another
/// live run holding it is an error: its records would be cut or replaced by this run's.
int open_locked(const std::string& path, const std::string& key) {
  const int fd = open_append(path, key);
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
  const int err = errno;
  ::close(fd);
  SUBDP_CHECK(err != EWOULDBLOCK,
              "{} = \"{}\": in use by another run that is still writing it; give this run "
              "its own file",
              key, path);
  throw Error(fmt::format("{} = \"{}\": cannot lock it: {}", key, path, std::strerror(err)));
}

/// The lines of `path` that are records of steps 1..keep_through_step, and eval records of
/// steps 1..keep_evals_through_step; no final record.
std::string kept_lines(const std::string& path, int64_t keep_through_step, int64_t keep_evals_through_step) {
  std::ifstream in(path, std::ios::binary);
  std::string line, out;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: the half line of a crash
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) continue;
    const std::string event =
        record.contains("event") && record["event"].is_string() ? record["event"].get<std::string>() : "";
    const int64_t through = event == "final" ? 0 : event == "eval" ? keep_evals_through_step : keep_through_step;
    if (record["step"].get<int64_t>() <= through) out += line + "\n";
  }
  return out;
}

/// Refuses to cut or empty a file that is not a metrics file: every whole line of a non-empty
/// `path` must be a JSON object with an integer "step" (what write() writes), else it is
/// someone's data, config or checkpoint that the rewrite would destroy.
void check_holds_only_records(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // No newline: the half line of a crash (which the rewrite drops) if it starts as a record does.
    const bool half_line = in.eof() && line.rfind("{\"", 0) == 0;
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    SUBDP_CHECK(half_line || (record.is_object() && record.contains("step") && record["step"].is_number_integer()),
                "{} = \"{}\": line {} is not a metrics record (a JSON object with a \"step\"), so the file is not "
                "a metrics file this run may cut or replace; name a new file (or remove this one if it is "
                "meant to go)",
                key, path, number);
  }
}

}  // namespace

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::open(const std::string& path, int64_t keep_through_step, const std::string& key,
                       int64_t keep_evals_through_step) {
  path_ = path;
  // The lock is taken before anything is cut, on the file a second run would open too; it is
  // let go (closed) on leaving, once the rewritten file's own lock is held or this failed.
  struct ClosedOnExit {
    int fd;
    ~ClosedOnExit() { ::close(fd); }
  } const old{open_locked(path, key)};
  // Through a symlink the target is rewritten, not the link replaced by a file.
  const std::string target = std::filesystem::canonical(path).string();
  if (keep_evals_through_step < 0) keep_evals_through_step = keep_through_step;
  check_holds_only_records(target, key);
  try {
    write_file_atomic(
        target, keep_through_step > 0 ? kept_lines(target, keep_through_step, keep_evals_through_step) : std::string());
  } catch (const Error& e) {
    throw Error(fmt::format("{} = \"{}\": {}", key, path, e.what()));
  }
  fd_ = open_locked(target, key);  // the rewritten file is a new inode: lock it
}

void MetricsFile::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  // O_APPEND and one call: the line lands whole or is an error. A short write (disk full) is
  // cut off again, so the file never ends in a half record.
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n == static_cast<ssize_t>(line.size())) return;
  const int err = errno;
  if (n > 0 && before >= 0) (void)::ftruncate(fd_, before);
  throw Error(fmt::format("log.metrics_file = \"{}\": write failed: {}", path_,
                          n < 0 ? std::strerror(err) : "short write (disk full?); the partial line was removed"));
}

void MetricsFile::sync() {
  if (fd_ >= 0)
    SUBDP_CHECK(::fdatasync(fd_) == 0, "log.metrics_file = \"{}\": fdatasync: {}", path_, std::strerror(errno));
}

void check_writable_file(const std::string& path, const std::string& key) { ::close(open_append(path, key)); }

}  // namespace subdp
