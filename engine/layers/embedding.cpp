// Embedding lookup and its scatter-add backward.
#include "engine/layers/embedding.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace subdp {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread is faster
}  // namespace

Embedding::Embedding(ParamSet& ps, const std::string& name, int64_t num, int64_t C, InitSpec init) {
  weight = &ps.add(name + ".weight", {num, C}, init);
}

void Embedding::forward(const int32_t* ids, float* y, int64_t rows, bool accumulate) const {
  const int64_t C = channels(), n = num();
  for (int64_t r = 0; r < rows; ++r)
    SUBDP_CHECK(ids[r] >= 0 && ids[r] < n, "{}: index {} at row {} outside [0, {})", weight->name, ids[r], r, n);
  const float* w = weight->value.f32();
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = w + ids[r] * C;
    float* dst = y + r * C;
    if (accumulate) {
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    } else {
      std::memcpy(dst, src, sizeof(float) * C);
    }
  }
}

void Embedding::backward(const int32_t* ids, const float* dy, int64_t rows) const {
  if (!weight->grad.defined()) return;
  const int64_t C = channels();
  float* dw = weight->grad.f32();
  constexpr int64_t kChunk = 16;  // columns per task: 64 bytes, one cache line
  const int64_t chunks = (C + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kChunk, c1 = std::min(C, c0 + kChunk);
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = dy + r * C;
      float* d = dw + ids[r] * C;
      for (int64_t c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

}  // namespace subdp
