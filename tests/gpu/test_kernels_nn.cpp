// CUDA layer kernels against their CPU twins: LayerNorm, RMSNorm, RoPE, SwiGLU, BatchNorm2d, embedding, causal
// attention, conv2d (im2col / col2im + cuBLAS), global average pooling, and the SGD / AdamW
// updates against engine/optim/optimizer.cpp itself. float32: relative error < 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/config/config.h"
#include "engine/optim/optimizer.h"
#include "engine/subnet/param.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

using LayerKernels = GpuTest;

// 1029 rows: the parameter gradients' rows in slices (column_sums.cuh); RMSNorm's 131: one.
TEST_F(LayerKernels, LayerNorm) {
  const int64_t rows = 1029;
  const int C = 96;
  const auto x = random_vec(rows * C, 30, -2.f, 3.f), gamma = random_vec(C, 31), beta = random_vec(C, 32);
  const auto dy = random_vec(rows * C, 33), dx0 = random_vec(rows * C, 34), dg0 = random_vec(C, 35);
  std::vector<float> y(rows * C), mean(rows), rstd(rows), dx = dx0, dg = dg0, db = dg0;
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, C, 1e-5f);
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(), db.data(),
                          rows, C);
  Dev<float> dx_(x), dgam(gamma), dbet(beta), dy_(rows * C), dmean(rows), drstd(rows);
  Dev<float> ddy(dy), ddx(dx0), ddg(dg0), ddb(dg0);
  cuda::layernorm_forward(dx_, dgam, dbet, dy_, dmean, drstd, rows, C, 1e-5f, stream);
  ASSERT_GT(cuda::column_grad_workspace_floats(rows, C), 0);
  Dev<float> ws(cuda::column_grad_workspace_floats(rows, C));
  cuda::layernorm_backward(dx_, dgam, dmean, drstd, ddy, ddx, ddg, ddb, rows, C, ws, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  EXPECT_REL(dmean.download(), mean, kF32Tol);
  EXPECT_REL(drstd.download(), rstd, kF32Tol);
  EXPECT_REL(ddx.download(), dx, kF32Tol);
  EXPECT_REL(ddg.download(), dg, kF32Tol);
  EXPECT_REL(ddb.download(), db, kF32Tol);

  // bf16 activations, fp32 parameters and statistics.
  const auto xr = round_bf16(x);
  cpu::layernorm_forward(xr.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, C, 1e-5f);
  DevBf16 x16(xr), y16(rows * C);
  cuda::layernorm_forward(x16, dgam, dbet, y16, dmean, drstd, rows, C, 1e-5f, stream);
  EXPECT_REL(y16.download(), y, kBf16Tol);
}

