// Register-width float vectors (GCC/Clang vector extension) shared by the CPU kernels that
// vectorise by hand (Winograd transforms, small_sgemm, transpose, channels-last im2col): with -march=native they
// compile to AVX-512 or AVX2 registers.
#pragma once
#include <cstring>

namespace subdp::cpu {

/// Floats per Vec: one full register (16 with AVX-512, else 8).
#ifdef __AVX512F__
inline constexpr int kLanes = 16;
#else
inline constexpr int kLanes = 8;
#endif

/// kLanes floats as one value; Vec8 is 8 floats (AVX2 width) whatever the CPU.
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));

/// Unaligned load / store of a V (Vec, Vec8 or float) at p.
template <class V>
inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

/// Calls f(c, tag) for channel offsets c covering [0, C), tag a Vec, Vec8 or float saying how
/// many channels from c to take: whole Vecs first, then (under AVX-512) whole Vec8s, then
/// single channels (channel counts of masked layers need not be multiples of 8 or 16).
template <class Fn>
inline void for_channels(int C, Fn&& f) {
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) f(c, Vec{});
  if (kLanes > 8)
    for (; c + 8 <= C; c += 8) f(c, Vec8{});
  for (; c < C; ++c) f(c, 0.f);
}

}  // namespace subdp::cpu
