// Rotary position embeddings on the CPU (see rope.h).
#include "kernels/cpu/rope.h"

namespace subdp::cpu {

void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                 bool inverse) {
  const int half = hd / 2;
  const float sign = inverse ? -1.f : 1.f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + (r % T) * half;
    const float* s = sin + (r % T) * half;
    for (int h = 0; h < heads; ++h) {
      float* p = x + r * ld + static_cast<int64_t>(h) * hd;
      for (int i = 0; i < half; ++i) {
        const float a = p[i], b = p[i + half], si = sign * s[i];
        p[i] = a * c[i] - b * si;
        p[i + half] = b * c[i] + a * si;
      }
    }
  }
}

}  // namespace subdp::cpu
