// The device operations every layer, model, optimizer and the trainer call: one interface,
// one implementation per backend folder (kernels/cpu today; kernels/cuda next), chosen once
// per run (ggml's backend table, PyTorch's dispatcher: the code above never names a device).
// Shapes, layouts and semantics (= versus +=, masked prefixes, leading dimensions) are those
// documented on the CPU kernel of the same name in kernels/cpu/*.h; pointers are the
// backend's memory. All buffers are float32 unless the signature says otherwise.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/core/device_memory.h"
#include "kernels/shapes.h"

namespace subdp {

/// n floats from x, in backend memory.
struct FloatSpan {
  const float* x;
  int64_t n;
};

/// What the host needs to know of a step, accumulated in backend memory by the operations that
/// find it and read in one transfer by Backend::take_counters (issue 41: one host
/// synchronisation per step on a GPU; on the CPU it is a host struct).
struct StepCounters {
  double loss_sum = 0;           // cross_entropy: per-row losses (nats) summed in row order
  int64_t loss_rows = 0;         // rows those losses cover
  int64_t correct = 0;           // rows whose arg-max logit is the target
  int64_t bad_ids = 0;           // embedding_forward: ids outside [0, num) (skipped)
  int64_t nonfinite = 0;         // count_nonfinite_spans: inf / NaN elements
  int64_t nonfinite_writes = 0;  // optimizer updates: inf / NaN values written (weights and state)
  double flags[3] = {0, 0, 0};   // set_step_flags' flags, as the world's all-reduce left them
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu", "cuda", ...: what `subdp version` and the run header print.
  virtual std::string name() const = 0;
  /// Library and kernel choices in one line (BLAS build, cores), for `subdp version`.
  virtual std::string describe() const = 0;
  /// Threads per rank (OpenMP / BLAS), the Winograd output tile (2 or 4) and the GEMMs'
  /// precision ([device] precision: fp32, or tf32 / bf16 tensor cores on CUDA, which the
  /// config rules keep off other backends).
  virtual void configure(int threads, int winograd_tile, Precision precision = Precision::fp32) = 0;
  /// The GEMMs' precision configure() set (fp32 on backends without tensor cores). Models
  /// built under bf16 keep their language-model logits in bf16 (CrossEntropyHead).
  virtual Precision precision() const { return Precision::fp32; }

  // ---- memory: where Tensor::empty allocates, and the transfers (synchronous: the
  // destination is ready on return). Host code reaches backend memory only through these.
  virtual std::shared_ptr<DeviceMemory> memory() = 0;
  /// Host memory for staging buffers (Tensor::host_empty: batches): page-locked on CUDA, so
  /// that uploads run by DMA at full bus speed; plain host memory elsewhere.
  virtual std::shared_ptr<DeviceMemory> staging_memory() { return host_memory(); }
  /// Host → backend memory, `bytes` bytes.
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  /// The same, queued without waiting (CUDA: on the backend's stream, from page-locked
  /// staging memory): src must stay unchanged until the backend next synchronises with the
  /// host (a read-back, a host copy, a collective). Batches rely on every step (or
  /// Model::forward) reading the counters back before the next batch is staged.
  virtual void to_device_async(void* dst, const void* src, size_t bytes) { to_device(dst, src, bytes); }
  /// Backend memory → host, `bytes` bytes.
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  /// Within backend memory, `bytes` bytes of any dtype.
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  /// Around a collective on backend memory (the communicators' libraries read and write it):
  /// nests, each open closed once. The CPU backend (host memory) has nothing to do, the CUDA
  /// backend finishes its stream's work first, the fenced test device opens its pool.
  virtual void open_for_collective() = 0;
  virtual void close_for_collective() = 0;
  /// Bytes the device itself reports in use (CUDA: total - free, every allocation of the
  /// process and the driver's own); -1 where there is no such figure (host memory).
  virtual int64_t device_used_bytes() { return -1; }
  /// Bytes a new allocation can still get on the device; -1 for host memory (the CPU, the
  /// fenced test device), which the trainer measures on the host instead.
  virtual int64_t device_free_bytes() { return -1; }
  /// Bytes of backend memory the backend's libraries take on their first use and keep for the
  /// run, counted as workspace (CUDA: cuBLASLt's workspace, cuda::kLtWorkspaceBytes, taken at
  /// the first fused linear layer); the planner counts them. 0 where there are none.
  virtual int64_t library_workspace_bytes() const { return 0; }
  /// The CUDA stream (a cudaStream_t) this backend enqueues its work on; null for the host
  /// backends. A device communicator orders its collectives after this stream's queued work
  /// and this stream's later work after them (kernels/cuda/nccl_comm.h).
  virtual void* cuda_stream() const { return nullptr; }

