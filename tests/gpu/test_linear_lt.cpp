// cuda::linear_lt (kernels/cuda/gemm_lt.cpp): a linear layer's forward as one cuBLASLt GEMM
// with its bias / GELU epilogue, against the CPU's sgemm, bias and GELU kernels. x, w and y
// start 4 bytes past an allocation (as views into shared activations do), so the heuristic
// must be told their real alignment: the emulated cuBLASLt refuses an algorithm run on
// pointers aligned to less than its preference promised, as the library does. Each call offers
// cuBLASLt a workspace, as the backend does; the emulated algorithm takes part of it and needs
// it at cublasLtMatmul. On a device the library may offer no algorithm for operands 4 bytes
// off alignment (linear_lt returns false and the backend falls back): those cases are skipped
// there, not failed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

class LinearLt : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;  // no device: nothing to allocate (the fixture's members come first)
    workspace_ = std::make_unique<Dev<unsigned char>>(cuda::kLtWorkspaceBytes);
  }
  /// The workspace cuBLASLt may use, as large as the backend's.
  cuda::LtWorkspace ws() const { return {workspace_->get(), cuda::kLtWorkspaceBytes}; }

 private:
  std::unique_ptr<Dev<unsigned char>> workspace_;
};

/// Skips (on a device) or fails (on the emulator, whose heuristic always answers) when
/// cuBLASLt offered no algorithm for a fused call on unaligned operands.
#define ASSERT_FUSED(call)                                                                          \
  do {                                                                                              \
    const bool fused_ = (call);                                                                     \
    if (!fused_ && !kEmulated) GTEST_SKIP() << "cuBLASLt offers or runs no algorithm here: " #call; \
    ASSERT_TRUE(fused_) << #call;                                                                   \
  } while (0)

struct LinearCase {
  bool bias, gelu;
  int out;
};

/// y and pre of the CPU kernels for x (rows, in), w (out, in), b (out) over `round`ed x and w.
void reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b, bool bias,
               bool gelu, int rows, int in, int out, std::vector<float>& y, std::vector<float>& pre) {
  pre.assign(static_cast<size_t>(rows) * out, 0.f);
  cpu::sgemm(false, true, rows, out, in, 1.f, x.data(), in, w.data(), in, 0.f, pre.data(), out);
  if (bias) cpu::add_bias_rows(pre.data(), b.data(), rows, out);
  y = pre;
  if (gelu) cpu::gelu_forward(pre.data(), y.data(), static_cast<int64_t>(rows) * out);
}

TEST_F(LinearLt, BiasAndGeluEpiloguesMatchTheCpuKernels) {
  const int rows = 37, in = 24;
  for (const LinearCase c : {LinearCase{true, false, 40}, LinearCase{true, true, 40}, LinearCase{false, true, 16}}) {
    SCOPED_TRACE(::testing::Message() << "bias " << c.bias << " gelu " << c.gelu);
    const auto x = random_vec(static_cast<size_t>(rows) * in, 50), w = random_vec(static_cast<size_t>(c.out) * in, 51);
    const auto b = random_vec(c.out, 52);
    std::vector<float> want_y, want_pre;
    reference(x, w, b, c.bias, c.gelu, rows, in, c.out, want_y, want_pre);
    const size_t ny = static_cast<size_t>(rows) * c.out;
    Dev<float> dx(x.size() + 1), dw(w.size() + 1), db(b), dy(ny + 1), dpre(ny + 1);
    CUDA_CHECK(cudaMemcpy(dx.get() + 1, x.data(), 4 * x.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw.get() + 1, w.data(), 4 * w.size(), cudaMemcpyHostToDevice));
    ASSERT_FUSED(cuda::linear_lt(dx.get() + 1, dw.get() + 1, c.bias ? db.get() : nullptr, dy.get() + 1,
                                 c.gelu ? dpre.get() : nullptr, rows, in, c.out, ws(), stream));
    std::vector<float> got_y(ny), got_pre(ny);
    CUDA_CHECK(cudaMemcpy(got_y.data(), dy.get() + 1, 4 * ny, cudaMemcpyDeviceToHost));
    EXPECT_REL(got_y, want_y, kF32Tol);
    if (c.gelu) {
      CUDA_CHECK(cudaMemcpy(got_pre.data(), dpre.get(), 4 * ny, cudaMemcpyDeviceToHost));
      EXPECT_REL(got_pre, want_pre, kF32Tol);
    }
  }
}

