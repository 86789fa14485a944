// Embedding lookup and scatter-add.
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>

namespace subdp::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster
}  // namespace

int64_t embedding_forward(const int32_t* ids, const float* table, int64_t num, float* y, int64_t rows, int64_t C,
                          bool accumulate) {
  int64_t invalid = 0;
#pragma omp parallel for schedule(static) reduction(+ : invalid) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] < 0 || ids[r] >= num) {
      ++invalid;
      continue;
    }
    const float* src = table + ids[r] * C;
    float* dst = y + r * C;
    if (accumulate) {
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    } else {
      std::memcpy(dst, src, sizeof(float) * C);
    }
  }
  return invalid;
}

void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num, int64_t rows, int64_t C) {
  constexpr int64_t kChunk = 16;  // columns per task: 64 bytes, one cache line
  const int64_t chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int64_t r = 0; r < rows; ++r) {
      if (ids[r] < 0 || ids[r] >= num) continue;
      const float* g = dy + r * C;
      float* d = dtable + ids[r] * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

}  // namespace subdp::cpu