TEST_F(LayerKernels, RMSNorm) {
  const int64_t rows = 131;
  const int C = 160;
  const auto x = random_vec(rows * C, 130, -2.f, 3.f), gamma = random_vec(C, 131);
  const auto dy = random_vec(rows * C, 133), dx0 = random_vec(rows * C, 134), dg0 = random_vec(C, 135);
  std::vector<float> y(rows * C), rstd(rows), dx = dx0, dg = dg0;
  cpu::rmsnorm_forward(x.data(), gamma.data(), y.data(), rstd.data(), rows, C, 1e-5f);
  cpu::rmsnorm_backward(x.data(), gamma.data(), rstd.data(), dy.data(), dx.data(), dg.data(), rows, C);
  Dev<float> dx_(x), dgam(gamma), dy_(rows * C), dyr(rows * C), drstd(rows), ddy(dy), ddx(dx0), ddg(dg0);
  cuda::rmsnorm_forward(dx_, dgam, dy_, drstd, rows, C, 1e-5f, stream);
  cuda::rmsnorm_apply(dx_, dgam, drstd, dyr, rows, C, stream);
  ASSERT_EQ(cuda::column_grad_workspace_floats(rows, C), 0);
  cuda::rmsnorm_backward(dx_, dgam, drstd, ddy, ddx, ddg, rows, C, nullptr, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  EXPECT_EQ(dyr.download(), dy_.download());  // apply gives the forward's bits
  EXPECT_REL(drstd.download(), rstd, kF32Tol);
  EXPECT_REL(ddx.download(), dx, kF32Tol);
  EXPECT_REL(ddg.download(), dg, kF32Tol);
}

TEST_F(LayerKernels, RopeRotatesTheQueryAndKeyHeadsOnly) {
  const int64_t B = 3, T = 17, Hk = 3, hd = 8, ld = 3 * Hk * hd, rows = B * T, context = 20;
  const auto x = random_vec(rows * ld, 140), cos = random_vec(context * hd / 2, 141),
             sin = random_vec(context * hd / 2, 142);
  std::vector<float> y = x, back;
  cpu::rope_rotate(y.data(), rows, T, ld, 2 * Hk, hd, cos.data(), sin.data(), false);
  Dev<float> d(x), dcos(cos), dsin(sin);
  cuda::rope_rotate(d, rows, T, ld, 2 * Hk, hd, dcos, dsin, false, stream);
  EXPECT_REL(d.download(), y, kF32Tol);
  cuda::rope_rotate(d, rows, T, ld, 2 * Hk, hd, dcos, dsin, true, stream);
  back = d.download();
  for (int64_t r = 0; r < rows; ++r)  // v, past 2 Hk heads, is untouched
    for (int64_t c = 2 * Hk * hd; c < ld; ++c) ASSERT_EQ(back[r * ld + c], x[r * ld + c]);
}

TEST_F(LayerKernels, SwiGLU) {
  const int64_t n = 5000;
  const auto g = random_vec(n, 150, -6.f, 6.f), u = random_vec(n, 151), dh = random_vec(n, 152);
  std::vector<float> h(n), dg(n), du(n);
  cpu::swiglu_forward(g.data(), u.data(), h.data(), n);
  cpu::swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
  Dev<float> dg_(g), du_(u), dh_(dh), hh(n);
  cuda::swiglu_forward(dg_, du_, hh, n, stream);
  cuda::swiglu_backward(dg_, du_, dh_, dg_, du_, n, stream);  // in place, as the LLaMA block calls it
  EXPECT_REL(hh.download(), h, kF32Tol);
  EXPECT_REL(dg_.download(), dg, kF32Tol);
  EXPECT_REL(du_.download(), du, kF32Tol);
}

// The MLP pre-activations a block keeps in bf16 (precision = "bf16"): the kept copy is the
// input rounded to nearest even, and the forward, the recomputation and the backward are the
// float32 CPU functions of the rounded values (to float32 accuracy, so a kernel that computes
// from the unrounded input, about 2e-3 away, fails).
TEST_F(LayerKernels, Bf16KeptGeluIsTheCpuGeluOfTheRoundedValues) {
  const int64_t rows = 37, ld = 96, cols = 40, n = rows * ld;
  const auto x = random_vec(n, 160, -4.f, 4.f), dy = random_vec(n, 161);
  const auto rounded = round_bf16(x);
  std::vector<float> y(n), dx(n), y_cols(rows * cols);
  cpu::gelu_forward(rounded.data(), y.data(), n);
  cpu::gelu_backward(rounded.data(), dy.data(), dx.data(), n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y_cols[r * cols + c] = y[r * ld + c];
  Dev<float> act(x), grad(dy), out(rows * cols);
  DevBf16 kept(static_cast<size_t>(n));
  cuda::gelu_keep_bf16(act, kept, n, stream);
  EXPECT_EQ(kept.download(), rounded);
  EXPECT_REL(act.download(), y, kF32Tol);
  cuda::gelu_forward_columns(kept, rows, ld, cols, out, stream);  // fc2's dW columns
  EXPECT_REL(out.download(), y_cols, kF32Tol);
  cuda::gelu_backward(kept.get(), grad.get(), grad.get(), n, stream);  // in place, as the GPT block calls it
  EXPECT_REL(grad.download(), dx, kF32Tol);
}

TEST_F(LayerKernels, Bf16KeptSwiGLUIsTheCpuSwiGLUOfTheRoundedValues) {
  const int64_t n = 5000;
  const auto g = round_bf16(random_vec(n, 170, -6.f, 6.f)), u = random_vec(n, 171), dh = random_vec(n, 172);
  const auto u_rounded = round_bf16(u);
  std::vector<float> h(n), dg(n), du(n);
  cpu::swiglu_forward(g.data(), u_rounded.data(), h.data(), n);
  cpu::swiglu_backward(g.data(), u_rounded.data(), dh.data(), dg.data(), du.data(), n);
  DevBf16 gate(g), up(static_cast<size_t>(n));
  Dev<float> act(u), recomputed(n), grad(dh), dup(n);
  cuda::swiglu_keep_bf16(gate, act, up, n, stream);
  EXPECT_EQ(up.download(), u_rounded);
  EXPECT_REL(act.download(), h, kF32Tol);
  cuda::swiglu_forward(gate.get(), up.get(), recomputed.get(), n, stream);  // w2's dW input
  EXPECT_REL(recomputed.download(), h, kF32Tol);
  cuda::swiglu_backward(gate.get(), up.get(), grad.get(), grad.get(), dup.get(), n, stream);  // d(gate) over dh
  EXPECT_REL(grad.download(), dg, kF32Tol);
  EXPECT_REL(dup.download(), du, kF32Tol);
}

TEST_F(LayerKernels, BatchNorm2d) {
  const int N = 6, C = 10, HW = 49, grad_channels = 7;
  const int64_t n = static_cast<int64_t>(N) * C * HW;
  const auto x = random_vec(n, 40, -1.f, 2.f), gamma = random_vec(C, 41), beta = random_vec(C, 42);
  const auto dy = random_vec(n, 43), rm0 = random_vec(C, 44), rv0 = random_vec(C, 45, 0.5f, 1.5f);
  std::vector<float> y(n), mean(C), rstd(C), rm = rm0, rv = rv0, dx(n), dg(C, 0.25f), db(C, -0.5f), ye(n);
  cpu::batchnorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rm.data(), rv.data(),
                         N, C, HW, true, 0.1f, 1e-5f);
  cpu::batchnorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dg.data(), db.data(),
                          N, C, HW, grad_channels);
  cpu::batchnorm_forward(x.data(), gamma.data(), beta.data(), ye.data(), mean.data(), rstd.data(), rm.data(), rv.data(),
                         N, C, HW, false, 0.1f, 1e-5f);
  Dev<float> dx_(x), dgam(gamma), dbet(beta), dy_(n), dmean(C), drstd(C), drm(rm0), drv(rv0);
  Dev<float> ddy(dy), ddx(n), ddg(std::vector<float>(C, 0.25f)), ddb(std::vector<float>(C, -0.5f)), dye(n);
  cuda::batchnorm_forward(dx_, dgam, dbet, dy_, dmean, drstd, drm, drv, N, C, HW, true, 0.1f, 1e-5f, stream);
  cuda::batchnorm_backward(dx_, dgam, dmean, drstd, ddy, ddx, ddg, ddb, N, C, HW, grad_channels, stream);
  cuda::batchnorm_forward(dx_, dgam, dbet, dye, dmean, drstd, drm, drv, N, C, HW, false, 0.1f, 1e-5f, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  EXPECT_REL(dmean.download(), mean, kF32Tol);
  EXPECT_REL(drstd.download(), rstd, kF32Tol);
  EXPECT_REL(drm.download(), rm, kF32Tol);
  EXPECT_REL(drv.download(), rv, kF32Tol);
  EXPECT_REL(ddx.download(), dx, kF32Tol);
  EXPECT_REL(ddg.download(), dg, kF32Tol);  // channels >= grad_channels keep 0.25
  EXPECT_REL(ddb.download(), db, kF32Tol);
  EXPECT_REL(dye.download(), ye, kF32Tol);
}

TEST_F(LayerKernels, Embedding) {
  const int64_t rows = 777, C = 40, num = 50;
  auto ids = random_ints(rows, 50, 0, num);
  for (int64_t r = 0; r < rows; r += 3) ids[r] = 7;  // a heavy id
  const auto w = random_vec(num * C, 51), dy = random_vec(rows * C, 52), dw0 = random_vec(num * C, 53);
  const auto y0 = random_vec(rows * C, 54);
  std::vector<float> y = y0, dw = dw0;
  for (int64_t r = 0; r < rows; ++r)  // reference: engine/layers/embedding.cpp
    for (int64_t c = 0; c < C; ++c) {
      y[r * C + c] += w[ids[r] * C + c];
      dw[ids[r] * C + c] += dy[r * C + c];
    }
  Dev<int32_t> dids(ids);
  Dev<float> dw_(w), dy_(y0), ddy(dy), ddw(dw0);
  cuda::embedding_forward(dids, dw_, dy_, rows, C, num, true, stream);
  const size_t ws_bytes = cuda::embedding_backward_workspace_bytes(rows);
  Dev<char> ws(ws_bytes);
  cuda::embedding_backward(dids, ddy, ddw, rows, C, num, ws, ws_bytes, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  const auto first = ddw.download();
  EXPECT_REL(first, dw, kF32Tol);
  ddw.upload(dw0);  // deterministic: a second run gives the same bits
  cuda::embedding_backward(dids, ddy, ddw, rows, C, num, ws, ws_bytes, stream);
  EXPECT_EQ(ddw.download(), first);
}

/// "B T H hd KV = ..." of an attention shape, for a test's trace.
std::string describe(const cpu::AttentionShape& s) {
  return "B T H hd KV = " + std::to_string(s.B) + " " + std::to_string(s.T) + " " + std::to_string(s.H) + " " +
         std::to_string(s.hd) + " " + std::to_string(s.kv_heads());
}

/// Inputs rounded to bf16 (q, k, v uniform in [-2, 2) from seed, dy in [-1, 1) from seed + 1)
/// and the CPU attention's y and dqkv on them: what the tensor-core paths are held to.
struct CpuAttentionCase {
  std::vector<float> qkv, dy, y, dqkv;
};
CpuAttentionCase cpu_attention_on_bf16(const cpu::AttentionShape& s, uint32_t seed) {
  const int64_t qkv_n = static_cast<int64_t>(s.B) * s.T * s.qkv_width(),
                y_n = static_cast<int64_t>(s.B) * s.T * s.width();
  CpuAttentionCase c{round_bf16(random_vec(qkv_n, seed, -2.f, 2.f)), round_bf16(random_vec(y_n, seed + 1)),
                     std::vector<float>(y_n), std::vector<float>(qkv_n)};
  std::vector<float> ws(cpu::attention_workspace_floats(s, 1));
  cpu::attention_forward(s, c.qkv.data(), nullptr, c.y.data(), ws.data(), 1);
  cpu::attention_backward(s, c.qkv.data(), nullptr, c.dy.data(), c.dqkv.data(), ws.data(), 1);
  return c;
}

/// Row log-sum-exp of the scaled causal scores, (B, H, T), in double: the flash forward's
/// statistic.
std::vector<float> reference_lse(const cpu::AttentionShape& s, const std::vector<float>& qkv) {
  const int64_t C = s.width(), ld = s.qkv_width();
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  std::vector<float> lse;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> scores;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < s.hd; ++d)
            dot += double{qkv[(b * s.T + i) * ld + h * s.hd + d]} *
                   qkv[(b * s.T + j) * ld + C + (h / s.group()) * s.hd + d];  // its key head
          scores.push_back(scale * dot);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double x : scores) sum += std::exp(x - mx);
        lse.push_back(static_cast<float>(mx + std::log(sum)));
      }
  return lse;
}

