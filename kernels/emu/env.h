// The emulator's switches from the environment.
#pragma once
#include <cstdlib>
#include <cstring>

namespace subdp::emu {

/// True when the environment variable `name` is exactly "1" (unset or any other value: false).
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace subdp::emu
