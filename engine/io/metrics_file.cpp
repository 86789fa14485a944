// Whole-line JSON records that survive a crash, cut back on resume.
#include "engine/io/metrics_file.h"

#include <fcntl.h>
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

int open_append(const std::string& path, const std::string& key) {
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  SUBDP_CHECK(!ec, "{} = \"{}\": cannot create the folder {}: {}", key, path, parent.string(), ec.message());
  SUBDP_CHECK(!std::filesystem::is_directory(path, ec), "{} = \"{}\": is a directory, expected a file path", key, path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  SUBDP_CHECK(fd >= 0, "{} = \"{}\": cannot open for writing: {}", key, path, std::strerror(errno));
  return fd;
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

}  // namespace

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::open(const std::string& path, int64_t keep_through_step, const std::string& key,
                       int64_t keep_evals_through_step) {
  path_ = path;
  ::close(open_append(path, key));  // the folder and the file are writable
  if (keep_evals_through_step < 0) keep_evals_through_step = keep_through_step;
  write_file_atomic(
      path, keep_through_step > 0 ? kept_lines(path, keep_through_step, keep_evals_through_step) : std::string());
  fd_ = open_append(path, key);
}

void MetricsFile::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  // O_APPEND and one call: the line lands whole or (disk full) not at all; a short write is
  // an error rather than a half record.
  const ssize_t n = ::write(fd_, line.data(), line.size());
  SUBDP_CHECK(n == static_cast<ssize_t>(line.size()), "log.metrics_file = \"{}\": write failed: {}", path_,
              n < 0 ? std::strerror(errno) : "short write (disk full?)");
}

void MetricsFile::sync() {
  if (fd_ >= 0)
    SUBDP_CHECK(::fdatasync(fd_) == 0, "log.metrics_file = \"{}\": fdatasync: {}", path_, std::strerror(errno));
}

void check_writable_file(const std::string& path, const std::string& key) { ::close(open_append(path, key)); }

}  // namespace subdp
