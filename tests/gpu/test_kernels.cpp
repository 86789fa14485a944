// CUDA kernels against their CPU twins (kernels/cpu): elementwise, bias, reductions,
// softmax / cross-entropy and cuBLAS GEMM, float32 (relative error < 1e-5) and bf16
// (< 1e-2, CPU run on the bf16-rounded inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/core/backend.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

using Kernels = GpuTest;
constexpr int64_t kN = 100003;  // odd size: exercises the tails of grid-stride loops

TEST_F(Kernels, ReluForwardBackward) {
  const auto x = random_vec(kN, 1), dy = random_vec(kN, 2), dx0 = random_vec(kN, 3);
  std::vector<float> y(kN), dx = dx0;
  cpu::relu_forward(x.data(), y.data(), kN);
  Dev<float> dx_(x), dy_(y), ddy(dy), ddx(dx0);
  cuda::relu_forward(dx_, dy_, kN, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  for (bool acc : {false, true}) {
    dx = dx0;
    ddx.upload(dx0);
    cpu::relu_backward(y.data(), dy.data(), dx.data(), kN, acc);
    cuda::relu_backward(dy_, ddy, ddx, kN, acc, stream);
    EXPECT_REL(ddx.download(), dx, kF32Tol) << "accumulate=" << acc;
  }
}

TEST_F(Kernels, GeluForwardBackward) {
  const auto x = random_vec(kN, 4, -4.f, 4.f), dy = random_vec(kN, 5);
  std::vector<float> y(kN), dx(kN);
  cpu::gelu_forward(x.data(), y.data(), kN);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), kN);
  Dev<float> dx_(x), dy_(kN), ddy(dy), ddx(kN);
  cuda::gelu_forward(dx_, dy_, kN, stream);
  cuda::gelu_backward(dx_, ddy, ddx, kN, stream);
  EXPECT_REL(dy_.download(), y, kF32Tol);
  EXPECT_REL(ddx.download(), dx, kF32Tol);
}

TEST_F(Kernels, AddAxpyScale) {
  const auto a = random_vec(kN, 6), b = random_vec(kN, 7);
  std::vector<float> y(kN), z = b;
  cpu::add(a.data(), b.data(), y.data(), kN);
  cpu::axpy(0.37f, a.data(), z.data(), kN);
  cpu::scale(z.data(), -1.9f, kN);
  Dev<float> da(a), db(b), dy(kN);
  cuda::add(da, db, dy, kN, stream);
  cuda::axpy(0.37f, da, db, kN, stream);
  cuda::scale(db.get(), -1.9f, kN, stream);
  EXPECT_REL(dy.download(), y, kF32Tol);
  EXPECT_REL(db.download(), z, kF32Tol);
}

// Strided runs of communication buckets: 257 rows of 3 floats, 11 apart in x and 5 in y (the
// floats between rows untouched); the kernel (alpha 0.25) and the backend's copy (alpha 1).
TEST_F(Kernels, ScaleCopyRows) {
  constexpr int64_t rows = 257, cols = 3, ldx = 11, ldy = 5;
  const auto x = random_vec(rows * ldx, 31), y0 = random_vec(rows * ldy, 32);
  for (float alpha : {0.25f, 1.f}) {
    std::vector<float> y = y0;
    cpu::scale_copy_rows(x.data(), ldx, alpha, y.data(), ldy, rows, cols);
    Dev<float> dx(x), dy(y0);
    if (alpha == 1.f)
      make_backend(DeviceType::cuda)->scale_copy_rows(dx, ldx, alpha, dy, ldy, rows, cols);
    else
      cuda::scale_copy_rows(dx, ldx, alpha, dy, ldy, rows, cols, stream);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_REL(dy.download(), y, kF32Tol) << "alpha=" << alpha;
  }
}