  // ---- GEMM (kernels/cpu/gemm.h): C (M, N) = alpha op(A) op(B) + beta C, row-major.
  virtual void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) = 0;

  /// A linear layer's forward: y (rows, out) = x (rows, in) . w^T (in, out) + b, w (out, in),
  /// b (out floats) or null. With pre_gelu (rows, out) not null: pre_gelu receives that and
  /// y = gelu(pre_gelu), tanh form. By default sgemm, add_bias_rows and gelu_forward (the CPU's
  /// arithmetic); the CUDA backend runs one cuBLASLt GEMM with a bias / GELU epilogue where
  /// the library offers one.
  virtual void linear_forward(const float* x, const float* w, const float* b, float* y, float* pre_gelu, int64_t rows,
                              int64_t in, int64_t out);
  /// The input gradient of a linear layer whose input was gelu(pre): dx (rows, in) = (dy (rows,
  /// out) . w (out, in)) * gelu'(pre), pre (rows, in). By default sgemm, then gelu_backward;
  /// the CUDA backend runs one cuBLASLt GEMM with the DGELU epilogue where offered.
  virtual void linear_dx_dgelu(const float* dy, const float* w, const float* pre, float* dx, int64_t rows, int64_t in,
                               int64_t out);

  // ---- fills and copies within the backend's memory (n floats)
  virtual void fill(float* x, float value, int64_t n) = 0;
  virtual void copy(const float* src, float* dst, int64_t n) = 0;

