// Branch-free float32 exp and tanh that GCC vectorises (with -fno-trapping-math, set in
// CMakeLists.txt) where std::exp / std::tanh are scalar libm calls; GELU's tanh alone was
// ~28 % of a GPT step.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace subdp::cpu {

/// exp(x) for float32, relative error below 3e-7 on [-87, 88]; other finite inputs are
/// clamped to that range (exp(-87) ~ 1.6e-38: underflow returns ~0, never denormals), and
/// NaN or +-inf give NaN, so the non-finite checks downstream still see a broken input.
/// Range reduction x = n ln2 + r (Cody-Waite split of ln2), then the degree-6 minimax
/// polynomial of Cephes' expf (S. Moshier, Cephes Math Library, expf.c).
#pragma omp declare simd
inline float exp_approx(float x_in) {
  // Selects rather than fmin/fmax (which GCC only vectorises under -ffinite-math-only); a
  // NaN fails both comparisons and becomes -87 here, so the int conversion below is defined.
  float x = x_in > -87.0f ? x_in : -87.0f;
  x = x < 88.0f ? x : 88.0f;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;  // 2^n as a float
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale + (x_in - x_in);  // + 0 for finite input, NaN otherwise (branch-free)
}

/// tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error below 3e-7 (relative error grows for
/// |x| < 1e-4, where callers such as GELU only need the absolute error).
#pragma omp declare simd
inline float tanh_approx(float x) { return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f); }

}  // namespace subdp::cpu
