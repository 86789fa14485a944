// GEMM rates of GPT-2 small's linear layers on the CUDA backend's own calls, to decide what
// bf16 operands stored in memory would gain over what [device] precision = "bf16" runs today
// (float32 operands that cuBLAS rounds to bf16 as it loads them, CUBLAS_COMPUTE_32F_FAST_16BF;
// docs/architecture.md, issue 41).
//   subdp_gpu_gemm_bench [--small] [--reps N]
// For each layer (qkv, proj, fc, fc2, the tied head) and pass (forward y = x W^T, the input
// gradient dx = dy W, the weight gradient dW = dy^T x) it times, on the default stream:
//   operands f32, math fp32 / tf32 / bf16: cuda::sgemm in each set_gemm_math mode (what subdp
//     runs in precision fp32 / tf32 / bf16), and the forward as cuda::linear_lt with the bias
//     epilogue (what Linear::forward runs);
//   operands bf16, math bf16: cuda::gemm over bf16 copies (cublasGemmEx, fp32 sums), out f32
//     or bf16: what stored bf16 operands would run;
//   convert: cuda::to_bf16 of the pass's activation operand (the pass's first operand, rows x
//     width floats): what converting on the fly would add per GEMM.
// And causal attention at GPT-2 small's shape (B 8, T 1024, H 12, head width 64; --small: B 2,
// T 128, H 2, width 64), layer "attention", pass forward, backward (from the forward's kept
// log-sum-exp and output, as training runs it) or backward-recompute (the forward run again
// for each row's log-sum-exp and delta): CUDA cores in float32 (attention.cu, math fp32: what
// precision fp32 / tf32 run) and tensor cores (attention_tc.cu, math bf16); rate in TFLOP/s
// of the causal products, 2 B H T^2 hd forward and 2.5 times that backward
// (FlashAttention-2's count; the backward's own recomputation not counted).
// Time: the mean of N back-to-back calls between two cudaDeviceSynchronize, by the host clock,
// after 2 unmeasured calls (heuristics, handles). GPT-2 small: rows = B T = 8 x 1024, C = 768,
// V = 50304; --small: rows 128, C 64, V 512 (the emulated device's rehearsal).
// Output, CSV on stdout: layer,pass,M,N,K,operands,math,out,ms,rate,unit (TFLOP/s: 2 M N K per
// call; GB/s for convert rows, the 6 bytes an element reads and writes). Exit 0; 1 naming a
// failed call (no device included); 2 on bad usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernels.h"