// The flash kernels against the CPU's GEMM attention. The shapes cross the 64-row blocks and
// the key / query tiles (T = 130, 70), cover each compiled head width (16, 32, 64, 128) and
// heads narrower than their width (5, 33, 100: zero-padded columns).
TEST_F(LayerKernels, FlashAttentionMatchesCpu) {
  // The last three are grouped-query: 2 and 3 query heads per key / value head, and one key /
  // value head for all four (multi-query).
  const cpu::AttentionShape shapes[] = {{3, 37, 4, 16},    {2, 130, 2, 64},    {1, 70, 2, 128},
                                        {2, 20, 3, 5},     {1, 65, 1, 33},     {1, 33, 2, 100},
                                        {2, 70, 4, 16, 2}, {1, 130, 6, 32, 2}, {2, 37, 4, 64, 1}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t qkv_n = static_cast<int64_t>(s.B) * s.T * s.qkv_width(),
                  y_n = static_cast<int64_t>(s.B) * s.T * s.width();
    const auto qkv = random_vec(qkv_n, 60, -2.f, 2.f), dy = random_vec(y_n, 61);
    std::vector<float> y(y_n), dqkv(qkv_n), ws(cpu::attention_workspace_floats(s, 1));
    cpu::attention_forward(s, qkv.data(), nullptr, y.data(), ws.data(), 1);
    cpu::attention_backward(s, qkv.data(), nullptr, dy.data(), dqkv.data(), ws.data(), 1);
    const std::vector<float> nan(qkv_n, std::nanf(""));  // every element must be written
    Dev<float> dq(qkv), dy_(std::vector<float>(y_n, std::nanf(""))), dlse(static_cast<int64_t>(s.B) * s.H * s.T);
    Dev<float> ddy(dy), ddq(nan), dws(cuda::attention_workspace_floats(s));
    cuda::attention_forward(s, dq, dy_, dlse, stream);
    cuda::attention_backward(s, dq, ddy, ddq, dws, stream);
    EXPECT_REL(dy_.download(), y, kF32Tol);
    EXPECT_REL(dlse.download(), reference_lse(s, qkv), kF32Tol);
    const auto first = ddq.download();
    EXPECT_REL(first, dqkv, kF32Tol);
    ddq.upload(nan);  // deterministic: a second backward gives the same bits
    cuda::attention_backward(s, dq, ddy, ddq, dws, stream);
    EXPECT_EQ(ddq.download(), first);
  }
}