// The input gradient through the GELU before the layer (DGELU epilogue): dx = (dy w) *
// gelu'(pre), against the CPU's sgemm and gelu_backward; dy, w and dx 4 bytes off alignment.
TEST_F(LinearLt, DgeluInputGradientMatchesTheCpuKernels) {
  const int rows = 37, in = 40, out = 24;
  const auto dy = random_vec(static_cast<size_t>(rows) * out, 56), w = random_vec(static_cast<size_t>(out) * in, 57);
  const auto pre = random_vec(static_cast<size_t>(rows) * in, 58, -3.f, 3.f);
  std::vector<float> want(static_cast<size_t>(rows) * in);
  cpu::sgemm(false, false, rows, in, out, 1.f, dy.data(), out, w.data(), in, 0.f, want.data(), in);
  cpu::gelu_backward(pre.data(), want.data(), want.data(), static_cast<int64_t>(rows) * in);
  Dev<float> ddy(dy.size() + 1), dw(w.size() + 1), dpre(pre), ddx(want.size() + 1);
  CUDA_CHECK(cudaMemcpy(ddy.get() + 1, dy.data(), 4 * dy.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw.get() + 1, w.data(), 4 * w.size(), cudaMemcpyHostToDevice));
  ASSERT_FUSED(cuda::linear_dx_dgelu_lt(ddy.get() + 1, dw.get() + 1, dpre, ddx.get() + 1, rows, in, out, ws(), stream));
  std::vector<float> got(want.size());
  CUDA_CHECK(cudaMemcpy(got.data(), ddx.get() + 1, 4 * got.size(), cudaMemcpyDeviceToHost));
  EXPECT_REL(got, want, kF32Tol);
  EXPECT_FALSE(cuda::linear_dx_dgelu_lt(ddy, dw, dpre, ddx, rows, 36, out, ws(), stream));  // in not a multiple of 8
}

// Under precision = "bf16" the fused GEMM rounds its operands as cuBLAS's bf16 sgemm does:
// within 1e-5 of the rounded reference on the emulator; on a device within kBf16Tol (the
// library may run the mode on TF32 kernels, about 2^-9 of the operands from the reference).
TEST_F(LinearLt, Bf16ComputeRoundsTheOperands) {
  const int rows = 33, in = 257, out = 24;
  const auto x = random_vec(static_cast<size_t>(rows) * in, 53), w = random_vec(static_cast<size_t>(out) * in, 54);
  const auto b = random_vec(out, 55);
  std::vector<float> want_y, want_pre, plain_y;
  reference(round_bf16(x), round_bf16(w), b, true, false, rows, in, out, want_y, want_pre);
  reference(x, w, b, true, false, rows, in, out, plain_y, want_pre);
  Dev<float> dx(x), dw(w), db(b), dy(static_cast<size_t>(rows) * out);
  cuda::set_gemm_math(cuda::GemmMath::bf16);
  const bool fused = cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream);
  cuda::set_gemm_math(cuda::GemmMath::fp32);
  ASSERT_TRUE(fused);
  const auto got = dy.download();
  EXPECT_REL(got, want_y, kEmulated ? 1e-5 : kBf16Tol);
  EXPECT_GT(rel_error(got, plain_y), 1e-4) << "bf16 gave the fp32 result";
}

// The heuristic is asked once per problem: the same shape on the same alignments again asks
// nothing; without a workspace it asks again (the algorithm may need one) and gives the same
// result; the same shape 4 bytes off alignment asks again (an algorithm chosen for 256-byte
// aligned operands must not run on these: the emulated cuBLASLt refuses it, as the library
// may fail or fault) and gives the aligned call's result within float32 rounding.
TEST_F(LinearLt, HeuristicAskedOncePerShapeAndAlignment) {
  const int rows = 29, in = 16, out = 24;
  const auto x = random_vec(static_cast<size_t>(rows) * in, 59), w = random_vec(static_cast<size_t>(out) * in, 60);
  const auto b = random_vec(out, 61);
  const size_t ny = static_cast<size_t>(rows) * out;
  Dev<float> dx(x.size() + 1), dw(w.size() + 1), db(b), dy(ny + 1);
  CUDA_CHECK(cudaMemcpy(dx.get(), x.data(), 4 * x.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw.get(), w.data(), 4 * w.size(), cudaMemcpyHostToDevice));
  const int64_t before = cuda::lt_heuristic_queries();
  ASSERT_TRUE(cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream));
  std::vector<float> aligned(ny), off(ny);
  CUDA_CHECK(cudaMemcpy(aligned.data(), dy.get(), 4 * ny, cudaMemcpyDeviceToHost));
  ASSERT_TRUE(cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream));
  EXPECT_EQ(cuda::lt_heuristic_queries(), before + 1);
  // Without a workspace: another problem for the heuristic, the same result.
  ASSERT_TRUE(cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, cuda::LtWorkspace{}, stream));
  EXPECT_EQ(cuda::lt_heuristic_queries(), before + 2);
  CUDA_CHECK(cudaMemcpy(off.data(), dy.get(), 4 * ny, cudaMemcpyDeviceToHost));
  EXPECT_REL(off, aligned, kF32Tol);
  CUDA_CHECK(cudaMemcpy(dx.get() + 1, x.data(), 4 * x.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dw.get() + 1, w.data(), 4 * w.size(), cudaMemcpyHostToDevice));
  ASSERT_FUSED(cuda::linear_lt(dx.get() + 1, dw.get() + 1, db, dy.get() + 1, nullptr, rows, in, out, ws(), stream));
  EXPECT_EQ(cuda::lt_heuristic_queries(), before + 3);
  CUDA_CHECK(cudaMemcpy(off.data(), dy.get() + 1, 4 * ny, cudaMemcpyDeviceToHost));
  EXPECT_REL(off, aligned, kF32Tol);  // another algorithm may sum in another order
}

