// The CPU backend as a template over how its memory is reached: every Backend operation
// forwards to the kernels/cpu function of the same name (OpenBLAS + OpenMP), so the arithmetic
// is exactly the kernels' own. `Access` supplies the memory and a scope opened around every
// operation: for the CPU backend (HostAccess) the memory is the host's and the scope is empty;
// the fenced test device (kernels/fenced) opens its otherwise inaccessible pool.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "engine/core/backend.h"
#include "engine/core/device_memory.h"
#include "engine/core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/winograd.h"

namespace subdp::cpu {

/// Host memory, always open: the CPU backend's access policy.
struct HostAccess {
  struct Scope {};
  Scope open() { return {}; }
  void open_for_collective() {}
  void close_for_collective() {}
  std::shared_ptr<DeviceMemory> memory() { return host_memory(); }
  std::string name() const { return "cpu"; }
};

template <class Access>
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Access access = Access()) : access_(std::move(access)) {}
  std::string name() const override { return access_.name(); }
  std::string describe() const override { return blas_description(); }
  void configure(int threads, int winograd_tile, Precision) override {
    set_num_threads(threads);
    set_winograd_max_tile(winograd_tile);
  }

  std::shared_ptr<DeviceMemory> memory() override { return access_.memory(); }
  void to_device(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    auto in = access_.open();
    std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    auto in = access_.open();
    std::memset(dst, 0, bytes);
  }
  void open_for_collective() override { access_.open_for_collective(); }
  void close_for_collective() override { access_.close_for_collective(); }

  void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
             float beta, float* C, int ldc) override {
    auto in = access_.open();
    cpu::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void fill(float* x, float value, int64_t n) override {
    auto in = access_.open();
    if (value == 0.f)
      std::memset(x, 0, sizeof(float) * n);  // +0.0: the bytes of a zeroed buffer
    else
      std::fill(x, x + n, value);
  }
  void copy(const float* src, float* dst, int64_t n) override {
    auto in = access_.open();
    std::memcpy(dst, src, sizeof(float) * n);
  }

  void relu_forward(const float* x, float* y, int64_t n) override {
    auto in = access_.open();
    cpu::relu_forward(x, y, n);
  }
  void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate) override {
    auto in = access_.open();
    cpu::relu_backward(y, dy, dx, n, accumulate);
  }
  void gelu_forward(const float* x, float* y, int64_t n) override {
    auto in = access_.open();
    cpu::gelu_forward(x, y, n);
  }
  void gelu_forward_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, float* y) override {
    auto in = access_.open();
    cpu::gelu_forward_columns(x, rows, ld, cols, y);
  }
  void swiglu_forward(const float* g, const float* u, float* h, int64_t n) override {
    auto in = access_.open();
    cpu::swiglu_forward(g, u, h, n);
  }
  void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) override {
    auto in = access_.open();
    cpu::swiglu_backward(g, u, dh, dg, du, n);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override {
    auto in = access_.open();
    cpu::gelu_backward(x, dy, dx, n);
  }
  void add(const float* a, const float* b, float* y, int64_t n) override {
    auto in = access_.open();
    cpu::add(a, b, y, n);
  }
  void axpy(float alpha, const float* x, float* y, int64_t n) override {
    auto in = access_.open();
    cpu::axpy(alpha, x, y, n);
  }
  void scale_copy(const float* x, float alpha, float* y, int64_t n) override {
    auto in = access_.open();
    cpu::scale_copy(x, alpha, y, n);
  }
  void scale(float* x, float alpha, int64_t n) override {
    auto in = access_.open();
    cpu::scale(x, alpha, n);
  }
  void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows,
                       int64_t cols) override {
    auto in = access_.open();
    cpu::scale_copy_rows(x, ldx, alpha, y, ldy, rows, cols);
  }
  void copy_columns(const float* x, int64_t rows, int64_t width, int64_t cols, float* out) override {
    auto in = access_.open();
    cpu::copy_columns(x, rows, width, cols, out);
  }
  double sum_squares(const float* x, int64_t n) override {
    auto in = access_.open();
    return cpu::sum_squares(x, n);
  }
  bool all_finite(const float* x, int64_t n) override {
    auto in = access_.open();
    return cpu::all_finite(x, n);
  }
  void count_nonfinite_spans(const std::vector<FloatSpan>& spans) override {
    auto in = access_.open();
    for (const FloatSpan& s : spans) counters_.nonfinite += cpu::count_nonfinite(s.x, s.n);
  }
  void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) override {
    auto in = access_.open();
    cpu::add_bias_rows(y, b, rows, cols);
  }
  void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld) override {
    auto in = access_.open();
    cpu::bias_grad_rows(dy, db, rows, cols_used, ld);
  }

  void embedding_forward(const int32_t* ids, const float* table, int64_t num, float* y, int64_t rows, int64_t C,
                         bool accumulate) override {
    auto in = access_.open();
    counters_.bad_ids += cpu::embedding_forward(ids, table, num, y, rows, C, accumulate);
  }
  void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num, int64_t rows,
                          int64_t C) override {
    auto in = access_.open();
    cpu::embedding_backward(ids, dy, dtable, num, rows, C);
  }

  void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V,
                     float scale) override {
    auto in = access_.open();
    int64_t correct = 0;
    counters_.loss_sum += cpu::cross_entropy_sum(logits, targets, dlogits, rows, V, scale, &correct);
    counters_.loss_rows += rows;
    counters_.correct += correct;
  }

  void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                         float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                         float eps, bool relu) override {
    auto in = access_.open();
    cpu::batchnorm_forward(x, gamma, beta, y, mean, rstd, running_mean, running_var, N, C, HW, training, momentum, eps,
                           relu);
  }
  void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                          float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels) override {
    auto in = access_.open();
    cpu::batchnorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, N, C, HW, grad_channels);
  }
  void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C,
                       float eps) override {
    auto in = access_.open();
    cpu::rmsnorm_forward(x, gamma, y, rstd, rows, C, eps);
  }
  void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C) override {
    auto in = access_.open();
    cpu::rmsnorm_apply(x, gamma, rstd, y, rows, C);
  }
  void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                        float* dgamma, int64_t rows, int C) override {
    auto in = access_.open();
    cpu::rmsnorm_backward(x, gamma, rstd, dy, dx, dgamma, rows, C);
  }
  void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                   bool inverse) override {
    auto in = access_.open();
    cpu::rope_rotate(x, rows, T, ld, heads, hd, cos, sin, inverse);
  }
  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                         int64_t rows, int C, float eps) override {
    auto in = access_.open();
    cpu::layernorm_forward(x, gamma, beta, y, mean, rstd, rows, C, eps);
  }
  void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                       float* y, int64_t rows, int C) override {
    auto in = access_.open();
    cpu::layernorm_apply(x, gamma, beta, mean, rstd, y, rows, C);
  }
  void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                          float* dx, float* dgamma, float* dbeta, int64_t rows, int C) override {
    auto in = access_.open();
    cpu::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, C);
  }

  int64_t conv2d_workspace_floats(const ConvShape& s) override { return cpu::conv2d_workspace_floats(s); }
  void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) override {
    auto in = access_.open();
    cpu::conv2d_forward(s, x, w, y, ws);
  }
  void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int dw_cout, int dw_cin, float* ws, bool accumulate_dx) override {
    auto in = access_.open();
    cpu::conv2d_backward(s, x, w, dy, dx, dw, dw_cout, dw_cin, ws, accumulate_dx);
  }
  void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW) override {
    auto in = access_.open();
    cpu::global_avg_pool_forward(x, y, N, C, HW);
  }
  void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW) override {
    auto in = access_.open();
    cpu::global_avg_pool_backward(dy, dx, N, C, HW);
  }

  int64_t attention_workspace_floats(const AttentionShape& s, int slots) override {
    return cpu::attention_workspace_floats(s, slots);
  }
  // The CPU keeps no statistics (attention_keeps_statistics is false): lse and kept are null.
  void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y, float* lse, float* ws,
                         int slots) override {
    SUBDP_ASSERT(lse == nullptr);
    auto in = access_.open();
    cpu::attention_forward(s, qkv, att, y, ws, slots);
  }
  void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy,
                          const AttentionKept* kept, float* dqkv, float* ws, int slots) override {
    SUBDP_ASSERT(kept == nullptr);
    auto in = access_.open();
    cpu::attention_backward(s, qkv, att, dy, dqkv, ws, slots);
  }

  void sgd_update_runs(const std::vector<UpdateRun>& runs, float lr, float momentum, float weight_decay, bool nesterov,
                       bool first) override {
    auto in = access_.open();
    for (const UpdateRun& r : runs)
      counters_.nonfinite_writes += cpu::sgd_update(r.w, r.g, r.s0, r.n, lr, momentum, weight_decay, nesterov, first);
  }
  void adamw_update_runs(const std::vector<UpdateRun>& runs, float step_size, float bc2_sqrt, float decay, float eps,
                         float beta1, float beta2) override {
    auto in = access_.open();
    for (const UpdateRun& r : runs)
      counters_.nonfinite_writes +=
          cpu::adamw_update(r.w, r.g, r.s0, r.s1, r.n, step_size, bc2_sqrt, decay, eps, beta1, beta2);
  }
  StepCounters take_counters() override { return std::exchange(counters_, StepCounters{}); }
  void set_step_flags(double stop) override {
    counters_.flags[0] = counters_.nonfinite > 0 || !std::isfinite(counters_.loss_sum) ? 1.0 : 0.0;
    counters_.flags[1] = stop;
    counters_.flags[2] = counters_.nonfinite_writes > 0 ? 1.0 : 0.0;
  }
  double* step_flags() override { return counters_.flags; }

 private:
  Access access_;
  StepCounters counters_;  // since the last take_counters
};

}  // namespace subdp::cpu
