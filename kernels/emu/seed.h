// The emulator's seed: SUBDP_EMU_SEED (default 1). It draws the interleaving of streams, the
// order of blocks in a grid and the order of a block's threads between barriers, so a
// failure replays with the same seed and other seeds try other schedules.
#pragma once
#include <cstdint>
#include <cstdlib>

namespace subdp::emu {

inline uint64_t seed() {
  static const uint64_t s = [] {
    const char* v = std::getenv("SUBDP_EMU_SEED");
    return v ? std::strtoull(v, nullptr, 10) : uint64_t{1};
  }();
  return s;
}

}  // namespace subdp::emu