// The tensor-core forward (precision = "bf16") against the CPU attention of the same inputs
// rounded to bf16: only the probabilities' rounding to bf16 differs (a relative 2^-9 each),
// so y within 3e-3 (measured 0.9e-3 to 1.1e-3), and the log-sum-exp, whose sum adds the rounded probabilities, within
// 1e-3 (measured 1.4e-4 to 2.3e-4); the backward (probabilities and score gradients also in
// bf16) against the CPU backward of the same bf16 inputs and dy, within 6e-3 (measured 1.1e-3
// to 2.6e-3).
// Head widths 16 to 128 (48: zero-padded to 64), rows across the blocks and key tiles, and
// grouped-query heads; every output element written, the same bits twice.
TEST_F(LayerKernels, TensorCoreAttentionMatchesCpuOnBf16Inputs) {  // float or bf16 q, k, v
  const cpu::AttentionShape shapes[] = {{3, 37, 4, 16},    {2, 130, 2, 64},    {1, 70, 2, 128},   {1, 65, 2, 48},
                                        {2, 70, 4, 16, 2}, {1, 130, 6, 32, 2}, {2, 37, 4, 64, 1}, {1, 1, 1, 32}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t qkv_n = static_cast<int64_t>(s.B) * s.T * s.qkv_width(),
                  y_n = static_cast<int64_t>(s.B) * s.T * s.width(), lse_n = static_cast<int64_t>(s.B) * s.H * s.T;
    const CpuAttentionCase ref = cpu_attention_on_bf16(s, 62);
    const std::vector<float>&qkv = ref.qkv, &dy_in = ref.dy, &y = ref.y, &dqkv = ref.dqkv;
    Dev<float> dq(qkv), dy(std::vector<float>(y_n, std::nanf(""))), dlse(std::vector<float>(lse_n, std::nanf("")));
    ASSERT_TRUE(cuda::attention_forward_tc(s, dq, dy, dlse, stream));
    const auto first = dy.download();
    EXPECT_REL(first, y, 3e-3);
    EXPECT_REL(dlse.download(), reference_lse(s, qkv), 1e-3);
    ASSERT_TRUE(cuda::attention_forward_tc(s, dq, dy, nullptr, stream));
    EXPECT_EQ(dy.download(), first);
    const std::vector<float> nan(qkv_n, std::nanf(""));  // every element must be written
    Dev<float> ddy(dy_in), ddq(nan), dws(cuda::attention_tc_workspace_floats(s));
    ASSERT_TRUE(cuda::attention_backward_tc(s, dq, ddy, ddq, dws, stream));
    const auto grad = ddq.download();
    EXPECT_REL(grad, dqkv, 6e-3);
    ddq.upload(nan);
    ASSERT_TRUE(cuda::attention_backward_tc(s, dq, ddy, ddq, dws, stream));
    EXPECT_EQ(ddq.download(), grad);
    // The same q, k, v read as bf16 (the layer's kept copy): bit for bit the float path's.
    const DevBf16 kept(qkv);
    Dev<float> y16(std::vector<float>(y_n, std::nanf(""))), lse16(std::vector<float>(lse_n, std::nanf("")));
    ASSERT_TRUE(cuda::attention_forward_tc(s, kept.get(), y16, lse16, stream));
    EXPECT_EQ(y16.download(), first);
    EXPECT_EQ(lse16.download(), dlse.download());
    ddq.upload(nan);
    ASSERT_TRUE(cuda::attention_backward_tc(s, kept.get(), ddy, ddq, dws, stream));
    EXPECT_EQ(ddq.download(), grad);
  }
  Dev<float> qkv(std::vector<float>(3 * 33, 0.f)), y(33);
  EXPECT_FALSE(cuda::attention_forward_tc({1, 1, 1, 33}, qkv, y, nullptr, stream));  // not a multiple of 16
}

