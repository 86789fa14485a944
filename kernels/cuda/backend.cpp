// The CUDA backend: the Backend interface on one GPU, float32. Tensors live in one cudaMalloc
// reservation cut by ArenaAllocator; every operation is enqueued on the backend's stream, and
// the calls that return a host value (norms, finiteness, the loss, counts of non-finite values
// or out-of-range ids) and the host transfers synchronise it. Kernels are kernels/cuda's twins
// of the CPU kernels (same layouts and semantics, fp32 rounding instead of bit equality), GEMMs
// go through cuBLAS. Written against the fenced test device's wiring; it has never run on a
// GPU (docs/architecture.md).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/watchdog.h"
#include "engine/core/backend.h"
#include "engine/core/device_memory.h"
#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/core/tensor.h"
#include "kernels/cuda/backend_kernels.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_pool.h"
#include "kernels/cuda/kernels.h"

namespace subdp {

namespace {

/// Bytes of the device reservation: SUBDP_CUDA_POOL_GB GiB, else 90 % of the free memory.
size_t pool_bytes() {
  if (const auto bytes = pool_bytes_from_env("SUBDP_CUDA_POOL_GB")) return *bytes;
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes / 10 * 9;
}

/// One cudaMalloc, cut into 256-byte aligned blocks (no cudaMalloc per tensor, which would
/// synchronise the device).
class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(size_t bytes, cudaStream_t stream) : arena_(bytes), stream_(stream) {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    SUBDP_CHECK(bytes <= free_bytes,
                "the device pool of {:.3f} GiB (SUBDP_CUDA_POOL_GB, else 90 % of the free memory) does not fit: the "
                "device has {:.3f} GiB free of {:.3f} GiB; lower SUBDP_CUDA_POOL_GB or free the device",
                bytes / 1073741824.0, free_bytes / 1073741824.0, total / 1073741824.0);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), bytes));
  }
  ~CudaMemory() override { cudaFree(base_); }  // at exit: an error here has nobody to tell
  void* allocate(size_t bytes) override {
    char* p = base_ + arena_.allocate(bytes);
#if defined(SUBDP_CUDA_EMULATED)
    // The emulated device fills every block it hands out with 0xff bytes (NaN), in stream
    // order: a kernel that reads memory nothing wrote gets NaN, as it would get leftovers of
    // an earlier tensor on a GPU, instead of a plausible value that depends on history.
    CUDA_CHECK(cudaMemsetAsync(p, 0xff, bytes, stream_));
#endif
    return p;
  }
  void deallocate(void* p, size_t) override { arena_.release(static_cast<char*>(p) - base_); }
  bool host_accessible() const override { return false; }
  /// Bytes of the pool not in live blocks (fragmentation aside, what an allocation can get).
  int64_t free_bytes() const { return static_cast<int64_t>(arena_.capacity() - arena_.used()); }

 private:
  char* base_ = nullptr;
  cuda::ArenaAllocator arena_;
  cudaStream_t stream_;  // the backend's: the arena reuses a block in its stream order
};

/// Page-locked host memory (cudaMallocHost) for staging buffers: host code reads and writes it,
/// and copies from it to the device run by DMA.
class PinnedMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 64 : bytes));
    return p;
  }
  void deallocate(void* p, size_t) override { cudaFreeHost(p); }  // at exit: nobody to tell
  bool host_accessible() const override { return true; }
};