TEST_F(Kernels, BiasAddAndGrad) {
  const int64_t rows = 517, cols = 70, ld = 70, used = 45;
  const auto y0 = random_vec(rows * cols, 8), b = random_vec(cols, 9), db0 = random_vec(cols, 10);
  std::vector<float> y = y0, db = db0;
  cpu::add_bias_rows(y.data(), b.data(), rows, cols);
  cpu::bias_grad_rows(y0.data(), db.data(), rows, used, ld);
  Dev<float> dy(y0), dbias(b), ddb(db0);
  const int64_t ws_floats = cuda::column_grad_workspace_floats(rows, used);
  ASSERT_GT(ws_floats, 0) << "517 rows: the rows are cut into slices";
  Dev<float> ws(ws_floats);
  cuda::bias_grad_rows(dy, ddb, rows, used, ld, ws, stream);
  cuda::add_bias_rows(dy.get(), dbias, rows, cols, stream);
  EXPECT_REL(dy.download(), y, kF32Tol);
  EXPECT_REL(ddb.download(), db, kF32Tol);
}

TEST_F(Kernels, Reductions) {
  const int64_t n = 1 << 21;
  auto x = random_vec(n, 11);
  Dev<float> dx(x);
  Dev<double> ws(cuda::reduce_workspace_doubles()), out(2);
  cuda::sum(dx, n, out.get(), ws, stream);
  cuda::sum_squares(dx, n, out.get() + 1, ws, stream);
  const auto got = out.download();
  EXPECT_NEAR(got[0], cpu::sum(x.data(), n), 1e-9 * n);
  EXPECT_NEAR(got[1] / cpu::sum_squares(x.data(), n), 1.0, 1e-12);
  // Deterministic: the same input gives the same bits.
  cuda::sum(dx, n, out.get() + 1, ws, stream);
  const auto again = out.download();
  EXPECT_EQ(again[0], again[1]);

  Dev<int> flag(1);
  cuda::all_finite(dx, n, flag, stream);
  EXPECT_EQ(flag.download()[0], 1);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    x[n - 3] = bad;
    dx.upload(x);
    cuda::all_finite(dx, n, flag, stream);
    EXPECT_EQ(flag.download()[0], 0) << bad;
    EXPECT_FALSE(cpu::all_finite(x.data(), n));
  }
}

// Gradient clipping's norm over many spans (kernels/cuda/backend.cpp): 5,001 spans, so two
// batches are read back; lengths 1 to 2,100 straddle the one-block limit, some of 30,000 and one
// of 2 million take the two-pass grid. Bit for bit the loop over sum_squares, added in order.
TEST_F(Kernels, SumSquaresSpansMatchPerSpanBits) {
  const int64_t n = 1 << 21;
  const auto x = random_vec(n, 41);
  Dev<float> dx(x);
  std::vector<FloatSpan> spans;
  std::vector<int64_t> offsets;
  for (int64_t k = 0, at = 0; k < 5000; ++k) {
    const int64_t len = k % 997 == 0 ? 30000 + k : 1 + (k * 37) % 2100;
    if (at + len > n) at = 0;
    spans.push_back({dx.get() + at, len});
    offsets.push_back(at);
    at += len;
  }
  spans.push_back({dx.get(), n});
  offsets.push_back(0);
  auto backend = make_backend(DeviceType::cuda);
  double loop = 0, host = 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    loop += backend->sum_squares(spans[k].x, spans[k].n);
    host += cpu::sum_squares(x.data() + offsets[k], spans[k].n);
  }
  const double batched = backend->sum_squares_spans(spans);
  EXPECT_EQ(batched, loop);
  EXPECT_NEAR(batched / host, 1.0, 1e-12);
  EXPECT_EQ(backend->sum_squares_spans({}), 0.0);
}

TEST_F(Kernels, SoftmaxRows) {
  for (int V : {10, 257, 5000}) {
    const int64_t rows = 37;
    auto x = random_vec(rows * V, 12, -8.f, 8.f);
    Dev<float> dx(x);
    cpu::softmax_rows(x.data(), rows, V);
    cuda::softmax_rows(dx.get(), rows, V, stream);
    EXPECT_REL(dx.download(), x, kF32Tol) << "V=" << V;
  }
}