// The backward from what the forward kept (each row's log-sum-exp and the output:
// FlashAttention-2's L and O) instead of the forward run again: the CPU's gradient within each
// path's tolerance, on CUDA cores (natural log-sum-exp) and tensor cores (base 2); the same
// bits from an output kept scaled by 4 with y_scale 1/4 (a forward-masked layer keeps
// head_scale times it); within the tolerance from an output kept in bf16 (the layer's copy
// under precision = "bf16"). Inputs rounded to bf16, so the tensor-core path is compared
// with the CPU on the values it reads.
TEST_F(LayerKernels, AttentionBackwardFromKeptStatisticsMatchesCpu) {
  const cpu::AttentionShape shapes[] = {
      {2, 130, 2, 64}, {1, 65, 1, 33}, {2, 70, 4, 16, 2}, {2, 37, 4, 64, 1}, {1, 70, 2, 128}};
  for (const auto& s : shapes) {
    SCOPED_TRACE(describe(s));
    const int64_t qkv_n = static_cast<int64_t>(s.B) * s.T * s.qkv_width(),
                  y_n = static_cast<int64_t>(s.B) * s.T * s.width(), lse_n = static_cast<int64_t>(s.B) * s.H * s.T;
    const CpuAttentionCase ref = cpu_attention_on_bf16(s, 66);
    const std::vector<float>&qkv = ref.qkv, &dy_in = ref.dy, &want = ref.dqkv;
    const std::vector<float> nan(qkv_n, std::nanf(""));
    for (const bool tc : {false, true}) {
      if (tc && !cuda::attention_tc_supported(s)) continue;
      SCOPED_TRACE(tc ? "tensor cores" : "CUDA cores");
      Dev<float> dq(qkv), y(std::vector<float>(y_n, std::nanf(""))), lse(std::vector<float>(lse_n, std::nanf("")));
      Dev<float> ddy(dy_in), ddq(nan), dws(cuda::attention_tc_workspace_floats(s));
      if (tc)
        ASSERT_TRUE(cuda::attention_forward_tc(s, dq, y, lse, stream, /*lse_base2=*/true));
      else
        cuda::attention_forward(s, dq, y, lse, stream);
      const auto backward = [&](const void* kept_y, bool y_bf16, float y_scale) {
        const AttentionKept kept{lse, kept_y, y_bf16, y_scale};
        ddq.upload(nan);  // every element must be written
        if (tc)
          EXPECT_TRUE(cuda::attention_backward_tc(s, dq, ddy, ddq, dws, stream, &kept));
        else
          cuda::attention_backward(s, dq, ddy, ddq, dws, stream, &kept);
        return ddq.download();
      };
      const double tol = tc ? 6e-3 : kF32Tol;
      const auto grad = backward(y.get(), false, 1.f);
      EXPECT_REL(grad, want, tol);
      auto y4 = y.download();
      for (float& v : y4) v *= 4.f;
      const Dev<float> scaled(y4);
      EXPECT_EQ(backward(scaled.get(), false, 0.25f), grad);
      const DevBf16 y16(y.download());
      EXPECT_REL(backward(y16.get(), true, 1.f), want, tc ? 6e-3 : 4e-3);
    }
  }
}

