// Register-width float vectors (GCC/Clang vector extension) shared by the CPU kernels that
// vectorise by hand (Winograd transforms, small_sgemm, transpose): with -march=native they
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
template <class V> inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V> inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }

}  // namespace subdp::cpu
