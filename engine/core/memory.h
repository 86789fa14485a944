// Memory tracker: one per process (one per rank), records current and peak bytes
// per category. Every tensor allocation in the engine goes through it, so the
// per-rank footprint of a regime is measured, not estimated.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

namespace subdp {

/// What a buffer is for. Order matters: it indexes MemStats arrays.
enum class MemCategory : int { params = 0, grads, optimizer, activations, workspace, comm };
constexpr int kNumMemCategories = 6;

/// Lower-case name of a category ("params", "grads", ...).
const char* category_name(MemCategory c);

/// Snapshot of the tracker: bytes per category, current and peak, plus the
/// peak of the total (which is not the sum of per-category peaks).
struct MemStats {
  std::array<int64_t, kNumMemCategories> current{};
  std::array<int64_t, kNumMemCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

/// Process-wide byte counter. Not thread-safe: allocations happen on the
/// training thread only (OpenMP workers never allocate tensors).
class MemoryTracker {
 public:
  static MemoryTracker& global();
  /// Counts `bytes` allocated (freed) in category c: the current and peak bytes per category
  /// and in total. Tensors and backends call these, and do not while the tracker is paused.
  void on_alloc(MemCategory c, int64_t bytes);
  void on_free(MemCategory c, int64_t bytes);
  /// Resets every peak to the current value (e.g. after start-up).
  void reset_peaks();
  const MemStats& stats() const { return stats_; }

  /// Dry run: while set, Storage counts bytes but allocates nothing (data() is null), so
  /// a model's footprint is measured by the same code that allocates it (the planner).
  bool dry_run() const { return dry_run_; }

  /// While paused, new allocations are not counted (nor their frees): used only for the
  /// evaluation copy of the full model on rank 0, which is outside the training footprint.
  bool paused() const { return paused_; }
  void set_paused(bool p) { paused_ = p; }

  /// Runs f() and returns the peak of the total bytes while it ran (from the current value);
  /// the run's own peaks afterwards are as if nothing had been reset.
  template <class F>
  int64_t peak_during(F&& f) {
    const MemStats before = stats_;
    reset_peaks();
    struct Merge {
      MemStats& stats;
      const MemStats& before;
      ~Merge() {
        for (int c = 0; c < kNumMemCategories; ++c) stats.peak[c] = std::max(stats.peak[c], before.peak[c]);
        stats.total_peak = std::max(stats.total_peak, before.total_peak);
      }
    };
    int64_t during = 0;
    {
      Merge merge{stats_, before};
      f();
      during = stats_.total_peak;
    }
    return during;
  }

  /// Runs build() in dry-run mode on a zeroed tracker and returns the bytes it allocated
  /// (current and peak per category); the real counters are restored afterwards.
  template <class F>
  MemStats measure(F&& build) {
    MemStats saved = stats_;
    bool saved_dry = dry_run_;
    stats_ = MemStats{};
    dry_run_ = true;
    MemStats result;
    try {
      build();
      result = stats_;
    } catch (...) {
      stats_ = saved;
      dry_run_ = saved_dry;
      throw;
    }
    stats_ = saved;
    dry_run_ = saved_dry;
    return result;
  }

 private:
  MemStats stats_;
  bool dry_run_ = false;
  bool paused_ = false;
};

/// Peak resident set size of this process in bytes (from getrusage).
int64_t process_peak_rss_bytes();

/// Bytes this host can still give processes: MemAvailable of /proc/meminfo, or less when the
/// process's cgroup caps it (v2 memory.max - memory.current, v1 memory.limit_in_bytes -
/// memory.usage_in_bytes). -1 when none of them can be read. `where` receives which bound it is.
int64_t host_memory_available_bytes(std::string* where = nullptr);

/// "" when `predicted` bytes fit in `available` (or either is unknown, < 0); else the refusal,
/// naming both figures in GiB, `what` (where `available` comes from) and train.allow_overcommit.
std::string memory_fit_error(int64_t predicted, int64_t available, const std::string& what);

}  // namespace subdp