TEST_F(Kernels, CrossEntropyFused) {
  for (int V : {10, 1000}) {
    const int64_t rows = 301;
    const auto logits = random_vec(rows * V, 13, -5.f, 5.f);
    auto targets = random_ints(rows, 14, 0, V);
    std::vector<float> dlogits(rows * V);
    int64_t correct = 0;
    const double loss =
        cpu::cross_entropy(logits.data(), targets.data(), dlogits.data(), rows, V, 1.f / rows, &correct);

    Dev<float> dl(logits), dloss(rows), dgrad(rows * V), dloss2(rows);
    Dev<int32_t> dt(targets), dhit(rows);
    Dev<double> ws(cuda::reduce_workspace_doubles()), total(1);
    cuda::cross_entropy(dl, dt, dgrad, dloss, dhit, rows, V, 1.f / rows, stream);  // separate dlogits
    cuda::sum(dloss, rows, total, ws, stream);
    EXPECT_NEAR(total.download()[0] / rows, loss, 1e-5 * loss);
    int64_t hits = 0;
    for (int32_t h : dhit.download()) hits += h;
    EXPECT_EQ(hits, correct);
    EXPECT_REL(dgrad.download(), dlogits, kF32Tol);
    // In place, as the classifier head calls it: the same losses and dlogits as separate.
    cuda::cross_entropy(dl, dt, dl, dloss2, nullptr, rows, V, 1.f / rows, stream);
    EXPECT_EQ(dloss2.download(), dloss.download());
    EXPECT_EQ(dl.download(), dgrad.download());
  }
}

// The step's counters (Backend::take_counters): the loss summed on the device in a fixed
// order (301 rows over 256 threads), the hits, the embedding's bad ids and the non-finite
// count, all in one read that leaves them 0; the same work again gives the same bits.
TEST_F(Kernels, StepCountersGatherTheStepsFindings) {
  const int64_t rows = 301;
  const int V = 1000;
  const auto logits = random_vec(rows * V, 42, -5.f, 5.f);
  const auto targets = random_ints(rows, 43, 0, V);
  int64_t correct = 0;
  const double loss_sum = cpu::cross_entropy_sum(logits.data(), targets.data(), nullptr, rows, V, 0.f, &correct);
  auto backend = make_backend(DeviceType::cuda);
  Dev<float> dl(logits), table(random_vec(5 * 3, 44)), y(4 * 3), grads(std::vector<float>{1.f, NAN, INFINITY, 2.f});
  Dev<int32_t> dt(targets), ids(std::vector<int32_t>{0, 5, -2, 4});
  auto enqueue = [&] {
    backend->cross_entropy(dl, dt, nullptr, rows, V, 1.f / rows);
    backend->embedding_forward(ids, table, 5, y, 4, 3, false);
    backend->count_nonfinite_spans({{grads.get(), 4}, {grads.get() + 1, 1}});
  };
  enqueue();
  const StepCounters c = backend->take_counters();
  EXPECT_NEAR(c.loss_sum / loss_sum, 1.0, 1e-6);
  EXPECT_EQ(c.loss_rows, rows);
  EXPECT_EQ(c.correct, correct);
  EXPECT_EQ(c.bad_ids, 2);
  EXPECT_EQ(c.nonfinite, 3);
  EXPECT_EQ(c.nonfinite_writes, 0);
  const StepCounters zero = backend->take_counters();
  EXPECT_EQ(zero.loss_sum, 0.0);
  EXPECT_EQ(zero.loss_rows + zero.correct + zero.bad_ids + zero.nonfinite, 0);
  enqueue();
  EXPECT_EQ(backend->take_counters().loss_sum, c.loss_sum);
}

