// 8 x 8 block transpose: unpack, then 2x2 and 4x4 block swaps (the classic AVX sequence),
// written as generic vector shuffles so it compiles to AVX2 or AVX-512 alike.
#include "kernels/cpu/transpose.h"

#include "kernels/cpu/vec.h"

namespace subdp::cpu {

namespace {

// Two-vector shuffle of Vec8s by constant indices (0-7 from a, 8-15 from b): Clang's builtin,
// or GCC's, which GCC before 12 knows only under this name.
#if defined(__clang__)
#define SUBDP_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int Mask8 __attribute__((vector_size(8 * sizeof(int))));
#define SUBDP_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, Mask8{__VA_ARGS__})
#endif

// Rows r[0..7] of an 8 x 8 block replaced by its columns.
inline void transpose8x8(Vec8 r[8]) {
  Vec8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = SUBDP_SHUFFLE8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = SUBDP_SHUFFLE8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)  // u[i + j] holds column j (and j + 4) of rows i..i+3
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = SUBDP_SHUFFLE8(t[i + k], t[i + k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * k + 1] = SUBDP_SHUFFLE8(t[i + k], t[i + k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int k = 0; k < 4; ++k) {
    r[k] = SUBDP_SHUFFLE8(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[k + 4] = SUBDP_SHUFFLE8(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

}  // namespace

void transpose(const float* __restrict src, int rows, int cols, int64_t ld_src, float* __restrict dst, int64_t ld_dst,
               bool accumulate) {
  const int rows8 = rows - rows % 8, cols8 = cols - cols % 8;
  for (int r0 = 0; r0 < rows8; r0 += 8)
    for (int c0 = 0; c0 < cols8; c0 += 8) {
      Vec8 v[8];
      for (int i = 0; i < 8; ++i) v[i] = load<Vec8>(src + (r0 + i) * ld_src + c0);
      transpose8x8(v);
      for (int i = 0; i < 8; ++i) {
        float* d = dst + (c0 + i) * ld_dst + r0;
        store(d, accumulate ? load<Vec8>(d) + v[i] : v[i]);
      }
    }
  auto element = [&](int r, int c) {
    float& d = dst[c * ld_dst + r];
    const float x = src[r * ld_src + c];
    d = accumulate ? d + x : x;
  };
  for (int r = 0; r < rows; ++r)
    for (int c = r < rows8 ? cols8 : 0; c < cols; ++c) element(r, c);
}

}  // namespace subdp::cpu
