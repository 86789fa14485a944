// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution against the im2col path (itself checked
// against the naive convolution and by finite differences in test_gradcheck.cpp): forward, input
// gradient, full and masked-prefix weight gradients, odd and tiny image sizes; and conv
// backward adding into dx (accumulate_dx) on both paths.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <omp.h>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/winograd.h"
#include "tests/unit/conv_paths.h"
#include "tests/unit/gradcheck.h"

namespace subdp {
namespace {

using test::random_tensor;

using test::expect_close;
using test::scratch;

// Sets the largest Winograd tile for a scope (process-wide setting, default 2).
struct MaxTile {
  explicit MaxTile(int m) { cpu::set_winograd_max_tile(m); }
  ~MaxTile() { cpu::set_winograd_max_tile(2); }
};

// Winograd and im2col on shape s: y, dx, dw (prefix dw_cout x dw_cin) agree, with F(2x2)
// tiles only and with F(4x4) tiles allowed.
void expect_paths_agree_with_tile(cpu::ConvShape s, int dw_cout, int dw_cin);
void expect_paths_agree(cpu::ConvShape s, int dw_cout, int dw_cin) {
  for (int m : {2, 4}) {
    SCOPED_TRACE("largest tile " + std::to_string(m));
    MaxTile tile(m);
    expect_paths_agree_with_tile(s, dw_cout, dw_cin);
  }
}

void expect_paths_agree_with_tile(cpu::ConvShape s, int dw_cout, int dw_cin) {
  ASSERT_TRUE(cpu::winograd_applies(s));
  const int64_t xn = int64_t{s.N} * s.Cin * s.H * s.W, yn = int64_t{s.N} * s.Cout * s.H * s.W;
  Tensor x = random_tensor({xn}, 1.f, 41), w = random_tensor({int64_t{s.Cout} * s.Cin * 9}, 1.f, 42);
  Tensor dy = random_tensor({yn}, 1.f, 43);
  Tensor ws_w = scratch(cpu::winograd_workspace_floats(s)), ws_i = scratch(cpu::conv2d_im2col_workspace_floats(s));
  Tensor y_w = scratch(yn), y_i = scratch(yn);
  cpu::winograd_forward(s, x.f32(), w.f32(), y_w.f32(), ws_w.f32());
  cpu::conv2d_im2col_forward(s, x.f32(), w.f32(), y_i.f32(), ws_i.f32());
  expect_close(y_w.f32(), y_i.f32(), yn, "y");

  const int64_t dwn = int64_t{dw_cout} * dw_cin * 9;
  Tensor dx_w = scratch(xn), dx_i = scratch(xn), dw_w = random_tensor({dwn}, 1.f, 44);
  Tensor dw_i = Tensor::zeros({dwn}, MemCategory::workspace);
  std::copy(dw_w.f32(), dw_w.f32() + dwn, dw_i.f32());  // both accumulate onto the same start
  cpu::winograd_backward(s, x.f32(), w.f32(), dy.f32(), dx_w.f32(), dw_w.f32(), dw_cout, dw_cin, ws_w.f32());
  cpu::conv2d_im2col_backward(s, x.f32(), w.f32(), dy.f32(), dx_i.f32(), dw_i.f32(), dw_cout, dw_cin, ws_i.f32());
  expect_close(dx_w.f32(), dx_i.f32(), xn, "dx");
  expect_close(dw_w.f32(), dw_i.f32(), dwn, "dw");
}

TEST(Winograd, AppliesOnlyToSameThreeByThreeWithEnoughChannels) {
  EXPECT_TRUE(cpu::winograd_applies({1, 8, 5, 5, 8, 3, 1, 1}));
  EXPECT_FALSE(cpu::winograd_applies({1, 1, 28, 28, 32, 3, 1, 1}));   // the stem: im2col
  EXPECT_FALSE(cpu::winograd_applies({1, 32, 28, 28, 64, 3, 2, 1}));  // strided
  EXPECT_FALSE(cpu::winograd_applies({1, 32, 28, 28, 64, 1, 1, 0}));  // 1x1
}

TEST(Winograd, EvenImageMatchesIm2col) { expect_paths_agree({3, 8, 8, 16, 12, 3, 1, 1}, 12, 8); }
TEST(Winograd, FourteenWideImageMatchesIm2col) { expect_paths_agree({2, 8, 5, 14, 9, 3, 1, 1}, 9, 8); }
TEST(Winograd, OddImageMatchesIm2col) { expect_paths_agree({5, 9, 7, 5, 8, 3, 1, 1}, 8, 9); }
TEST(Winograd, OneRowImageMatchesIm2col) { expect_paths_agree({2, 8, 1, 3, 8, 3, 1, 1}, 8, 8); }
// 40 and 27 channels: whole 16- and 8-channel vectors and a scalar tail in one transform;
// 9 x 11 leaves partial F(4x4) tiles on the bottom and right.
TEST(Winograd, WideChannelsOddImageMatchIm2col) { expect_paths_agree({2, 40, 9, 11, 27, 3, 1, 1}, 20, 33); }
TEST(Winograd, TileSizeFollowsImageSize) {
  EXPECT_EQ(cpu::winograd_tile({1, 8, 28, 28, 8, 3, 1, 1}), 2);  // the default: F(2x2) only
  EXPECT_THROW(cpu::set_winograd_max_tile(3), std::invalid_argument);
  MaxTile tile(4);
  EXPECT_EQ(cpu::winograd_tile({1, 8, 28, 28, 8, 3, 1, 1}), 4);
  EXPECT_EQ(cpu::winograd_tile({1, 8, 4, 7, 8, 3, 1, 1}), 4);
  EXPECT_EQ(cpu::winograd_tile({1, 8, 3, 28, 8, 3, 1, 1}), 2);     // too small for 4x4 tiles
  EXPECT_EQ(cpu::winograd_tile({1, 128, 7, 7, 128, 3, 1, 1}), 2);  // 36 x 128 x 128 floats > 1 MiB
  EXPECT_EQ(cpu::winograd_tile({1, 64, 14, 14, 64, 3, 1, 1}), 4);
}
// 90 and 96 channels take F(2x2) tiles (their F(4x4) filters would pass 1 MiB): whole
// vectors and tails there too.
TEST(Winograd, WideLayerTakesSmallTilesAndMatchesIm2col) {
  const cpu::ConvShape s{2, 90, 5, 6, 96, 3, 1, 1};
  {
    MaxTile tile(4);
    ASSERT_EQ(cpu::winograd_tile(s), 2);
  }
  expect_paths_agree(s, 96, 90);
}
TEST(Winograd, ManySamplesPerChunkMatchIm2col) { expect_paths_agree({37, 8, 3, 3, 10, 3, 1, 1}, 10, 8); }
// F(4x4) with 64 channels: the 1 MiB tile-buffer budget caps a chunk at 7 of the 9 samples,
// so there are two chunks (one partial), with a masked weight-gradient prefix.
TEST(Winograd, BudgetLimitedChunksMatchIm2col) {
  const cpu::ConvShape s{9, 64, 14, 14, 64, 3, 1, 1};
  {
    MaxTile tile(4);
    ASSERT_EQ(cpu::winograd_tile(s), 4);
  }
  expect_paths_agree(s, 33, 17);
}

// y and dx do not depend on the thread count (the filter transform runs as fixed blocks;
// F(4x4) tiles, whose filter transform is the larger).
TEST(Winograd, ForwardAndInputGradientIndependentOfThreads) {
  MaxTile tile(4);
  test::expect_independent_of_threads({cpu::winograd_workspace_floats, cpu::winograd_forward, cpu::winograd_backward},
                                      {4, 64, 14, 14, 64, 3, 1, 1});
}
TEST(Winograd, MaskedWeightGradientPrefixMatchesIm2col) { expect_paths_agree({3, 12, 6, 7, 10, 3, 1, 1}, 4, 5); }

TEST(Winograd, NoWeightGradientLeavesOnlyInputGradient) {
  const cpu::ConvShape s{2, 8, 4, 4, 8, 3, 1, 1};
  Tensor x = random_tensor({2 * 8 * 16}, 1.f, 1), w = random_tensor({8 * 8 * 9}, 1.f, 2),
         dy = random_tensor({2 * 8 * 16}, 1.f, 3);
  Tensor ws = scratch(cpu::winograd_workspace_floats(s)), dx = scratch(2 * 8 * 16);
  cpu::winograd_backward(s, x.f32(), w.f32(), dy.f32(), dx.f32(), nullptr, 0, 0, ws.f32());
  double norm = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) norm += std::abs(dx.f32()[i]);
  EXPECT_GT(norm, 1.0);
}

// conv2d_backward with accumulate_dx adds the input gradient to dx's contents (a residual
// block sums its shortcut's and branch's in one buffer): start + written, on both paths,
// and the weight gradient computed in the same call is the one without accumulation.
void expect_accumulate_adds(cpu::ConvShape s) {
  const int64_t xn = int64_t{s.N} * s.Cin * s.H * s.W, yn = int64_t{s.N} * s.Cout * s.Ho() * s.Wo();
  const int64_t wn = int64_t{s.Cout} * s.Cin * s.k * s.k;
  Tensor x = random_tensor({xn}, 1.f, 51), w = random_tensor({wn}, 1.f, 52);
  Tensor dy = random_tensor({yn}, 1.f, 53), start = random_tensor({xn}, 1.f, 54);
  Tensor ws = scratch(cpu::conv2d_workspace_floats(s)), written = scratch(xn), summed = scratch(xn);
  Tensor dw_written = scratch(wn), dw_summed = scratch(wn);
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), written.f32(), dw_written.f32(), s.Cout, s.Cin, ws.f32());
  std::copy(start.f32(), start.f32() + xn, summed.f32());
  cpu::conv2d_backward(s, x.f32(), w.f32(), dy.f32(), summed.f32(), dw_summed.f32(), s.Cout, s.Cin, ws.f32(), true);
  std::vector<float> want(xn);
  for (int64_t i = 0; i < xn; ++i) want[i] = start.f32()[i] + written.f32()[i];
  expect_close(summed.f32(), want.data(), xn, "accumulated dx");
  expect_close(dw_summed.f32(), dw_written.f32(), wn, "dw");
}