// The tensor-core kernels load their tiles 16 bytes at a time where q, k, v and dy allow it,
// element by element where not: rows that start one element past a 16-byte boundary (float
// and bf16) give the same bits as aligned ones, forward and backward.
TEST_F(LayerKernels, TensorCoreAttentionReadsRowsOffAlignment) {
  const cpu::AttentionShape s{2, 70, 4, 32, 2};
  const int64_t qkv_n = static_cast<int64_t>(s.B) * s.T * s.qkv_width(),
                y_n = static_cast<int64_t>(s.B) * s.T * s.width();
  const auto qkv = round_bf16(random_vec(qkv_n, 64, -2.f, 2.f)), dy_in = random_vec(y_n, 65);
  std::vector<float> shifted = {0.f};
  shifted.insert(shifted.end(), qkv.begin(), qkv.end());
  const Dev<float> aligned(qkv), off(shifted);
  const DevBf16 kept(qkv), kept_off(shifted);
  Dev<float> y(y_n), dy(dy_in), dqkv(qkv_n), ws(cuda::attention_tc_workspace_floats(s));
  const auto run = [&](auto* q) {
    std::vector<float> out;
    EXPECT_TRUE(cuda::attention_forward_tc(s, q, y, nullptr, stream));
    out = y.download();
    EXPECT_TRUE(cuda::attention_backward_tc(s, q, dy, dqkv, ws, stream));
    const auto grad = dqkv.download();
    out.insert(out.end(), grad.begin(), grad.end());
    return out;
  };
  const auto want = run(aligned.get());
  EXPECT_EQ(run(off.get() + 1), want);
  EXPECT_EQ(run(kept.get()), want);
  EXPECT_EQ(run(kept_off.get() + 1), want);
}

TEST_F(LayerKernels, FlashAttentionRefusesAHeadWiderThanCompiled) {
  const cpu::AttentionShape s{1, 4, 1, cuda::kMaxAttentionHeadDim + 1};
  Dev<float> qkv(std::vector<float>(4 * 3 * s.width(), 0.f)), y(4 * s.width());
  EXPECT_THROW(cuda::attention_forward(s, qkv, y, nullptr, stream), std::invalid_argument);
}

