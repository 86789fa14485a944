// Rotary embedding tables (see rope.h).
#include "engine/layers/rope.h"

#include <cmath>
#include <vector>

#include "engine/core/error.h"

namespace subdp {

RopeTables::RopeTables(int context, int hd, double theta) : context_(context), hd_(hd), theta_(theta) {
  SUBDP_ASSERT(hd % 2 == 0 && context >= 1);
  cos = Tensor::empty({int64_t{context} * (hd / 2)}, MemCategory::workspace);
  sin = Tensor::empty({int64_t{context} * (hd / 2)}, MemCategory::workspace);
}

void RopeTables::fill() {
  if (filled_) return;
  const int half = hd_ / 2;
  std::vector<float> c(static_cast<size_t>(context_) * half), s(c.size());
  for (int t = 0; t < context_; ++t)
    for (int i = 0; i < half; ++i) {
      const double angle = t * std::pow(theta_, -2.0 * i / hd_);
      c[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      s[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  set_values(cos, c);
  set_values(sin, s);
  filled_ = true;
}

}  // namespace subdp