  // ---- elementwise and reductions (kernels/cpu/elementwise.h)
  virtual void relu_forward(const float* x, float* y, int64_t n) = 0;
  virtual void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate) = 0;
  virtual void gelu_forward(const float* x, float* y, int64_t n) = 0;
  virtual void gelu_forward_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, float* y) = 0;
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) = 0;
  virtual void swiglu_forward(const float* g, const float* u, float* h, int64_t n) = 0;
  virtual void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) = 0;
  virtual void add(const float* a, const float* b, float* y, int64_t n) = 0;
  virtual void axpy(float alpha, const float* x, float* y, int64_t n) = 0;
  virtual void scale(float* x, float alpha, int64_t n) = 0;
  virtual void scale_copy(const float* x, float alpha, float* y, int64_t n) = 0;
  /// y[r * ldy + c] = alpha * x[r * ldx + c], r < rows, c < cols (strides in floats); alpha 1
  /// copies the bits. Packs and unpacks strided runs of communication buckets.
  virtual void scale_copy_rows(const float* x, int64_t ldx, float alpha, float* y, int64_t ldy, int64_t rows,
                               int64_t cols) = 0;
  virtual void copy_columns(const float* x, int64_t rows, int64_t width, int64_t cols, float* out) = 0;
  virtual double sum_squares(const float* x, int64_t n) = 0;
  /// Sum over spans of sum_squares(span): each span reduced on its own, the per-span doubles
  /// added in span order, so the bits equal that loop. The CUDA backend reduces a batch of
  /// spans per launch and reads each batch back once (gradient clipping at neuron level has
  /// ~10^5 spans a step: one synchronising read-back each would cost seconds).
  virtual double sum_squares_spans(const std::vector<FloatSpan>& spans) {
    double total = 0;
    for (const FloatSpan& s : spans) total += sum_squares(s.x, s.n);
    return total;
  }
  virtual bool all_finite(const float* x, int64_t n) = 0;
  /// True when every float of every span is finite: one read-back on CUDA (the ZeRO-2 / FSDP
  /// block hooks' checks, and the searches that name a tensor after a fault).
  virtual bool all_finite_spans(const std::vector<FloatSpan>& spans) {
    for (const FloatSpan& s : spans)
      if (!all_finite(s.x, s.n)) return false;
    return true;
  }
  /// Adds the inf / NaN elements of every span to StepCounters::nonfinite, without reading
  /// anything back (a step's gradient check).
  virtual void count_nonfinite_spans(const std::vector<FloatSpan>& spans) = 0;
  virtual void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) = 0;
  virtual void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld) = 0;

  // ---- embedding (kernels/cpu/embedding.h): y (rows, C) (+)= table[ids]; dtable[ids] += dy, for a
  // table of `num` rows. Ids outside [0, num) are skipped; the forward adds their count to
  // StepCounters::bad_ids.
  virtual void embedding_forward(const int32_t* ids, const float* table, int64_t num, float* y, int64_t rows, int64_t C,
                                 bool accumulate) = 0;
  virtual void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num, int64_t rows,
                                  int64_t C) = 0;

  // ---- fused softmax cross-entropy (kernels/cpu/softmax.h): adds the rows' losses (nats,
  // summed in row order), their number and the correct ones to StepCounters; dlogits null
  // (evaluation), separate, or the logits themselves (in place).
  virtual void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t rows, int V,
                             float scale) = 0;

  // ---- bf16 buffers ([device] precision = "bf16", CUDA only; elsewhere these throw): `void*`
  // points to 2-byte bf16 values, rounded from float32 to nearest even.
  /// y (n bf16) = x (n floats).
  virtual void to_bf16(const float* x, void* y, int64_t n);
  /// y (n floats) = x (n bf16), exactly.
  virtual void bf16_to_f32(const void* x, float* y, int64_t n);
  /// kept (n bf16) = bf16(x); x (n floats) = kept, in place (the kept values as floats).
  virtual void round_keep_bf16(float* x, void* kept, int64_t n);
  /// y (rows, cols bf16) = x[:, :cols], x (rows, ld floats).
  virtual void to_bf16_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, void* y);
  /// As sgemm over bf16 A and B, sums in fp32: C float32, or bf16 (rounded) when c_bf16.
  virtual void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A, int lda,
                         const void* B, int ldb, float beta, void* C, int ldc, bool c_bf16);
  /// cross_entropy over bf16 logits (read as floats, reduced in fp32), dlogits bf16 (null,
  /// separate, or the logits themselves).
  virtual void cross_entropy_bf16(const void* logits, const int32_t* targets, void* dlogits, int64_t rows, int V,
                                  float scale);
  // The blocks' MLP pre-activations kept in bf16 (models/gpt.cpp, llama_block.cpp): the forward
  // computes from the rounded values, so forward and backward see the same function.
  /// kept (n bf16) = bf16(x); x (n floats) = gelu(kept) in place.
  virtual void gelu_keep_bf16(float* x, void* kept, int64_t n);
  /// y (rows, cols floats) = gelu(x[:, :cols]), x (rows, ld) bf16.
  virtual void gelu_forward_bf16(const void* x, int64_t rows, int64_t ld, int64_t cols, float* y);
  /// dx (n floats) = dy * gelu'(x), x bf16; dx may be dy.
  virtual void gelu_backward_bf16(const void* x, const float* dy, float* dx, int64_t n);
  /// u_kept (n bf16) = bf16(u); u (n floats) = silu(g) * u_kept in place, g bf16.
  virtual void swiglu_keep_bf16(const void* g, float* u, void* u_kept, int64_t n);
  /// h (n floats) = silu(g) * u, g and u bf16.
  virtual void swiglu_forward_bf16(const void* g, const void* u, float* h, int64_t n);
  /// dg = dh * u * silu'(g), du = dh * silu(g) (floats), g and u bf16; dg may be dh.
  virtual void swiglu_backward_bf16(const void* g, const void* u, const float* dh, float* dg, float* du, int64_t n);

  // ---- normalisation (kernels/cpu/norm.h)
  virtual void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                 float* rstd, float* running_mean, float* running_var, int N, int C, int HW,
                                 bool training, float momentum, float eps, bool relu) = 0;
  virtual void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                                  const float* dy, float* dx, float* dgamma, float* dbeta, int N, int C, int HW,
                                  int grad_channels) = 0;
  virtual void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                 float* rstd, int64_t rows, int C, float eps) = 0;
  virtual void layernorm_apply(const float* x, const float* gamma, const float* beta, const float* mean,
                               const float* rstd, float* y, int64_t rows, int C) = 0;
  virtual void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                                  const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int C) = 0;

  virtual void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C,
                               float eps) = 0;
  virtual void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C) = 0;
  virtual void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx,
                                float* dgamma, int64_t rows, int C) = 0;

  // ---- rotary position embeddings (kernels/cpu/rope.h): in place on the first `heads` heads
  // of x (rows, ld); cos / sin (context, hd/2) tables in backend memory.
  virtual void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos,
                           const float* sin, bool inverse) = 0;

  // ---- convolution and pooling (kernels/cpu/conv.h); workspace sizes in floats.
  virtual int64_t conv2d_workspace_floats(const ConvShape& s) = 0;
  virtual void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws) = 0;
  virtual void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                               float* dw, int dw_cout, int dw_cin, float* ws, bool accumulate_dx) = 0;
  virtual void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW) = 0;
  virtual void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW) = 0;

  // ---- causal self-attention (kernels/cpu/attention.h); workspace sizes in floats.
  virtual int64_t attention_workspace_floats(const AttentionShape& s, int slots) = 0;
  /// lse: null, or (where attention_keeps_statistics(s)) B H T floats in which the forward
  /// writes what AttentionKept::lse holds for the backward.
  virtual void attention_forward(const AttentionShape& s, const float* qkv, float* att, float* y, float* lse, float* ws,
                                 int slots) = 0;
  /// kept: null (the backward recomputes the forward's statistics), or (where
  /// attention_keeps_statistics(s)) what the forward kept: its lse and output.
  virtual void attention_backward(const AttentionShape& s, const float* qkv, const float* att, const float* dy,
                                  const AttentionKept* kept, float* dqkv, float* ws, int slots) = 0;
  /// True when the forward can keep each row's log-sum-exp (B H T floats) so that the backward,
  /// given it and the forward's output, skips running the forward again (CUDA); false where
  /// the backward recomputes its statistics either way (CPU: from a (T, T) block in the
  /// workspace), and lse and kept must then be null.
  virtual bool attention_keeps_statistics(const AttentionShape& s) const;
  /// True when the two calls below take shape s (CUDA under precision = "bf16", tensor-core
  /// head widths); elsewhere false, and a layer keeping q, k, v in bf16 converts them first.
  virtual bool attention_reads_bf16(const AttentionShape& s) const;
  /// attention_forward / attention_backward (att unused) over qkv as bf16 rows (a layer's kept
  /// copy, 2-byte values): no float32 copy, no conversion pass; y, dy, dqkv float32. Throw
  /// where attention_reads_bf16(s) is false.
  virtual void attention_forward_bf16(const AttentionShape& s, const void* qkv, float* y, float* lse, float* ws,
                                      int slots);
  virtual void attention_backward_bf16(const AttentionShape& s, const void* qkv, const float* dy,
                                       const AttentionKept* kept, float* dqkv, float* ws, int slots);

  // ---- optimizer updates (kernels/cpu/optimizer.h) over many contiguous runs (UpdateRun:
  // s0 = SGD's momentum buffer or null, s1 unused; s0 = AdamW's m, s1 = v). Each adds the
  // non-finite values it wrote (weights and state) to StepCounters::nonfinite_writes: on a GPU
  // every run goes in one launch and nothing is read back.
  virtual void sgd_update_runs(const std::vector<UpdateRun>& runs, float lr, float momentum, float weight_decay,
                               bool nesterov, bool first) = 0;
  virtual void adamw_update_runs(const std::vector<UpdateRun>& runs, float step_size, float bc2_sqrt, float decay,
                                 float eps, float beta1, float beta2) = 0;
  /// The counters accumulated since the previous call (then 0 again): one device-to-host
  /// transfer, the host synchronisation a training step needs.
  virtual StepCounters take_counters() = 0;
  /// A step's three flags from the counters accumulated so far, written at step_flags()
  /// without a read-back: [0] 1 when a loss or gradient is not finite (nonfinite > 0, or the
  /// loss sum not finite), [1] `stop` (a stop signal), [2] 1 when an update wrote a non-finite
  /// value. The trainer all-reduces (max) the three doubles at step_flags() over the world in
  /// place, and take_counters returns them in StepCounters::flags: on CUDA they are device
  /// memory, which NCCL reduces with no host wait, so the step's one read-back carries them.
  virtual void set_step_flags(double stop) = 0;
  /// The three doubles set_step_flags wrote: host memory on the host backends, device memory
  /// on CUDA (a communicator of the run reduces either in place).
  virtual double* step_flags() = 0;

  // ---- timestamps: what each phase of a step took where the work runs (the trainer's
  // phases_s metrics). The host backends take the host clock (their work is done when a call
  // returns); CUDA records an event on its stream, readable once the stream has passed it.
  /// Marks the point the backend's queued work has reached; returns its id (0, 1, 2, ...).
  /// Only the last kTimestamps ids stay readable.
  virtual int64_t timestamp();
  /// Seconds from timestamp `from` to timestamp `to` (from < to, both among the last
  /// kTimestamps). CUDA: the work queued before `to` must be finished (the step's read-back
  /// waits for it), else a CUDA error (cudaErrorNotReady) is thrown.
  virtual double seconds_between(int64_t from, int64_t to);
  static constexpr int64_t kTimestamps = 64;

 protected:
  /// The slot of timestamp `id` in a ring of kTimestamps; throws when `id` is not one of the
  /// last kTimestamps issued.
  int64_t timestamp_slot(int64_t id) const;
  int64_t timestamps_issued_ = 0;

 private:
  double host_stamps_[kTimestamps] = {};  // timestamp()'s host clock readings (seconds)
};