TEST_F(LayerKernels, Conv2dIm2colCol2im) {
  struct Case {
    int Cin, H, W, Cout, k, stride, pad, dw_cout, dw_cin, chunk;
  };
  const Case cases[] = {{3, 9, 11, 8, 3, 1, 1, 8, 3, 2},   // stem-like, full gradient
                        {8, 10, 10, 6, 3, 2, 1, 4, 5, 5},  // strided, masked prefix
                        {6, 7, 7, 5, 1, 1, 0, 5, 6, 3},    // 1x1: no im2col
                        {6, 8, 8, 5, 1, 2, 0, 3, 2, 1}};   // 1x1 stride 2 shortcut
  for (const Case& c : cases) {
    cpu::ConvShape s;
    s.N = 5;
    s.Cin = c.Cin;
    s.H = c.H;
    s.W = c.W;
    s.Cout = c.Cout;
    s.k = c.k;
    s.stride = c.stride;
    s.pad = c.pad;
    const int64_t xn = static_cast<int64_t>(s.N) * s.Cin * s.H * s.W,
                  yn = static_cast<int64_t>(s.N) * s.Cout * s.Ho() * s.Wo();
    const int64_t wn = static_cast<int64_t>(s.Cout) * s.Cin * s.k * s.k,
                  dwn = static_cast<int64_t>(c.dw_cout) * c.dw_cin * s.k * s.k;
    const auto x = random_vec(xn, 70), w = random_vec(wn, 71), dy = random_vec(yn, 72), dw0 = random_vec(dwn, 73);
    std::vector<float> y(yn), dx(xn), dw = dw0, ws(cpu::conv2d_workspace_floats(s));
    cpu::conv2d_forward(s, x.data(), w.data(), y.data(), ws.data());
    cpu::conv2d_backward(s, x.data(), w.data(), dy.data(), dx.data(), dw.data(), c.dw_cout, c.dw_cin, ws.data());
    Dev<float> dx_(x), dw_(w), dy_(yn), ddy(dy), ddx(xn), ddw(dw0), dws(cuda::conv2d_workspace_floats(s, c.chunk));
    cuda::conv2d_forward(s, dx_, dw_, dy_, dws, c.chunk, stream);
    cuda::conv2d_backward(s, dx_, dw_, ddy, ddx, ddw, c.dw_cout, c.dw_cin, dws, c.chunk, stream);
    EXPECT_REL(dy_.download(), y, kF32Tol) << "k=" << c.k << " stride=" << c.stride;
    EXPECT_REL(ddx.download(), dx, kF32Tol) << "k=" << c.k << " stride=" << c.stride;
    EXPECT_REL(ddw.download(), dw, kF32Tol) << "k=" << c.k << " stride=" << c.stride;
  }
}

TEST_F(LayerKernels, GlobalAvgPool) {
  const int N = 7, C = 13, HW = 64;
  const auto x = random_vec(static_cast<size_t>(N) * C * HW, 80), dy = random_vec(static_cast<size_t>(N) * C, 81);
  std::vector<float> y(N * C), dx(static_cast<size_t>(N) * C * HW);
  cpu::global_avg_pool_forward(x.data(), y.data(), N, C, HW);
  cpu::global_avg_pool_backward(dy.data(), dx.data(), N, C, HW);
  Dev<float> dx_(x), dy_(N * C), ddy(dy), ddx(dx.size());
  cuda::global_avg_pool_forward(dx_, dy_, N, C, HW, stream);
  cuda::global_avg_pool_backward(ddy, ddx, N, C, HW, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  EXPECT_REL(ddx.download(), dx, kF32Tol);
}

/// One unsliced parameter of n values with a gradient, for the engine's optimizers.
Param make_param(const std::vector<float>& w) {
  Param p;
  p.name = "w";
  p.full_shape = p.local_shape = p.grad_shape = {static_cast<int64_t>(w.size())};
  p.trained = true;
  p.value = Tensor::empty(p.full_shape, MemCategory::params);
  p.grad = Tensor::empty(p.full_shape, MemCategory::grads);
  std::copy(w.begin(), w.end(), p.value.f32());
  return p;
}

/// Runs `steps` optimizer steps on the CPU (engine/optim/optimizer.cpp) and the GPU, same grads.
void check_optimizer(const OptimConfig& c, int steps) {
  const int64_t n = 4099;
  const auto w = random_vec(n, 90);
  Param p = make_param(w);
  auto opt = make_optimizer(c, {&p});
  Dev<float> dw(w), dg(n), s0(std::vector<float>(n, 0.f)), s1(std::vector<float>(n, 0.f));
  for (int t = 0; t < steps; ++t) {
    const auto g = random_vec(n, 91 + t);
    std::copy(g.begin(), g.end(), p.grad.f32());
    dg.upload(g);
    const double lr = c.lr * (1.0 - 0.1 * t);
    opt->step(lr);
    if (c.name == OptimizerKind::sgd)
      cuda::sgd_update(dw, dg, c.momentum > 0 ? s0.get() : nullptr, n, static_cast<float>(lr),
                       static_cast<float>(c.momentum), static_cast<float>(c.weight_decay), c.nesterov, t == 0, nullptr);
    else
      cuda::adamw_update(dw, dg, s0, s1, n, lr, c.beta1, c.beta2, c.eps, c.weight_decay, t + 1, nullptr);
  }
  const std::vector<float> cpu_w(p.value.f32(), p.value.f32() + n);
  EXPECT_REL(dw.download(), cpu_w, kF32Tol) << c.name << " momentum=" << c.momentum << " nesterov=" << c.nesterov;
  const std::vector<float> cpu_s0(opt->state(0).empty()
                                      ? std::vector<float>()
                                      : std::vector<float>(opt->state(0)[0]->f32(), opt->state(0)[0]->f32() + n));
  if (!cpu_s0.empty()) EXPECT_REL(s0.download(), cpu_s0, kF32Tol);
}

TEST_F(LayerKernels, SgdMatchesEngineOptimizer) {
  OptimConfig c;
  c.name = OptimizerKind::sgd;
  c.lr = 0.1;
  c.weight_decay = 5e-4;
  for (double mom : {0.0, 0.9})
    for (bool nesterov : {false, true}) {
      c.momentum = mom;
      c.nesterov = nesterov;
      check_optimizer(c, 4);
    }
}

TEST_F(LayerKernels, AdamWMatchesEngineOptimizer) {
  OptimConfig c;
  c.name = OptimizerKind::adamw;
  c.lr = 3e-3;
  c.weight_decay = 0.1;
  check_optimizer(c, 5);
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), sizeof(float) * v.size());
  return b;
}

