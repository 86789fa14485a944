// The channels-last im2col path (non-Winograd k x k convolutions with at least 8 channels)
// against the NCHW im2col path (itself checked against the naive convolution and by finite
// differences in test_gradcheck.cpp): forward, input gradient, full and masked-prefix weight
// gradients, on downsampling, projection, unpadded and 5x5 shapes, channel counts that leave
// vector tails, chunks of many small samples, and independence of the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <omp.h>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_channels_last.h"
#include "kernels/cpu/gemm.h"
#include "tests/unit/conv_paths.h"
#include "tests/unit/gradcheck.h"

namespace subdp {
namespace {

using test::random_tensor;

using test::expect_close;
using test::scratch;

int64_t x_floats(const cpu::ConvShape& s) { return int64_t{s.N} * s.Cin * s.H * s.W; }
int64_t y_floats(const cpu::ConvShape& s) { return int64_t{s.N} * s.Cout * s.Ho() * s.Wo(); }

// y, dx and dw (prefix dw_cout x dw_cin, accumulated onto the same random start) agree
// between the channels-last path and the NCHW im2col path.
void expect_paths_agree(cpu::ConvShape s, int dw_cout, int dw_cin) {
  ASSERT_TRUE(cpu::channels_last_applies(s));
  const int64_t xn = x_floats(s), yn = y_floats(s), dwn = int64_t{dw_cout} * dw_cin * s.k * s.k;
  Tensor x = random_tensor({xn}, 1.f, 71), w = random_tensor({int64_t{s.Cout} * s.Cin * s.k * s.k}, 1.f, 72);
  Tensor dy = random_tensor({yn}, 1.f, 73);
  Tensor ws_c = scratch(cpu::conv2d_channels_last_workspace_floats(s));
  Tensor ws_i = scratch(cpu::conv2d_im2col_workspace_floats(s));
  Tensor y_c = scratch(yn), y_i = scratch(yn);
  cpu::conv2d_channels_last_forward(s, x.f32(), w.f32(), y_c.f32(), ws_c.f32());
  cpu::conv2d_im2col_forward(s, x.f32(), w.f32(), y_i.f32(), ws_i.f32());
  expect_close(y_c.f32(), y_i.f32(), yn, "y");

  Tensor dx_c = scratch(xn), dx_i = scratch(xn), dw_c = random_tensor({dwn}, 1.f, 74), dw_i = scratch(dwn);
  std::copy(dw_c.f32(), dw_c.f32() + dwn, dw_i.f32());
  cpu::conv2d_channels_last_backward(s, x.f32(), w.f32(), dy.f32(), dx_c.f32(), dw_c.f32(), dw_cout, dw_cin,
                                     ws_c.f32());
  cpu::conv2d_im2col_backward(s, x.f32(), w.f32(), dy.f32(), dx_i.f32(), dw_i.f32(), dw_cout, dw_cin, ws_i.f32());
  expect_close(dx_c.f32(), dx_i.f32(), xn, "dx");
  expect_close(dw_c.f32(), dw_i.f32(), dwn, "dw");
}

TEST(ConvChannelsLast, AppliesToStridedAndOtherNonWinogradShapesWithEnoughChannels) {
  EXPECT_TRUE(cpu::channels_last_applies({1, 32, 28, 28, 64, 3, 2, 1}));   // downsampling 3x3
  EXPECT_TRUE(cpu::channels_last_applies({1, 8, 9, 9, 8, 5, 1, 2}));       // 5x5
  EXPECT_FALSE(cpu::channels_last_applies({1, 32, 28, 28, 32, 3, 1, 1}));  // Winograd's
  EXPECT_FALSE(cpu::channels_last_applies({1, 32, 28, 28, 64, 1, 2, 0}));  // 1x1 projection: NCHW
  EXPECT_FALSE(cpu::channels_last_applies({1, 32, 28, 28, 64, 1, 1, 0}));  // 1x1 stride 1: one GEMM
  EXPECT_FALSE(cpu::channels_last_applies({1, 1, 28, 28, 32, 3, 1, 1}));   // the stem
  EXPECT_FALSE(cpu::channels_last_applies({1, 32, 28, 28, 4, 3, 2, 1}));   // too few outputs
}

TEST(ConvChannelsLast, DownsamplingMatchesIm2col) { expect_paths_agree({3, 8, 9, 9, 12, 3, 2, 1}, 12, 8); }
TEST(ConvChannelsLast, ResNetStageShapesMatchIm2col) {
  expect_paths_agree({2, 32, 28, 28, 64, 3, 2, 1}, 64, 32);
  expect_paths_agree({3, 64, 14, 14, 128, 3, 2, 1}, 128, 64);
}
// 40 and 27 channels: whole 16- and 8-float vectors and a scalar tail in every copy.
TEST(ConvChannelsLast, VectorTailsMatchIm2col) { expect_paths_agree({2, 40, 10, 7, 27, 3, 2, 1}, 27, 40); }
// 2 x 2 outputs per sample: chunks of 32 samples, the second one partial.
TEST(ConvChannelsLast, ManySamplesPerChunkMatchIm2col) { expect_paths_agree({37, 8, 3, 4, 10, 3, 2, 1}, 10, 8); }
TEST(ConvChannelsLast, UnpaddedAndFiveByFiveMatchIm2col) {
  expect_paths_agree({2, 9, 6, 5, 10, 3, 1, 0}, 10, 9);
  expect_paths_agree({2, 8, 7, 6, 9, 5, 1, 2}, 9, 8);
}
TEST(ConvChannelsLast, MaskedWeightGradientPrefixMatchesIm2col) {
  expect_paths_agree({3, 12, 9, 8, 10, 3, 2, 1}, 4, 5);
}

TEST(ConvChannelsLast, ForwardAndInputGradientIndependentOfThreads) {
  test::expect_independent_of_threads({cpu::conv2d_channels_last_workspace_floats, cpu::conv2d_channels_last_forward,
                                       cpu::conv2d_channels_last_backward},
                                      {9, 16, 14, 14, 24, 3, 2, 1});
}

// The weight gradient summed over 3 threads' partials equals the single-thread one.
TEST(ConvChannelsLast, WeightGradientPartialsOfThreeThreadsMatchOne) {
  const cpu::ConvShape s{7, 8, 6, 6, 16, 3, 2, 1};
  const int64_t wn = int64_t{s.Cout} * s.Cin * 9;
  Tensor x = random_tensor({x_floats(s)}, 1.f, 91), w = random_tensor({wn}, 1.f, 92);
  Tensor dy = random_tensor({y_floats(s)}, 1.f, 93);
  const int threads_before = omp_get_max_threads();
  std::vector<std::vector<float>> dw;
  for (int threads : {1, 3}) {
    cpu::set_num_threads(threads);
    Tensor ws = scratch(cpu::conv2d_channels_last_workspace_floats(s)), dw_t = scratch(wn);
    cpu::conv2d_channels_last_backward(s, x.f32(), w.f32(), dy.f32(), nullptr, dw_t.f32(), s.Cout, s.Cin, ws.f32());
    dw.emplace_back(dw_t.f32(), dw_t.f32() + wn);
  }
  cpu::set_num_threads(threads_before);
  expect_close(dw[1].data(), dw[0].data(), wn, "dw over 3 threads");
}

}  // namespace
}  // namespace subdp