/// The memory of a planning backend: dry runs count bytes and never allocate.
class PlanningMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes) override {
    throw Error(fmt::format("the CUDA planning backend allocates nothing ({} bytes asked)", bytes));
  }
  void deallocate(void*, size_t) override {}
  bool host_accessible() const override { return false; }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(bool planning) {
    if (planning) {  // sizes only: no device is touched
      memory_ = std::make_shared<PlanningMemory>();
      return;
    }
    // The device already chosen: the NCCL communicator, made first, picks the local rank's;
    // else device 0, the runtime's default.
    CUDA_CHECK(cudaGetDevice(&device_));
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    memory_ = std::make_shared<CudaMemory>(pool_bytes(), stream_);
    staging_ = std::make_shared<PinnedMemory>();
  }
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // teardown: errors have nobody to tell
    release_scratch();
    release_chunks();
    if (lt_workspace_ != nullptr) {
      cuda::set_gemm_workspace(stream_, {});
      memory_->deallocate(lt_workspace_, cuda::kLtWorkspaceBytes);
      MemoryTracker::global().on_free(MemCategory::workspace, static_cast<int64_t>(cuda::kLtWorkspaceBytes));
    }
    if (counters_ != nullptr) {
      memory_->deallocate(counters_, kCountersBytes);
      if (counters_tracked_) MemoryTracker::global().on_free(MemCategory::workspace, kCountersBytes);
    }
    if (read_back_ != nullptr) staging_memory()->deallocate(read_back_, kReadBackBytes);
    for (cudaEvent_t e : stamps_)
      if (e != nullptr) cudaEventDestroy(e);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  std::string describe() const override {
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
    return fmt::format("{} #{} (sm_{}{}, {:.1f} GiB), cuBLAS {}", p.name, device_, p.major, p.minor,
                       p.totalGlobalMem / double(size_t{1} << 30), cuda::gemm_math_name(cuda::gemm_math()));
  }
  Precision precision() const override {
    switch (cuda::gemm_math()) {
      case cuda::GemmMath::bf16: return Precision::bf16;
      case cuda::GemmMath::tf32: return Precision::tf32;
      case cuda::GemmMath::fp32: break;
    }
    return Precision::fp32;
  }
  void configure(int, int, Precision precision) override {
    cuda::set_gemm_math(precision == Precision::bf16   ? cuda::GemmMath::bf16
                        : precision == Precision::tf32 ? cuda::GemmMath::tf32
                                                       : cuda::GemmMath::fp32);
  }

  std::shared_ptr<DeviceMemory> memory() override { return memory_; }
  std::shared_ptr<DeviceMemory> staging_memory() override { return staging_ ? staging_ : host_memory(); }
  void to_device(void* dst, const void* src, size_t bytes) override { copy_sync(dst, src, bytes); }
  void to_device_async(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  void to_host(void* dst, const void* src, size_t bytes) override { copy_sync(dst, src, bytes); }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void zero(void* dst, size_t bytes) override { CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_)); }
  // A collective's library reads the buffers on its own stream: finish ours first.
  void open_for_collective() override { synchronize(); }
  void close_for_collective() override {}
  // The rank's pool holds the device memory it may use (SUBDP_CUDA_POOL_GB, else most of the
  // device): the memory check compares the plan with what is left in it.
  int64_t device_free_bytes() override {
    const auto* pool = dynamic_cast<const CudaMemory*>(memory_.get());
    return pool ? pool->free_bytes() : -1;  // planning: no device
  }
  void* cuda_stream() const override { return stream_; }
  int64_t library_workspace_bytes() const override { return static_cast<int64_t>(cuda::kLtWorkspaceBytes); }
  int64_t device_used_bytes() override {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return static_cast<int64_t>(total - free_bytes);
  }

  void sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
             float beta, float* C, int ldc) override {
    cuda::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, gemm_stream());
  }
  void linear_forward(const float* x, const float* w, const float* b, float* y, float* pre_gelu, int64_t rows,
                      int64_t in, int64_t out) override {
    if (!cuda::linear_lt(x, w, b, y, pre_gelu, rows, in, out, lt_workspace(), stream_))
      Backend::linear_forward(x, w, b, y, pre_gelu, rows, in, out);
  }
  void linear_dx_dgelu(const float* dy, const float* w, const float* pre, float* dx, int64_t rows, int64_t in,
                       int64_t out) override {
    if (!cuda::linear_dx_dgelu_lt(dy, w, pre, dx, rows, in, out, lt_workspace(), stream_))
      Backend::linear_dx_dgelu(dy, w, pre, dx, rows, in, out);
  }
  void fill(float* x, float value, int64_t n) override {
    if (value == 0.f)
      zero(x, sizeof(float) * n);
    else
      cuda::fill(x, value, n, stream_);
  }
  void copy(const float* src, float* dst, int64_t n) override { copy_bytes(dst, src, sizeof(float) * n); }

  void relu_forward(const float* x, float* y, int64_t n) override { cuda::relu_forward(x, y, n, stream_); }
  void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate) override {
    cuda::relu_backward(y, dy, dx, n, accumulate, stream_);
  }
  void gelu_forward(const float* x, float* y, int64_t n) override { cuda::gelu_forward(x, y, n, stream_); }
  void gelu_forward_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, float* y) override {
    copy_columns(x, rows, ld, cols, y);
    cuda::gelu_forward(y, y, rows * cols, stream_);
  }
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) override {
    cuda::gelu_backward(x, dy, dx, n, stream_);
  }
  void swiglu_forward(const float* g, const float* u, float* h, int64_t n) override {
    cuda::swiglu_forward(g, u, h, n, stream_);
  }
  void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) override {
    cuda::swiglu_backward(g, u, dh, dg, du, n, stream_);
  }
  void add(const float* a, const float* b, float* y, int64_t n) override { cuda::add(a, b, y, n, stream_); }
  void axpy(float alpha, const float* x, float* y, int64_t n) override { cuda::axpy(alpha, x, y, n, stream_); }
  void scale(float* x, float alpha, int64_t n) override { cuda::scale(x, alpha, n, stream_); }
  void scale_copy(const float* x, float alpha, float* y, int64_t n) override {
    cuda::scale_copy(x, alpha, y, n, stream_);
  }
  void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows,
                       int64_t cols) override {
    if (rows <= 0 || cols <= 0) return;
    if (alpha == 1.f) {  // one copy engine call, the bits unchanged
      CUDA_CHECK(cudaMemcpy2DAsync(y, sizeof(float) * ldy, x, sizeof(float) * ldx, sizeof(float) * cols, rows,
                                   cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    cuda::scale_copy_rows(x, ldx, alpha, y, ldy, rows, cols, stream_);
  }
  void copy_columns(const float* x, int64_t rows, int64_t width, int64_t cols, float* out) override {
    scale_copy_rows(x, width, 1.f, out, cols, rows, cols);
  }
  double sum_squares(const float* x, int64_t n) override {
    double* out = scratch_doubles(1 + cuda::reduce_workspace_doubles());
    cuda::sum_squares(x, n, out, out + 1, stream_);
    return read_back<double>(out);
  }
  static_assert(sizeof(cuda::SquareSpan) == 3 * sizeof(double), "span table counted in doubles");
  double sum_squares_spans(const std::vector<FloatSpan>& spans) override {
    // Batches bound the scratch (kSpanBatch * 4 doubles + the reduction's workspace) and cost
    // one upload and one read-back each. Long spans take sum_squares' grid, the rest one
    // block each in a single launch: the same bits per span as sum_squares.
    constexpr int64_t kSpanBatch = 4096;
    const int64_t ws_doubles = cuda::reduce_workspace_doubles();
    double total = 0;
    std::vector<cuda::SquareSpan> table;
    std::vector<double> sums;
    for (size_t first = 0; first < spans.size(); first += kSpanBatch) {
      const int64_t count = std::min<int64_t>(kSpanBatch, static_cast<int64_t>(spans.size() - first));
      double* out = scratch_doubles(count + ws_doubles + 3 * count);
      double* ws = out + count;
      auto* device_table = reinterpret_cast<cuda::SquareSpan*>(ws + ws_doubles);
      table.clear();
      for (int64_t k = 0; k < count; ++k) {
        const FloatSpan& span = spans[first + k];
        if (span.n > cuda::batch_span_max_floats())
          cuda::sum_squares(span.x, span.n, out + k, ws, stream_);
        else
          table.push_back({span.x, span.n, k});
      }
      if (!table.empty()) {
        to_device(device_table, table.data(), sizeof(cuda::SquareSpan) * table.size());
        cuda::sum_squares_batch(device_table, static_cast<int>(table.size()), out, stream_);
      }
      sums.resize(count);
      to_host(sums.data(), out, sizeof(double) * count);
      for (double s : sums) total += s;
    }
    return total;
  }
  bool all_finite(const float* x, int64_t n) override {
    int* out = reinterpret_cast<int*>(scratch_doubles(1));
    cuda::all_finite(x, n, out, stream_);
    return read_back<int>(out) != 0;
  }
  bool all_finite_spans(const std::vector<FloatSpan>& spans) override {
    auto* count = reinterpret_cast<unsigned long long*>(scratch_doubles(1));
    zero(count, sizeof(*count));
    count_spans(spans, count);
    return read_back<unsigned long long>(count) == 0;
  }
  void count_nonfinite_spans(const std::vector<FloatSpan>& spans) override {
    count_spans(spans, &counters()->nonfinite);
  }
  void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) override {
    cuda::add_bias_rows(y, b, rows, cols, stream_);
  }
  void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld) override {
    cuda::bias_grad_rows(dy, db, rows, cols_used, ld, column_workspace(rows, cols_used), stream_);
  }

  void embedding_forward(const int32_t* ids, const float* table, int64_t num, float* y, int64_t rows, int64_t C,
                         bool accumulate) override {
    cuda::count_out_of_range(ids, rows, num, &counters()->bad_ids, stream_);
    cuda::embedding_forward(ids, table, y, rows, C, num, accumulate, stream_);
  }
  void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num, int64_t rows,
                          int64_t C) override {
    const size_t ws_bytes = cuda::embedding_backward_workspace_bytes(rows);
    void* ws = scratch_doubles(static_cast<int64_t>((ws_bytes + 7) / 8));
    cuda::embedding_backward(ids, dy, dtable, rows, C, num, ws, ws_bytes, stream_);
  }

  // The rows' losses and hits stay on the device: a fixed-order sum adds them to the
  // counters, which the step reads once (take_counters).
  void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V,
                     float scale) override {
    cross_entropy_rows(logits, targets, dlogits, rows, V, scale);
  }
  void cross_entropy_bf16(const void* logits, const int32_t* targets, void* dlogits, int64_t rows, int V,
                          float scale) override {
    cross_entropy_rows(static_cast<const cuda::bf16*>(logits), targets, static_cast<cuda::bf16*>(dlogits), rows, V,
                       scale);
  }
  void to_bf16(const float* x, void* y, int64_t n) override {
    cuda::to_bf16(x, static_cast<cuda::bf16*>(y), n, stream_);
  }
  void round_keep_bf16(float* x, void* kept, int64_t n) override {
    cuda::round_keep_bf16(x, static_cast<cuda::bf16*>(kept), n, stream_);
  }
  void to_bf16_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, void* y) override {
    cuda::to_bf16_columns(x, rows, ld, cols, static_cast<cuda::bf16*>(y), stream_);
  }
  void bf16_to_f32(const void* x, float* y, int64_t n) override {
    cuda::to_f32(static_cast<const cuda::bf16*>(x), y, n, stream_);
  }
  void gelu_keep_bf16(float* x, void* kept, int64_t n) override {
    cuda::gelu_keep_bf16(x, static_cast<cuda::bf16*>(kept), n, stream_);
  }
  void gelu_forward_bf16(const void* x, int64_t rows, int64_t ld, int64_t cols, float* y) override {
    cuda::gelu_forward_columns(static_cast<const cuda::bf16*>(x), rows, ld, cols, y, stream_);
  }
  void gelu_backward_bf16(const void* x, const float* dy, float* dx, int64_t n) override {
    cuda::gelu_backward(static_cast<const cuda::bf16*>(x), dy, dx, n, stream_);
  }
  void swiglu_keep_bf16(const void* g, float* u, void* u_kept, int64_t n) override {
    cuda::swiglu_keep_bf16(static_cast<const cuda::bf16*>(g), u, static_cast<cuda::bf16*>(u_kept), n, stream_);
  }
  void swiglu_forward_bf16(const void* g, const void* u, float* h, int64_t n) override {
    cuda::swiglu_forward(static_cast<const cuda::bf16*>(g), static_cast<const cuda::bf16*>(u), h, n, stream_);
  }
  void swiglu_backward_bf16(const void* g, const void* u, const float* dh, float* dg, float* du, int64_t n) override {
    cuda::swiglu_backward(static_cast<const cuda::bf16*>(g), static_cast<const cuda::bf16*>(u), dh, dg, du, n, stream_);
  }
  void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const void* A, int lda, const void* B, int ldb,
                 float beta, void* C, int ldc, bool c_bf16) override {
    const auto* a = static_cast<const cuda::bf16*>(A);
    const auto* b = static_cast<const cuda::bf16*>(B);
    if (c_bf16)
      cuda::gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, static_cast<cuda::bf16*>(C), ldc, gemm_stream());
    else
      cuda::gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, static_cast<float*>(C), ldc, gemm_stream());
  }

  void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                         float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                         float eps, bool relu) override {
    cuda::batchnorm_forward(x, gamma, beta, y, mean, rstd, running_mean, running_var, N, C, HW, training, momentum, eps,
                            stream_);
    if (relu) cuda::relu_forward(y, y, static_cast<int64_t>(N) * C * HW, stream_);
  }
  void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                          float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels) override {
    cuda::batchnorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, N, C, HW, grad_channels, stream_);
  }
  void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C,
                       float eps) override {
    cuda::rmsnorm_forward(x, gamma, y, rstd, rows, C, eps, stream_);
  }
  void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C) override {
    cuda::rmsnorm_apply(x, gamma, rstd, y, rows, C, stream_);
  }
  void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                        float* dgamma, int64_t rows, int C) override {
    cuda::rmsnorm_backward(x, gamma, rstd, dy, dx, dgamma, rows, C, dgamma ? column_workspace(rows, C) : nullptr,
                           stream_);
  }
  void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                   bool inverse) override {
    cuda::rope_rotate(x, rows, T, ld, heads, hd, cos, sin, inverse, stream_);
  }
  void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                         int64_t rows, int C, float eps) override {
    cuda::layernorm_forward(x, gamma, beta, y, mean, rstd, rows, C, eps, stream_);
  }
  void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                       float* y, int64_t rows, int C) override {
    cuda::layernorm_apply(x, gamma, beta, mean, rstd, y, rows, C, stream_);
  }
  void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                          float* dx, float* dgamma, float* dbeta, int64_t rows, int C) override {
    cuda::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta, rows, C,
                             dgamma ? column_workspace(rows, C) : nullptr, stream_);
  }

  // Convolutions: im2col + cuBLAS in chunks of samples; the workspace ends with room for an
  // input gradient, so that accumulate_dx adds instead of writes.
  int64_t conv2d_workspace_floats(const ConvShape& s) override {
    return cuda::conv2d_workspace_floats(s, chunk(s)) + input_floats(s);
  }
  void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) override {
    cuda::conv2d_forward(s, x, w, y, ws, chunk(s), gemm_stream());
  }
  void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                       int dw_cout, int dw_cin, float* ws, bool accumulate_dx) override {
    float* dx_tmp = accumulate_dx && dx ? ws + cuda::conv2d_workspace_floats(s, chunk(s)) : nullptr;
    cuda::conv2d_backward(s, x, w, dy, dx_tmp ? dx_tmp : dx, dw, dw_cout, dw_cin, ws, chunk(s), gemm_stream());
    if (dx_tmp) cuda::axpy(1.f, dx_tmp, dx, input_floats(s), stream_);
  }
  void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW) override {
    cuda::global_avg_pool_forward(x, y, N, C, HW, stream_);
  }
  void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW) override {
    cuda::global_avg_pool_backward(dy, dx, N, C, HW, stream_);
  }

  // Flash attention (attention.cu): the layer keeps no probabilities and neither does the
  // workspace. The forward keeps each row's log-sum-exp for the backward (B H T floats, the
  // layer's), which forms delta from the layer's kept output; without them (a layer that keeps
  // only some of its output's columns) the backward runs the forward again for both, into the
  // workspace (2 B H T floats). Under bf16 both run on tensor cores where the head width
  // allows (attention_tc*.cu), whose log-sum-exp is in base 2 and whose backward also keeps dy
  // in bf16 there (B T C / 2 floats more).
  int64_t attention_workspace_floats(const AttentionShape& s, int) override {
    SUBDP_CHECK(s.hd >= 1 && s.hd <= cuda::kMaxAttentionHeadDim,
                "[model] width / heads: a head of {} columns; the CUDA attention takes 1 to {}", s.hd,
                cuda::kMaxAttentionHeadDim);
    return tensor_cores(s) ? cuda::attention_tc_workspace_floats(s) : cuda::attention_workspace_floats(s);
  }
  void attention_forward(const AttentionShape& s, const float* qkv, float*, float* y, float* lse, float*,
                         int) override {
    if (tensor_cores(s) && cuda::attention_forward_tc(s, qkv, y, lse, stream_, /*lse_base2=*/true)) return;
    cuda::attention_forward(s, qkv, y, lse, stream_);
  }
  void attention_backward(const AttentionShape& s, const float* qkv, const float*, const float* dy,
                          const AttentionKept* kept, float* dqkv, float* ws, int) override {
    if (tensor_cores(s) && cuda::attention_backward_tc(s, qkv, dy, dqkv, ws, stream_, kept)) return;
    cuda::attention_backward(s, qkv, dy, dqkv, ws, stream_, kept);
  }
  bool attention_keeps_statistics(const AttentionShape&) const override { return true; }
  bool attention_reads_bf16(const AttentionShape& s) const override { return tensor_cores(s); }
  void attention_forward_bf16(const AttentionShape& s, const void* qkv, float* y, float* lse, float*, int) override {
    SUBDP_ASSERT(attention_reads_bf16(s));
    cuda::attention_forward_tc(s, static_cast<const cuda::bf16*>(qkv), y, lse, stream_, /*lse_base2=*/true);
  }
  void attention_backward_bf16(const AttentionShape& s, const void* qkv, const float* dy, const AttentionKept* kept,
                               float* dqkv, float* ws, int) override {
    SUBDP_ASSERT(attention_reads_bf16(s));
    cuda::attention_backward_tc(s, static_cast<const cuda::bf16*>(qkv), dy, dqkv, ws, stream_, kept);
  }

  // Multi-tensor: every run's chunks in one launch, counting its non-finite writes into the
  // step's counters. The chunk table
  // stays on the device while the runs stay the same (an optimizer's do), so a step uploads
  // nothing.
  void sgd_update_runs(const std::vector<UpdateRun>& runs, float lr, float momentum, float weight_decay, bool nesterov,
                       bool first) override {
    const int64_t count = upload_chunks(runs);
    cuda::sgd_update_chunks(chunks_, count, lr, momentum, weight_decay, nesterov, first, &counters()->nonfinite_writes,
                            stream_);
  }
  void adamw_update_runs(const std::vector<UpdateRun>& runs, float step_size, float bc2_sqrt, float decay, float eps,
                         float beta1, float beta2) override {
    const int64_t count = upload_chunks(runs);
    cuda::adamw_update_chunks(chunks_, count, step_size, bc2_sqrt, decay, eps, beta1, beta2,
                              &counters()->nonfinite_writes, stream_);
  }
  StepCounters take_counters() override {
    if (counters_ == nullptr) return {};
    const auto c = read_back<cuda::DeviceCounters>(counters_);
    zero(counters_, sizeof(*counters_));
    auto count = [](unsigned long long v) { return static_cast<int64_t>(v); };
    StepCounters out{c.loss_sum,       count(c.loss_rows), count(c.correct),
                     count(c.bad_ids), count(c.nonfinite), count(c.nonfinite_writes)};
    std::copy(c.flags, c.flags + 3, out.flags);
    return out;
  }
  void set_step_flags(double stop) override { cuda::set_step_flags(counters(), stop, stream_); }
  double* step_flags() override { return counters()->flags; }

  // Timestamps: a ring of timing events on the stream (created on first use), read with
  // cudaEventElapsedTime, which fails (cudaErrorNotReady) where the stream has not passed one.
  int64_t timestamp() override {
    const int64_t id = timestamps_issued_++;
    cudaEvent_t& e = stamps_[timestamp_slot(id)];
    if (e == nullptr) CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(e, stream_));
    return id;
  }
  double seconds_between(int64_t from, int64_t to) override {
    SUBDP_ASSERT(from < to);
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, stamps_[timestamp_slot(from)], stamps_[timestamp_slot(to)]));
    return ms * 1e-3;
  }

 private:
  /// True when shape s's attention runs on tensor cores (precision bf16, a head width they
  /// take): the forward and the backward decide alike, so the kept log-sum-exp's form (base 2
  /// there, natural on CUDA cores) is the one the backward reads.
  bool tensor_cores(const AttentionShape& s) const {
    return precision() == Precision::bf16 && cuda::attention_tc_supported(s);
  }
  /// The fused cross-entropy over float or bf16 logits: per-row losses and hits in the scratch,
  /// added to the counters in a fixed order.
  template <class T>
  void cross_entropy_rows(const T* logits, const int32_t* targets, T* dlogits, int64_t rows, int V, float scale) {
    float* row_loss = reinterpret_cast<float*>(scratch_doubles(rows));
    int32_t* row_hit = reinterpret_cast<int32_t*>(row_loss + rows);
    cuda::cross_entropy(logits, targets, dlogits, row_loss, row_hit, rows, V, scale, stream_);
    cuda::add_row_losses(row_loss, row_hit, rows, counters(), stream_);
  }
  /// *count += the spans' non-finite values, in one launch per cuda::count_nonfinite_spans batch.
  void count_spans(const std::vector<FloatSpan>& spans, unsigned long long* count) {
    std::vector<cuda::CountSpan> table;
    table.reserve(spans.size());
    for (const FloatSpan& s : spans) table.push_back({s.x, s.n});
    cuda::count_nonfinite_spans(table.data(), static_cast<int64_t>(table.size()), count, stream_);
  }
  static int chunk(const ConvShape& s) { return std::max(1, std::min(s.N, 32)); }
  static int64_t input_floats(const ConvShape& s) { return int64_t{s.N} * s.Cin * s.H * s.W; }

  void copy_sync(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    synchronize();
  }
  /// Waits for the stream: under NCCL it may hold a collective whose peer is lost, so the
  /// wait is guarded by the device-wait watchdog (parallel.collective_timeout_s).
  void synchronize() {
    DeviceWaitGuard guard("NCCL (a host wait on the device stream)");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  /// One value from device memory, through a page-locked buffer: the copy is asynchronous
  /// there (unlike a copy to pageable memory, which CUDA completes before returning), so the
  /// stream is synchronised before the host reads it.
  template <class T>
  T read_back(const void* device) {
    static_assert(sizeof(T) <= kReadBackBytes, "read_back of a few values");
    if (read_back_ == nullptr) read_back_ = staging_memory()->allocate(kReadBackBytes);
    CUDA_CHECK(cudaMemcpyAsync(read_back_, device, sizeof(T), cudaMemcpyDeviceToHost, stream_));
    synchronize();
    T value{};
    std::memcpy(&value, read_back_, sizeof(T));
    return value;
  }
  /// The libraries' workspace, cuBLASLt's and cuBLAS's on this stream (one stream orders their
  /// use of it), taken from the pool at the first GEMM and kept: counted as workspace whether or
  /// not the tracker is paused (the planner counts it: library_workspace_bytes).
  cuda::LtWorkspace lt_workspace() {
    if (lt_workspace_ == nullptr) {
      lt_workspace_ = memory_->allocate(cuda::kLtWorkspaceBytes);
      MemoryTracker::global().on_alloc(MemCategory::workspace, static_cast<int64_t>(cuda::kLtWorkspaceBytes));
      cuda::set_gemm_workspace(stream_, {lt_workspace_, cuda::kLtWorkspaceBytes});
    }
    return {lt_workspace_, cuda::kLtWorkspaceBytes};
  }
  /// The stream for a cuBLAS call, its workspace set first (else cuBLAS would take its default
  /// pool outside this backend's pool, where neither the tracker nor the planner sees it).
  cudaStream_t gemm_stream() {
    lt_workspace();
    return stream_;
  }
  /// Device scratch of at least n doubles for one operation's temporaries (grown on demand,
  /// counted as workspace). From this backend's own memory, not the global backend's
  /// (Tensor::empty): a CudaBackend that is not the run's backend (the GPU tests make one)
  /// would otherwise hand its kernels host memory. Work queued earlier on the stream may still
  /// use a replaced block: the arena reuses it only for work queued after, in stream order.
  double* scratch_doubles(int64_t n) {
    const size_t need = sizeof(double) * static_cast<size_t>(std::max<int64_t>(n, 1));
    if (scratch_ == nullptr || scratch_bytes_ < need) {
      release_scratch();
      const size_t bytes = std::max(2 * need, sizeof(double) * 512);
      scratch_ = static_cast<double*>(memory_->allocate(bytes));
      scratch_bytes_ = bytes;
      scratch_tracked_ = !MemoryTracker::global().paused();
      if (scratch_tracked_) MemoryTracker::global().on_alloc(MemCategory::workspace, static_cast<int64_t>(bytes));
    }
    return scratch_;
  }
  void release_scratch() {
    if (scratch_ == nullptr) return;
    memory_->deallocate(scratch_, scratch_bytes_);
    if (scratch_tracked_) MemoryTracker::global().on_free(MemCategory::workspace, static_cast<int64_t>(scratch_bytes_));
    scratch_ = nullptr;
  }
  /// The column-gradient kernels' slice sums, in the scratch (null when they need none).
  float* column_workspace(int64_t rows, int64_t cols) {
    const int64_t floats = cuda::column_grad_workspace_floats(rows, cols);
    return floats > 0 ? reinterpret_cast<float*>(scratch_doubles((floats + 1) / 2)) : nullptr;
  }
  cuda::DeviceCounters* counters() {
    if (counters_ == nullptr) {  // kept apart from the scratch, which other calls reuse and regrow
      counters_ = static_cast<cuda::DeviceCounters*>(memory_->allocate(kCountersBytes));
      counters_tracked_ = !MemoryTracker::global().paused();
      if (counters_tracked_) MemoryTracker::global().on_alloc(MemCategory::workspace, kCountersBytes);
      zero(counters_, sizeof(*counters_));
    }
    return counters_;
  }
  /// The runs cut into chunks of at most update_chunk_floats(), in device memory at chunks_
  /// (uploaded only when they differ from the last call's); returns how many.
  int64_t upload_chunks(const std::vector<UpdateRun>& runs) {
    std::vector<UpdateRun> table;
    const int64_t most = cuda::update_chunk_floats();
    for (const UpdateRun& r : runs)
      for (int64_t at = 0; at < r.n; at += most) {
        auto shifted = [at](auto* p) { return p ? p + at : p; };
        table.push_back({r.w + at, r.g + at, shifted(r.s0), shifted(r.s1), std::min(most, r.n - at)});
      }
    const size_t bytes = sizeof(UpdateRun) * table.size();
    if (bytes == chunk_table_.size() && std::memcmp(table.data(), chunk_table_.data(), bytes) == 0)
      return static_cast<int64_t>(table.size());
    release_chunks();
    if (bytes > 0) {
      chunks_bytes_ = bytes;
      chunks_ = static_cast<UpdateRun*>(memory_->allocate(bytes));
      chunks_tracked_ = !MemoryTracker::global().paused();
      if (chunks_tracked_) MemoryTracker::global().on_alloc(MemCategory::workspace, static_cast<int64_t>(bytes));
      to_device(chunks_, table.data(), bytes);
    }
    chunk_table_.assign(reinterpret_cast<const char*>(table.data()),
                        reinterpret_cast<const char*>(table.data()) + bytes);
    return static_cast<int64_t>(table.size());
  }
  void release_chunks() {
    if (chunks_ == nullptr) return;
    memory_->deallocate(chunks_, chunks_bytes_);
    if (chunks_tracked_) MemoryTracker::global().on_free(MemCategory::workspace, static_cast<int64_t>(chunks_bytes_));
    chunks_ = nullptr;
    chunk_table_.clear();
  }

  static constexpr size_t kReadBackBytes = 128;
  static constexpr int64_t kCountersBytes = 256;  // the allocator's smallest piece
  static_assert(sizeof(cuda::DeviceCounters) <= kCountersBytes && sizeof(cuda::DeviceCounters) <= kReadBackBytes);
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DeviceMemory> memory_;
  std::shared_ptr<DeviceMemory> staging_;  // pinned; null in planning mode (plain host memory)
  void* read_back_ = nullptr;              // kReadBackBytes of staging_, for read_back
  void* lt_workspace_ = nullptr;           // in memory_: lt_workspace()
  double* scratch_ = nullptr;              // in memory_
  size_t scratch_bytes_ = 0;
  bool scratch_tracked_ = false;
  cuda::DeviceCounters* counters_ = nullptr;  // take_counters' counters, in memory_
  bool counters_tracked_ = false;
  UpdateRun* chunks_ = nullptr;  // the multi-tensor updates' chunk table, in memory_
  size_t chunks_bytes_ = 0;
  bool chunks_tracked_ = false;
  std::vector<char> chunk_table_;         // its bytes as uploaded, to see whether the next call differs
  cudaEvent_t stamps_[kTimestamps] = {};  // timestamp()'s events, by slot
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(bool planning) { return std::make_unique<CudaBackend>(planning); }

}  // namespace subdp
