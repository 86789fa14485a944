// A count of emulator events that the process prints when it exits, so a test or a reader can
// hold the engine to it (host synchronisations per step, kernel launches per step and per
// kernel).
#pragma once
#include <cstdio>
#include <map>
#include <string>

#include "kernels/emu/env.h"

namespace subdp::emu {

/// Counts events, in all and by name; when the environment variable `env` is "1", prints
/// "subdp-emu: <what>: <count>" and then "subdp-emu: <what> of <name>: <count>" for each name
/// given to add, to stderr at exit (a function-local static's destructor). Not thread-safe:
/// the emulator's host calls come from one thread.
class ExitCount {
 public:
  ExitCount(const char* env, const char* what) : what_(what), enabled_(env_flag(env)) {}
  ~ExitCount() {
    if (!enabled_) return;
    std::fprintf(stderr, "subdp-emu: %s: %lld\n", what_, count_);
    for (const auto& [name, n] : by_name_) std::fprintf(stderr, "subdp-emu: %s of %s: %lld\n", what_, name.c_str(), n);
  }
  ExitCount(const ExitCount&) = delete;
  ExitCount& operator=(const ExitCount&) = delete;
  /// One event, also counted under `name` when it is given (and the count is enabled).
  void add(const char* name = nullptr) {
    ++count_;
    if (enabled_ && name) ++by_name_[name];
  }

 private:
  const char* what_;
  bool enabled_ = false;
  long long count_ = 0;
  std::map<std::string, long long> by_name_;
};

}  // namespace subdp::emu
