// transpose: whole 8 x 8 blocks and ragged edges, padded leading dimensions, accumulate, and
// nothing written outside the destination's (cols, rows) window.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/transpose.h"

namespace {

void check(int rows, int cols, bool accumulate) {
  const int ld_src = cols + 3, ld_dst = rows + 5;
  std::vector<float> src(static_cast<size_t>(rows) * ld_src), dst(static_cast<size_t>(cols) * ld_dst, -7.f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 1013) * 0.5f;
  subdp::cpu::transpose(src.data(), rows, cols, ld_src, dst.data(), ld_dst, accumulate);
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < ld_dst; ++r) {
      const float got = dst[static_cast<size_t>(c) * ld_dst + r];
      if (r >= rows) {
        ASSERT_EQ(got, -7.f) << "wrote past row " << rows << " (rows=" << rows << " cols=" << cols << ")";
        continue;
      }
      const float want = src[static_cast<size_t>(r) * ld_src + c] + (accumulate ? -7.f : 0.f);
      ASSERT_EQ(got, want) << "dst(" << c << ", " << r << ") rows=" << rows << " cols=" << cols
                           << " accumulate=" << accumulate;
    }
}

TEST(Transpose, BlocksAndRaggedEdgesWithPaddedLeadingDimensions) {
  for (int rows : {1, 7, 8, 9, 16, 33})
    for (int cols : {1, 8, 15, 24, 49})
      for (bool accumulate : {false, true}) check(rows, cols, accumulate);
}

}  // namespace
