// Memory tracker implementation and process RSS query.
#include "engine/core/memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace subdp {

const char* category_name(MemCategory c) {
  static const char* names[kNumMemCategories] = {"params", "grads", "optimizer", "activations", "workspace", "comm"};
  return names[static_cast<int>(c)];
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::on_alloc(MemCategory c, int64_t bytes) {
  int i = static_cast<int>(c);
  stats_.current[i] += bytes;
  stats_.peak[i] = std::max(stats_.peak[i], stats_.current[i]);
  stats_.total_current += bytes;
  stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
}

void MemoryTracker::on_free(MemCategory c, int64_t bytes) {
  stats_.current[static_cast<int>(c)] -= bytes;
  stats_.total_current -= bytes;
}

void MemoryTracker::reset_peaks() {
  stats_.peak = stats_.current;
  stats_.total_peak = stats_.total_current;
}

int64_t process_peak_rss_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

namespace {

/// The first whole number in file `path` (bytes), or -1 ("max", absent, unreadable).
int64_t read_bytes_file(const std::string& path) {
  std::ifstream in(path);
  long long v = -1;
  if (!(in >> v)) return -1;
  return v;
}

int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

}  // namespace

int64_t host_memory_available_bytes(std::string* where) {
  int64_t best = meminfo_available();
  std::string from = "MemAvailable in /proc/meminfo";
  struct Cgroup {
    const char *limit, *usage, *name;
  };
  const Cgroup groups[] = {{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "the cgroup's memory.max"},
                           {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                            "/sys/fs/cgroup/memory/memory.usage_in_bytes", "the cgroup's memory.limit_in_bytes"}};
  for (const Cgroup& g : groups) {
    const int64_t limit = read_bytes_file(g.limit), usage = read_bytes_file(g.usage);
    // v1 reports "no limit" as a huge number; anything above the host's memory is no bound.
    if (limit < 0 || usage < 0 || limit >= (int64_t{1} << 60)) continue;
    const int64_t left = std::max<int64_t>(0, limit - usage);
    if (best < 0 || left < best) {
      best = left;
      from = g.name;
    }
  }
  if (where) *where = from;
  return best;
}

namespace {
/// Bytes in the largest unit that leaves a figure of at least 1: "82.32 GiB", "3.49 MiB", "512 bytes".
std::string readable_bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", bytes / 1073741824.0);
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.2f} MiB", bytes / 1048576.0);
  return fmt::format("{} bytes", bytes);
}
}  // namespace

std::string memory_fit_error(int64_t predicted, int64_t available, const std::string& what) {
  if (predicted < 0 || available < 0 || predicted <= available) return "";
  return fmt::format(
      "the plan needs {} on this rank (subdp plan), but only {} are available to it "
      "({}); lower train.batch_size or the model's size, add ranks or subnetworks, or set "
      "train.allow_overcommit = true to try anyway",
      readable_bytes(predicted), readable_bytes(available), what);
}

}  // namespace subdp