namespace {

using subdp::cuda::bf16;
using subdp::cuda::GemmMath;

/// Device array of n elements of T, freed on every path out.
template <class T>
struct DeviceArray {
  explicit DeviceArray(size_t n) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* p = nullptr;
};

/// n floats uniform in [-1, 1) (seeded: every run the same), uploaded: a period of 2^20 values
/// repeated (the head's 412 M would take seconds to draw; the GEMMs' time does not depend on them).
void fill_random(float* device, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> period(size_t{1} << 20);
  for (float& v : period) v = u(rng);
  for (size_t at = 0; at < n; at += period.size()) {
    const size_t count = std::min(period.size(), n - at);
    CUDA_CHECK(cudaMemcpy(device + at, period.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
}

/// Mean seconds of one call to `f` over `reps` calls, after 2 unmeasured ones.
double seconds_per_call(const std::function<void()>& f, int reps) {
  f();
  f();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  CUDA_CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
}

struct Layer {
  const char* name;
  int in, out;
};

/// One row-major GEMM C (M, N) = op(A) (M, K) op(B) (K, N): the pass's operands and flags.
struct Pass {
  const char* name;
  bool ta, tb;
  int M, N, K;
  int lda, ldb, ldc;
  int64_t a_elems;  // A's size, the activation operand converted by the "convert" row
};

/// One CSV row; rate in TFLOP/s for a GEMM, GB/s for a conversion.
void print_row(const Layer& l, const Pass& p, const char* operands, const char* math, const char* out, double s,
               double rate) {
  const char* unit = std::strcmp(math, "convert") == 0 ? "GB/s" : "TFLOP/s";
  std::printf("%s,%s,%d,%d,%d,%s,%s,%s,%.4f,%.2f,%s\n", l.name, p.name, p.M, p.N, p.K, operands, math, out, s * 1e3,
              rate, unit);
  std::fflush(stdout);
}

/// Times every mode of one layer's three passes.
void bench_layer(const Layer& l, int rows, int reps) {
  const int64_t x_n = int64_t{rows} * l.in, w_n = int64_t{l.in} * l.out, y_n = int64_t{rows} * l.out;
  DeviceArray<float> x(x_n), w(w_n), b(l.out), dy(y_n), y(y_n), dx(x_n), dw(w_n);
  DeviceArray<bf16> xb(x_n), wb(w_n), dyb(y_n), yb(y_n);
  DeviceArray<unsigned char> workspace(subdp::cuda::kLtWorkspaceBytes);  // the backend's cuBLASLt workspace
  const subdp::cuda::LtWorkspace lt_ws{workspace.p, subdp::cuda::kLtWorkspaceBytes};
  fill_random(x.p, x_n, 1);
  fill_random(w.p, w_n, 2);
  fill_random(b.p, l.out, 3);
  fill_random(dy.p, y_n, 4);
  subdp::cuda::to_bf16(x.p, xb.p, x_n, nullptr);
  subdp::cuda::to_bf16(w.p, wb.p, w_n, nullptr);
  subdp::cuda::to_bf16(dy.p, dyb.p, y_n, nullptr);
  const Pass passes[] = {
      {"forward", false, true, rows, l.out, l.in, l.in, l.in, l.out, x_n},
      {"dx", false, false, rows, l.in, l.out, l.out, l.in, l.in, y_n},
      {"dW", true, false, l.out, l.in, rows, l.out, l.in, l.in, y_n},
  };
  // Operands per pass: (A, B, C) as floats and as bf16.
  const float* a32[] = {x.p, dy.p, dy.p};
  const float* b32[] = {w.p, w.p, x.p};
  float* c32[] = {y.p, dx.p, dw.p};
  const bf16* a16[] = {xb.p, dyb.p, dyb.p};
  const bf16* b16[] = {wb.p, wb.p, xb.p};
  bf16* c16[] = {yb.p, reinterpret_cast<bf16*>(dx.p), reinterpret_cast<bf16*>(dw.p)};
  for (int i = 0; i < 3; ++i) {
    const Pass& p = passes[i];
    const double flops = 2.0 * p.M * p.N * p.K;
    for (GemmMath m : {GemmMath::fp32, GemmMath::tf32, GemmMath::bf16}) {
      subdp::cuda::set_gemm_math(m);
      const double s = seconds_per_call(
          [&] {
            subdp::cuda::sgemm(p.ta, p.tb, p.M, p.N, p.K, 1.f, a32[i], p.lda, b32[i], p.ldb, 0.f, c32[i], p.ldc,
                               nullptr);
          },
          reps);
      print_row(l, p, "f32", subdp::cuda::gemm_math_name(m), "f32", s, flops / s / 1e12);
      if (i != 0) continue;
      bool fused = true;
      const double sl = seconds_per_call(
          [&] { fused = subdp::cuda::linear_lt(x.p, w.p, b.p, y.p, nullptr, rows, l.in, l.out, lt_ws, nullptr); },
          reps);
      if (fused) print_row(l, p, "f32", subdp::cuda::gemm_math_name(m), "f32+bias (linear_lt)", sl, flops / sl / 1e12);
    }
    subdp::cuda::set_gemm_math(GemmMath::fp32);
    const double s32 = seconds_per_call(
        [&] {
          subdp::cuda::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.f, a16[i], p.lda, b16[i], p.ldb, 0.f, c32[i], p.ldc, nullptr);
        },
        reps);
    print_row(l, p, "bf16", "bf16", "f32", s32, flops / s32 / 1e12);
    const double s16 = seconds_per_call(
        [&] {
          subdp::cuda::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.f, a16[i], p.lda, b16[i], p.ldb, 0.f, c16[i], p.ldc, nullptr);
        },
        reps);
    print_row(l, p, "bf16", "bf16", "bf16", s16, flops / s16 / 1e12);
    const double sc =
        seconds_per_call([&] { subdp::cuda::to_bf16(a32[i], const_cast<bf16*>(a16[i]), p.a_elems, nullptr); }, reps);
    print_row(l, p, "f32->bf16", "convert", "bf16", sc, 6.0 * p.a_elems / sc / 1e9);
  }
}

/// Times attention's forward and backward at shape s, on CUDA cores and on tensor cores (where
/// the shape allows them): CSV rows of ms per call and TFLOP/s of the causal products. The
/// backward as training runs it ("backward": from the forward's kept log-sum-exp and output)
/// and with its statistics recomputed ("backward-recompute": a layer keeping only some of its
/// output's columns), both counted as 2.5 forwards (FlashAttention-2's convention).
void bench_attention(const subdp::cuda::AttentionShape& s, int reps) {
  const int64_t qkv_n = int64_t{s.B} * s.T * s.qkv_width(), y_n = int64_t{s.B} * s.T * s.width();
  DeviceArray<float> qkv(qkv_n), y(y_n), dy(y_n), dqkv(qkv_n), ws(subdp::cuda::attention_tc_workspace_floats(s));
  DeviceArray<float> lse(int64_t{s.B} * s.H * s.T);
  fill_random(qkv.p, qkv_n, 5);
  fill_random(dy.p, y_n, 6);
  const Layer l{"attention", s.hd, s.hd};
  const double flops = 2.0 * s.B * s.H * static_cast<double>(s.T) * s.T * s.hd;
  const Pass forward{"forward", false, true, s.T, s.T, s.hd, 0, 0, 0, 0};
  const Pass backward{"backward", false, false, s.T, s.T, s.hd, 0, 0, 0, 0};
  const Pass recompute{"backward-recompute", false, false, s.T, s.T, s.hd, 0, 0, 0, 0};
  const subdp::AttentionKept kept{lse.p, y.p, false, 1.f};
  const auto rows = [&](const char* math, auto&& fwd, auto&& bwd) {
    const double f = seconds_per_call([&] { fwd(lse.p); }, reps);  // keeping lse, as training does
    print_row(l, forward, "f32", math, "f32", f, flops / f / 1e12);
    const double b = seconds_per_call([&] { bwd(&kept); }, reps);
    print_row(l, backward, "f32", math, "f32", b, 2.5 * flops / b / 1e12);
    const double r = seconds_per_call([&] { bwd(nullptr); }, reps);
    print_row(l, recompute, "f32", math, "f32", r, 2.5 * flops / r / 1e12);
  };
  rows(
      "fp32", [&](float* keep) { subdp::cuda::attention_forward(s, qkv.p, y.p, keep, nullptr); },
      [&](const subdp::AttentionKept* k) {
        subdp::cuda::attention_backward(s, qkv.p, dy.p, dqkv.p, ws.p, nullptr, k);
      });
  if (!subdp::cuda::attention_tc_supported(s)) return;  // the _tc calls would launch nothing: no rows
  rows(
      "bf16", [&](float* keep) { subdp::cuda::attention_forward_tc(s, qkv.p, y.p, keep, nullptr, true); },
      [&](const subdp::AttentionKept* k) {
        subdp::cuda::attention_backward_tc(s, qkv.p, dy.p, dqkv.p, ws.p, nullptr, k);
      });
}

int run(int argc, char** argv) {
  bool small = false;
  int reps = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--small") == 0) {
      small = true;
    } else if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) >= 1) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: subdp_gpu_gemm_bench [--small] [--reps N >= 1] (got '%s')\n", argv[i]);
      return 2;
    }
  }
  const int rows = small ? 128 : 8 * 1024, C = small ? 64 : 768, V = small ? 512 : 50304;
  const Layer layers[] = {{"qkv", C, 3 * C}, {"proj", C, C}, {"fc", C, 4 * C}, {"fc2", 4 * C, C}, {"head", C, V}};
  std::printf("layer,pass,M,N,K,operands,math,out,ms,rate,unit\n");
  for (const Layer& l : layers) bench_layer(l, rows, reps);
  bench_attention(small ? subdp::cuda::AttentionShape{2, 128, 2, 64} : subdp::cuda::AttentionShape{8, 1024, 12, 64},
                  reps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "subdp_gpu_gemm_bench: %s\n", e.what());
    return 1;
  }
}