// count_nonfinite_spans batches up to 96 spans a launch, cut into chunks of 4096 floats: 200
// spans of sizes around the chunk's (and empty, null and overlapping ones), non-finite values
// at chunk edges and at each span's last element, counted as the host counts each span.
TEST_F(Kernels, NonfiniteCountOverManySpans) {
  const int64_t total = 1 << 20;
  std::vector<float> host = random_vec(total, 45);
  for (int64_t i : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{8191}, int64_t{12288}, total - 1})
    host[i] = i % 2 ? NAN : -INFINITY;
  std::mt19937 rng(46);
  for (int k = 0; k < 300; ++k) host[rng() % total] = INFINITY;
  const int64_t sizes[] = {1, 4095, 4096, 4097, 8192, 12289, 3, 0};
  std::vector<FloatSpan> spans;
  int64_t at = 0;
  for (int k = 0; k < 200; ++k) {
    const int64_t n = sizes[k % 8] + (k % 5 == 0 ? 20000 : 0);
    if (at + n > total) at = k;  // wraps round: later spans overlap earlier ones
    host[at + std::max<int64_t>(n, 1) - 1] = NAN;
    spans.push_back({nullptr, n});
    at += n;
  }
  spans.push_back({nullptr, 50});
  Dev<float> dx(host);
  int64_t expected = 0;
  at = 0;
  for (int k = 0; k < 200; ++k) {  // spans[200] stays null
    FloatSpan& s = spans[k];
    if (at + s.n > total) at = k;
    s.x = dx.get() + at;
    for (int64_t i = at; i < at + s.n; ++i) expected += !std::isfinite(host[i]);
    at += s.n;
  }
  auto backend = make_backend(DeviceType::cuda);
  backend->count_nonfinite_spans(spans);
  EXPECT_EQ(backend->take_counters().nonfinite, expected);
  EXPECT_FALSE(backend->all_finite_spans(spans));
  Dev<float> clean(random_vec(total, 47));
  EXPECT_TRUE(backend->all_finite_spans({{clean.get(), total}, {clean.get() + 5, 4097}}));
}

/// Row-major (rows, cols) matrix with leading dimension ld >= cols, random.
std::vector<float> matrix(int rows, int ld, uint32_t seed) { return random_vec(static_cast<size_t>(rows) * ld, seed); }

TEST_F(Kernels, SgemmAllTransposes) {
  const int M = 67, N = 45, K = 129, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const auto A = matrix(ta ? K : M, lda, 15), B = matrix(tb ? N : K, ldb, 16);
      auto C = matrix(M, ldc, 17);
      Dev<float> dA(A), dB(B), dC(C);
      cpu::sgemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, C.data(), ldc);
      cuda::sgemm(ta, tb, M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, dC, ldc, stream);
      EXPECT_REL(dC.download(), C, kF32Tol) << "trans_a=" << ta << " trans_b=" << tb;
    }
}