/// The multi-tensor updates against one call per run, bit for bit: three runs of one buffer,
/// the middle one longer than two chunks (cut as the backend cuts them), and the count of
/// non-finite writes from an infinite gradient element.
TEST_F(LayerKernels, MultiTensorUpdatesGiveTheOneRunBits) {
  const int64_t chunk = cuda::update_chunk_floats();
  const std::vector<std::pair<int64_t, int64_t>> runs = {{0, 5}, {9, 2 * chunk + 7}, {2 * chunk + 20, 300}};
  const int64_t n = 2 * chunk + 320;
  auto g = random_vec(n, 95);
  g[9 + chunk + 3] = INFINITY;  // one element: w, m, v (AdamW) or w, buf (SGD) go non-finite
  const auto w0 = random_vec(n, 96), m0 = random_vec(n, 97, 0.f, 0.1f), v0 = random_vec(n, 98, 0.f, 0.01f);
  struct Copy {
    Dev<float> w, m, v;
  };
  Copy one{Dev<float>(w0), Dev<float>(m0), Dev<float>(v0)}, many{Dev<float>(w0), Dev<float>(m0), Dev<float>(v0)};
  Dev<float> dg(g);
  std::vector<UpdateRun> table;
  for (const auto& [at, len] : runs)
    for (int64_t k = 0; k < len; k += chunk)
      table.push_back({many.w + at + k, dg + at + k, many.m + at + k, many.v + at + k, std::min(chunk, len - k)});
  Dev<UpdateRun> dtable(table);
  Dev<unsigned long long> count(std::vector<unsigned long long>{0});
  for (bool adamw : {true, false}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD with Nesterov momentum");
    for (const auto& [at, len] : runs) {
      if (adamw)
        cuda::adamw_update_scaled(one.w + at, dg + at, one.m + at, one.v + at, len, 1e-3f, 0.3f, 0.999f, 1e-8f, 0.9f,
                                  0.95f, stream);
      else
        cuda::sgd_update(one.w + at, dg + at, one.m + at, len, 0.1f, 0.9f, 5e-4f, true, false, stream);
    }
    count.upload({0});
    if (adamw)
      cuda::adamw_update_chunks(dtable, static_cast<int64_t>(table.size()), 1e-3f, 0.3f, 0.999f, 1e-8f, 0.9f, 0.95f,
                                count, stream);
    else
      cuda::sgd_update_chunks(dtable, static_cast<int64_t>(table.size()), 0.1f, 0.9f, 5e-4f, true, false, count,
                              stream);
    EXPECT_EQ(bits_of(many.w.download()), bits_of(one.w.download()));  // bits: NaN != NaN as floats
    EXPECT_EQ(bits_of(many.m.download()), bits_of(one.m.download()));
    EXPECT_EQ(bits_of(many.v.download()), bits_of(one.v.download()));
    EXPECT_EQ(count.download()[0], adamw ? 3u : 2u);  // w, m, v; or w and the momentum buffer
  }
}

}  // namespace
}  // namespace subdp::gpu_test