/// Keeps the run's backend memory open for one collective (see Backend::open_for_collective).
class CollectiveScope {
 public:
  CollectiveScope();
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  Backend& backend_;
};

/// The run's backend (the CPU backend until set_backend is called). Not thread-safe to swap
/// while a step runs: the trainer and commands set it once, before building a model.
Backend& backend();
/// Makes `b` the run's backend.
void set_backend(std::unique_ptr<Backend> b);
/// The backend for `[device] type`: cpu, fenced, or cuda (an error naming the cause on a
/// machine without a CUDA device or a build without nvcc).
std::unique_ptr<Backend> make_backend(DeviceType device_type);

/// The CPU backend (kernels/cpu: OpenBLAS, OpenMP, Winograd / channels-last convolutions).
std::unique_ptr<Backend> make_cpu_backend();

/// The CUDA backend (kernels/cuda: one GPU, float32, cuBLAS), in CUDA builds only. With
/// `planning`, a backend that touches no device and allocates nothing: it answers the
/// workspace sizes for `subdp plan`'s dry runs (Backend operations throw).
std::unique_ptr<Backend> make_cuda_backend(bool planning = false);

/// The backend whose sizes `subdp plan` predicts with: make_backend's, except that "cuda"
/// needs no device (make_cuda_backend(true)). Throws for "cuda" in a build without nvcc.
std::unique_ptr<Backend> make_planning_backend(DeviceType device_type);

/// The fenced test device (kernels/fenced): the CPU kernels on a pool that host code cannot
/// touch (mapped PROT_NONE except while a backend operation or a collective runs), so a
/// missing transfer faults at its line instead of passing unnoticed, as it would on a GPU.
std::unique_ptr<Backend> make_fenced_backend();

}  // namespace subdp
