// Helpers shared by the convolution-path tests (test_winograd.cpp, test_conv_channels_last.cpp):
// workspace tensors, a tolerance scaled by the reference's largest value, and the check that
// a path's forward and input gradient do not depend on the OpenMP thread count.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "tests/unit/gradcheck.h"

namespace subdp::test {

/// n zero floats, counted as workspace.
inline Tensor scratch(int64_t n) { return Tensor::zeros({n}, MemCategory::workspace); }

/// |got - want| <= 2e-5 (1 + max |want|) element by element (float32 sums in another order).
inline void expect_close(const float* got, const float* want, int64_t n, const char* what) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, double(std::abs(want[i])));
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + scale)) << what << " element " << i;
}

/// A convolution path: its workspace size, forward and backward (cpu::conv2d_* signatures).
struct ConvPath {
  int64_t (*workspace_floats)(const cpu::ConvShape&);
  void (*forward)(const cpu::ConvShape&, const float*, const float*, float*, float*);
  void (*backward)(const cpu::ConvShape&, const float*, const float*, const float*, float*, float*, int, int, float*,
                   bool);
};

/// y and dx of `path` on shape s (3x3 filters) are identical bit for bit with 1 and 3 threads
/// (dw is deterministic per thread count only: per-thread partials).
inline void expect_independent_of_threads(const ConvPath& path, const cpu::ConvShape& s) {
  const int64_t xn = int64_t{s.N} * s.Cin * s.H * s.W, yn = int64_t{s.N} * s.Cout * s.Ho() * s.Wo();
  Tensor x = random_tensor({xn}, 1.f, 61), w = random_tensor({int64_t{s.Cout} * s.Cin * s.k * s.k}, 1.f, 62);
  Tensor dy = random_tensor({yn}, 1.f, 63);
  const int threads_before = omp_get_max_threads();
  std::vector<std::vector<float>> y, dx;
  for (int threads : {1, 3}) {
    cpu::set_num_threads(threads);
    Tensor ws = scratch(path.workspace_floats(s)), y_t = scratch(yn), dx_t = scratch(xn);
    path.forward(s, x.f32(), w.f32(), y_t.f32(), ws.f32());
    path.backward(s, x.f32(), w.f32(), dy.f32(), dx_t.f32(), nullptr, 0, 0, ws.f32(), false);
    y.emplace_back(y_t.f32(), y_t.f32() + yn);
    dx.emplace_back(dx_t.f32(), dx_t.f32() + xn);
  }
  cpu::set_num_threads(threads_before);
  EXPECT_TRUE(y[0] == y[1]) << "y differs between 1 and 3 threads";
  EXPECT_TRUE(dx[0] == dx[1]) << "dx differs between 1 and 3 threads";
}

}  // namespace subdp::test
