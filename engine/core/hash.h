// The engine's one mixing hash: every seeded draw (data order, plans, initial values,
// stochastic depth, sampling) is mix64 plus integer arithmetic, so results are identical on
// every platform and rank.
#pragma once
#include <cstdint>

namespace subdp {

/// 64-bit mixing hash: splitmix64's finaliser (Steele, Lea and Flood 2014) of x plus the
/// golden-ratio increment 0x9e3779b97f4a7c15.
inline uint64_t mix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace subdp