TEST(ConvAccumulate, WinogradEvenAndOddImagesAddToInputGradient) {
  expect_accumulate_adds({3, 8, 8, 8, 12, 3, 1, 1});
  expect_accumulate_adds({2, 9, 7, 5, 8, 3, 1, 1});
  expect_accumulate_adds({37, 8, 3, 3, 10, 3, 1, 1});  // many chunks (each thread's partials when threads > 1)
}

TEST(ConvAccumulate, Im2colStridedAndProjectionAddToInputGradient) {
  expect_accumulate_adds({3, 4, 9, 9, 6, 3, 2, 1});  // strided 3x3 (a stage's first conv)
  expect_accumulate_adds({3, 4, 9, 9, 6, 1, 2, 0});  // 1x1 stride-2 projection
  expect_accumulate_adds({2, 1, 6, 6, 5, 3, 1, 1});  // one input channel (the stem)
}

TEST(ConvAccumulate, ChannelsLastStridedAndFiveByFiveAddToInputGradient) {
  expect_accumulate_adds({3, 16, 9, 9, 24, 3, 2, 1});  // strided 3x3 with enough channels
  expect_accumulate_adds({5, 9, 7, 6, 8, 5, 1, 2});    // 5x5
}

}  // namespace
}  // namespace subdp