// The bias's alignment is part of the problem: the heuristic infers it from the pointer in the
// descriptor, so an algorithm chosen for a 256-byte aligned bias is not reused on a bias 16
// bytes past it (the emulated cuBLASLt refuses it), and both give the same result.
TEST_F(LinearLt, HeuristicAskedAgainForALessAlignedBias) {
  const int rows = 16, in = 16, out = 24;
  const auto x = random_vec(static_cast<size_t>(rows) * in, 62), w = random_vec(static_cast<size_t>(out) * in, 63);
  const auto b = random_vec(out, 64);
  std::vector<float> b_shifted(4, 0.f);
  b_shifted.insert(b_shifted.end(), b.begin(), b.end());
  const size_t ny = static_cast<size_t>(rows) * out;
  Dev<float> dx(x), dw(w), db(b), db_shifted(b_shifted), dy(ny);
  const int64_t before = cuda::lt_heuristic_queries();
  ASSERT_TRUE(cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream));
  const auto aligned = dy.download();
  ASSERT_FUSED(cuda::linear_lt(dx, dw, db_shifted.get() + 4, dy, nullptr, rows, in, out, ws(), stream));
  EXPECT_EQ(cuda::lt_heuristic_queries(), before + 2);
  EXPECT_REL(dy.download(), aligned, kF32Tol);
}

// cublasLtMatmul refusing the algorithm its heuristic offered (the emulator's
// SUBDP_EMU_LT_REFUSE_MATMUL): false, nothing queued, no CUDA error left behind, one refusal
// counted; the problem is then declined without asking the heuristic or the library again.
TEST_F(LinearLt, ARefusedAlgorithmIsDeclinedAndForgotten) {
  if (!kEmulated) GTEST_SKIP() << "the refusal is the emulator's (SUBDP_EMU_LT_REFUSE_MATMUL)";
  const int rows = 13, in = 16, out = 32;  // a shape no other test asks for
  const size_t ny = static_cast<size_t>(rows) * out;
  Dev<float> dx(random_vec(static_cast<size_t>(rows) * in, 65)), dw(random_vec(static_cast<size_t>(out) * in, 66));
  Dev<float> db(random_vec(out, 67)), dy(ny);
  dy.upload(std::vector<float>(ny, 7.f));
  const int64_t queries = cuda::lt_heuristic_queries(), refusals = cuda::lt_matmul_refusals();
  ASSERT_EQ(setenv("SUBDP_EMU_LT_REFUSE_MATMUL", "1", 1), 0);
  const bool refused_call = cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream);
  ASSERT_EQ(unsetenv("SUBDP_EMU_LT_REFUSE_MATMUL"), 0);
  EXPECT_FALSE(refused_call);
  EXPECT_EQ(cuda::lt_matmul_refusals(), refusals + 1);
  EXPECT_FALSE(cuda::linear_lt(dx, dw, db, dy, nullptr, rows, in, out, ws(), stream));  // forgotten
  EXPECT_EQ(cuda::lt_heuristic_queries(), queries + 1);
  EXPECT_EQ(cuda::lt_matmul_refusals(), refusals + 1);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(dy.download(), std::vector<float>(ny, 7.f));
}

// Nothing to fuse, an empty problem, a GELU input whose leading dimension the library refuses
// (not a multiple of 8), or a bias off 16-byte alignment: false, and nothing written.
TEST_F(LinearLt, DeclinesWhatItCannotFuse) {
  Dev<float> x(64), w(64), b(12), y(64), pre(64);
  y.upload(std::vector<float>(64, 7.f));
  EXPECT_FALSE(cuda::linear_lt(x, w, nullptr, y, nullptr, 4, 4, 4, ws(), stream));
  EXPECT_FALSE(cuda::linear_lt(x, w, b, y, nullptr, 0, 4, 4, ws(), stream));
  EXPECT_FALSE(cuda::linear_lt(x, w, b, y, pre, 4, 4, 12, ws(), stream));
  EXPECT_FALSE(cuda::linear_lt(x, w, b.get() + 1, y, nullptr, 4, 4, 4, ws(), stream));  // a bias 4 bytes off 16
  EXPECT_EQ(y.download(), std::vector<float>(64, 7.f));
}

}  // namespace
}  // namespace subdp::gpu_test