// [device] precision = "tf32" / "bf16": the GEMM on tensor cores matches the CPU GEMM of the
// operands rounded as they read them (TF32: 10 mantissa bits, nearest, ties away; bf16: 7 bits,
// nearest even) to fp32 rounding of the sums, and is told apart from the fp32 GEMM (about 1e-3
// relative for TF32, 1e-2 for bf16); GemmMath::fp32 gives fp32 back. Batched as the
// convolutions call it (a shared weight, stride 0), and transposed as the linear layers do.
// On a device, cuBLAS may run the bf16 mode on TF32 kernels: the bf16 reference then differs
// by about the bf16 rounding, which the tolerance stated below covers.
void expect_rounded_gemm(cuda::GemmMath math, float (*round)(float), double tol, double apart, cudaStream_t stream) {
  const int M = 33, N = 20, K = 257, batch = 3;
  for (bool ta : {false, true}) {
    const int lda = ta ? M : K;
    const auto A = matrix(batch * (ta ? K : M), lda, 18), B = matrix(K, N, 19), C0 = matrix(batch * M, N, 20);
    auto rounded = [round](std::vector<float> v) {
      for (float& x : v) x = round(x);
      return v;
    };
    const auto Ar = rounded(A), Br = rounded(B);
    auto want = C0, plain = C0;
    const int64_t sa = int64_t{M} * K, sc = int64_t{M} * N;
    for (int i = 0; i < batch; ++i) {
      cpu::sgemm(ta, false, M, N, K, 1.f, Ar.data() + i * sa, lda, Br.data(), N, 0.5f, want.data() + i * sc, N);
      cpu::sgemm(ta, false, M, N, K, 1.f, A.data() + i * sa, lda, B.data(), N, 0.5f, plain.data() + i * sc, N);
    }
    Dev<float> dA(A), dB(B), dC(C0);
    cuda::set_gemm_math(math);
    cuda::sgemm_strided_batched(ta, false, M, N, K, 1.f, dA, lda, sa, dB, N, 0, 0.5f, dC, N, sc, batch, stream);
    const auto got = dC.download();
    cuda::set_gemm_math(cuda::GemmMath::fp32);
    EXPECT_REL(got, want, tol) << cuda::gemm_math_name(math) << " trans_a=" << ta;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double{got[i]} - plain[i]));
    EXPECT_GT(worst, apart) << cuda::gemm_math_name(math) << " gave the fp32 result: the operands were not rounded";
    dC.upload(C0);
    cuda::sgemm_strided_batched(ta, false, M, N, K, 1.f, dA, lda, sa, dB, N, 0, 0.5f, dC, N, sc, batch, stream);
    EXPECT_REL(dC.download(), plain, kF32Tol);
  }
}

float tf32_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}

float bf16_round(float x) { return round_bf16(std::vector<float>{x})[0]; }

// TF32: within 1e-5 of the round-to-nearest reference on the emulator; a device's kernels may
// truncate the operands instead (cuBLAS documents the mode, not the rounding): kTf32Tol.
TEST_F(Kernels, SgemmTf32RoundsTheOperands) {
  expect_rounded_gemm(cuda::GemmMath::tf32, tf32_round, kEmulated ? kF32Tol : kTf32Tol, 1e-4, stream);
}

// bf16: within 1e-5 of the bf16 reference on the emulator; a device's TF32 kernels would sit
// about 2^-9 of the operands away from it, and kBf16Tol states what the mode promises.
TEST_F(Kernels, SgemmBf16RoundsTheOperands) {
  expect_rounded_gemm(cuda::GemmMath::bf16, bf16_round, kEmulated ? kF32Tol : kBf16Tol, 1e-3, stream);
}

TEST_F(Kernels, SgemmStridedBatched) {
  const int M = 16, N = 24, K = 32, batch = 5;
  const auto A = matrix(M * batch, K, 18), B = matrix(K, N, 19);  // B shared (stride 0)
  std::vector<float> C(static_cast<size_t>(M) * N * batch);
  for (int i = 0; i < batch; ++i)
    cpu::sgemm(false, false, M, N, K, 1.f, A.data() + i * M * K, K, B.data(), N, 0.f, C.data() + i * M * N, N);
  Dev<float> dA(A), dB(B), dC(C.size());
  cuda::sgemm_strided_batched(false, false, M, N, K, 1.f, dA, K, M * K, dB, N, 0, 0.f, dC, N, M * N, batch, stream);
  EXPECT_REL(dC.download(), C, kF32Tol);
}

TEST_F(Kernels, Bf16Gemm) {
  const int M = 64, N = 48, K = 256;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int lda = ta ? M : K, ldb = tb ? K : N;
      const auto A = round_bf16(matrix(ta ? K : M, lda, 20)), B = round_bf16(matrix(tb ? N : K, ldb, 21));
      std::vector<float> C(static_cast<size_t>(M) * N);
      cpu::sgemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N);
      DevBf16 dA(A), dB(B), dC16(C.size());
      Dev<float> dC32(C.size());
      cuda::gemm(ta, tb, M, N, K, 1.f, dA, lda, dB, ldb, 0.f, dC16.get(), N, stream);
      cuda::gemm(ta, tb, M, N, K, 1.f, dA, lda, dB, ldb, 0.f, dC32.get(), N, stream);
      EXPECT_REL(dC16.download(), C, kBf16Tol);
      EXPECT_REL(dC32.download(), C, kBf16Tol);
    }
}

