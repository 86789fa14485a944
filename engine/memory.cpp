// Memory tracker implementation and process RSS query.
#include "engine/memory.h"

#include <sys/resource.h>

#include <algorithm>

namespace subdp {

const char* category_name(MemCategory c) {
  static const char* names[kNumMemCategories] = {"params", "grads", "optimizer",
                                                 "activations", "workspace", "comm"};
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

}  // namespace subdp
