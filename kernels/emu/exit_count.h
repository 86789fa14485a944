// A count of emulator events that the process prints when it exits, so a test or a reader can
// hold the engine to it (host synchronisations per step, kernel launches per step).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace subdp::emu {

/// Counts events; when the environment variable `env` is "1", prints
/// "subdp-emu: <what>: <count>" to stderr at exit (a function-local static's destructor).
class ExitCount {
 public:
  ExitCount(const char* env, const char* what) : what_(what) {
    const char* v = std::getenv(env);
    enabled_ = v != nullptr && std::strcmp(v, "1") == 0;
  }
  ~ExitCount() {
    if (enabled_) std::fprintf(stderr, "subdp-emu: %s: %lld\n", what_, count_);
  }
  ExitCount(const ExitCount&) = delete;
  ExitCount& operator=(const ExitCount&) = delete;
  void add() { ++count_; }

 private:
  const char* what_;
  bool enabled_ = false;
  long long count_ = 0;
};

}  // namespace subdp::emu