TEST_F(Kernels, Bf16Elementwise) {
  const auto x = round_bf16(random_vec(kN, 22, -3.f, 3.f)), g = round_bf16(random_vec(kN, 23));
  std::vector<float> relu(kN), relu_dx(kN), gelu(kN), gelu_dx(kN), sum(kN), axpy = g;
  cpu::relu_forward(x.data(), relu.data(), kN);
  cpu::relu_backward(relu.data(), g.data(), relu_dx.data(), kN, false);
  cpu::gelu_forward(x.data(), gelu.data(), kN);
  cpu::gelu_backward(x.data(), g.data(), gelu_dx.data(), kN);
  cpu::add(x.data(), g.data(), sum.data(), kN);
  cpu::axpy(0.5f, x.data(), axpy.data(), kN);
  cpu::scale(axpy.data(), 2.f, kN);
  DevBf16 dx(x), dg(g), out(kN), out2(kN), acc(g);
  cuda::relu_forward(dx, out, kN, stream);
  cuda::relu_backward(out, dg, out2, kN, false, stream);
  EXPECT_REL(out.download(), relu, kBf16Tol);
  EXPECT_REL(out2.download(), relu_dx, kBf16Tol);
  cuda::gelu_forward(dx, out, kN, stream);
  cuda::gelu_backward(dx, dg, out2, kN, stream);
  EXPECT_REL(out.download(), gelu, kBf16Tol);
  EXPECT_REL(out2.download(), gelu_dx, kBf16Tol);
  cuda::add(dx, dg, out, kN, stream);
  cuda::axpy(0.5f, dx, acc, kN, stream);
  cuda::scale(acc.get(), 2.f, kN, stream);
  EXPECT_REL(out.download(), sum, kBf16Tol);
  EXPECT_REL(acc.download(), axpy, kBf16Tol);
}

TEST_F(Kernels, Bf16ConvertSoftmaxReduce) {
  const int64_t rows = 33;
  const int V = 300;
  const auto x = random_vec(rows * V, 24, -4.f, 4.f);
  auto xr = round_bf16(x);
  Dev<float> d32(x), back(x.size());
  DevBf16 d16(x.size());
  cuda::to_bf16(d32, d16, rows * V, stream);
  cuda::to_f32(d16, back, rows * V, stream);
  EXPECT_EQ(back.download(), xr);  // same rounding (nearest even) on both sides
  Dev<float> in_place(x);          // kept copy and the floats rounded in place: both xr
  DevBf16 kept(x.size());
  cuda::round_keep_bf16(in_place, kept, rows * V, stream);
  EXPECT_EQ(in_place.download(), xr);
  EXPECT_EQ(kept.download(), xr);
  const int64_t cols = 7;  // the leading columns of each row (attention output's kept heads)
  std::vector<float> prefix(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) prefix[r * cols + c] = xr[r * V + c];
  DevBf16 cols16(prefix.size());
  cuda::to_bf16_columns(d32, rows, V, cols, cols16, stream);
  EXPECT_EQ(cols16.download(), prefix);

  Dev<double> ws(cuda::reduce_workspace_doubles()), out(1);
  cuda::sum_squares(d16.get(), rows * V, out, ws, stream);
  EXPECT_NEAR(out.download()[0] / cpu::sum_squares(xr.data(), rows * V), 1.0, 1e-6);

  cpu::softmax_rows(xr.data(), rows, V);
  cuda::softmax_rows(d16.get(), rows, V, stream);
  EXPECT_REL(d16.download(), xr, kBf16Tol);
}

}  // namespace
}  // namespace subdp::gpu_test
