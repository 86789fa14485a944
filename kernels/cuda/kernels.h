// CUDA twins of the kernels in kernels/cpu: host-callable functions taking device pointers,
// each enqueued on `stream` and returning at once (nothing synchronises). Shapes, layouts and
// semantics (= versus +=, masked prefixes) are those of the CPU kernel of the same name, so
// a layer can switch backend without changing its arithmetic. bf16 overloads store
// __nv_bfloat16 and compute in float. Reductions are deterministic (fixed grid and tree
// order for a given size) but add in another order than the CPU, so results agree to fp32
// rounding, not bit for bit. Every launch is checked (CUDA_CHECK_LAUNCH); errors throw
// subdp::Error. Sources: elementwise.cu, rope.cu, reduce.cu, softmax.cu, norm.cu, embedding.cu,
// attention.cu, conv.cu, optimizer.cu, gemm.cpp.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "kernels/shapes.h"

namespace subdp::cuda {

using bf16 = __nv_bfloat16;
using ::subdp::AttentionShape;
using ::subdp::ConvShape;

// ---- elementwise (elementwise.cu) -------------------------------------------------------

/// y = max(x, 0), n elements.
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void relu_forward(const bf16* x, bf16* y, int64_t n, cudaStream_t stream);
/// dx (=|+=) dy * (y > 0); y is relu's output.
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate, cudaStream_t stream);
void relu_backward(const bf16* y, const bf16* dy, bf16* dx, int64_t n, bool accumulate, cudaStream_t stream);
/// GELU, tanh approximation (as cpu::gelu_forward).
void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void gelu_forward(const bf16* x, bf16* y, int64_t n, cudaStream_t stream);
/// y (rows, cols floats) = gelu(x[:, :cols]), x (rows, ld) bf16.
void gelu_forward_columns(const bf16* x, int64_t rows, int64_t ld, int64_t cols, float* y, cudaStream_t stream);
/// kept (n bf16) = bf16(x); x = gelu(kept) in place (n floats): the MLP's pre-activation kept
/// in bf16, the forward computed from the value the backward reads.
void gelu_keep_bf16(float* x, bf16* kept, int64_t n, cudaStream_t stream);
/// dx = dy * gelu'(x); with bf16 x and float dy / dx, dx may be dy.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream);
void gelu_backward(const bf16* x, const bf16* dy, bf16* dx, int64_t n, cudaStream_t stream);
void gelu_backward(const bf16* x, const float* dy, float* dx, int64_t n, cudaStream_t stream);
/// SwiGLU (as cpu::swiglu_forward): h = silu(g) * u, g and u float or bf16, h float.
void swiglu_forward(const float* g, const float* u, float* h, int64_t n, cudaStream_t stream);
void swiglu_forward(const bf16* g, const bf16* u, float* h, int64_t n, cudaStream_t stream);
/// u_kept (n bf16) = bf16(u); u = silu(g) * u_kept in place (the SwiGLU output over u).
void swiglu_keep_bf16(const bf16* g, float* u, bf16* u_kept, int64_t n, cudaStream_t stream);
/// dg = dh * u * silu'(g), du = dh * silu(g). Float g, u: dg may be g and du u; bf16 g, u:
/// dg may be dh.
void swiglu_backward(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n,
                     cudaStream_t stream);
void swiglu_backward(const bf16* g, const bf16* u, const float* dh, float* dg, float* du, int64_t n,
                     cudaStream_t stream);
/// Rotary position embeddings in place (as cpu::rope_rotate; rope.cu).
void rope_rotate(float* x, int64_t rows, int T, int64_t ld, int heads, int hd, const float* cos, const float* sin,
                 bool inverse, cudaStream_t stream);
/// y = a + b.
void add(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
void add(const bf16* a, const bf16* b, bf16* y, int64_t n, cudaStream_t stream);
/// y += alpha * x.
void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
void axpy(float alpha, const bf16* x, bf16* y, int64_t n, cudaStream_t stream);
/// x *= alpha.
void scale(float* x, float alpha, int64_t n, cudaStream_t stream);
void scale(bf16* x, float alpha, int64_t n, cudaStream_t stream);
/// y = bf16(x) (round to nearest even) and back.
void to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t stream);
void to_f32(const bf16* x, float* y, int64_t n, cudaStream_t stream);
/// kept (n bf16) = bf16(x); x (n floats) = kept, in place: one pass for to_bf16 and back.
void round_keep_bf16(float* x, bf16* kept, int64_t n, cudaStream_t stream);
/// y (rows, cols bf16) = bf16(x[:, :cols]), x (rows, ld floats).
void to_bf16_columns(const float* x, int64_t rows, int64_t ld, int64_t cols, bf16* y, cudaStream_t stream);
/// y (rows, cols) += b (cols) broadcast over rows.
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);
void add_bias_rows(bf16* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);
/// Floats of workspace a column gradient (bias_grad_rows, layernorm_backward,
/// rmsnorm_backward) over rows x cols needs: its rows are cut into slices sized to the
/// device (column_sums.cuh); 0 when one slice covers them.
int64_t column_grad_workspace_floats(int64_t rows, int64_t cols);
/// db[c] += sum_r dy[r, c] over the first cols_used columns of a (rows, ld) matrix; rows are
/// summed in a fixed order (deterministic on a device). ws:
/// column_grad_workspace_floats(rows, cols_used) floats.
void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols_used, int64_t ld, float* ws,
                    cudaStream_t stream);

// ---- reductions (reduce.cu) ------------------------------------------------------------

/// Doubles of device workspace sum / sum_squares take (partials of the first pass).
int64_t reduce_workspace_doubles();
/// *out (one device double) = sum of x. ws: reduce_workspace_doubles() doubles.
void sum(const float* x, int64_t n, double* out, double* ws, cudaStream_t stream);
void sum(const bf16* x, int64_t n, double* out, double* ws, cudaStream_t stream);
/// *out (one device double) = sum of x^2 (double partials).
void sum_squares(const float* x, int64_t n, double* out, double* ws, cudaStream_t stream);
void sum_squares(const bf16* x, int64_t n, double* out, double* ws, cudaStream_t stream);
/// One span of sum_squares_batch: n floats from x (device), its sum of squares to out[slot].
struct SquareSpan {
  const float* x;
  int64_t n;
  int64_t slot;
};
/// Most floats a span of sum_squares_batch may hold: sum_squares reduces such a span with one
/// block, so the batch, one block per span in the same order of additions, gives its bits.
int64_t batch_span_max_floats();
/// out[spans[k].slot] = sum of squares of span k, k < count; spans in device memory, each of
/// at most batch_span_max_floats() floats. One launch for the whole batch.
void sum_squares_batch(const SquareSpan* spans, int count, double* out, cudaStream_t stream);
/// *out (one device int) = 1 when every element is finite, else 0.
void all_finite(const float* x, int64_t n, int* out, cudaStream_t stream);
void all_finite(const bf16* x, int64_t n, int* out, cudaStream_t stream);

// ---- softmax and cross-entropy (softmax.cu) --------------------------------------------

/// In-place numerically stable softmax of each row of x (rows, V).
void softmax_rows(float* x, int64_t rows, int V, cudaStream_t stream);
void softmax_rows(bf16* x, int64_t rows, int V, cudaStream_t stream);
/// Fused softmax cross-entropy, forward and backward in one pass (as cpu::cross_entropy):
/// row_loss (rows) = -log softmax(logits)[target] in nats (NaN for a target outside [0, V));
/// row_hit (rows, may be null) = 1 where argmax == target; dlogits (null, separate, or logits
/// itself: in place) = (softmax(logits) - onehot(targets)) * scale. The mean loss is
/// sum(row_loss) / rows (see sum()).
void cross_entropy(const float* logits, const int32_t* targets, float* dlogits, float* row_loss, int32_t* row_hit,
                   int64_t rows, int V, float scale, cudaStream_t stream);
/// The same over bf16 logits and dlogits: each logit read as a float, the reductions in fp32,
/// each gradient rounded to bf16 once (the losses as the float kernel's on the rounded logits).
void cross_entropy(const bf16* logits, const int32_t* targets, bf16* dlogits, float* row_loss, int32_t* row_hit,
                   int64_t rows, int V, float scale, cudaStream_t stream);

// ---- normalisation (norm.cu) -----------------------------------------------------------

/// LayerNorm over the last dimension: x (rows, C) -> y; mean, rstd (rows) for the backward.
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps, cudaStream_t stream);
void layernorm_forward(const bf16* x, const float* gamma, const float* beta, bf16* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps, cudaStream_t stream);
/// LayerNorm backward: dx (rows, C) accumulated (+=); dgamma, dbeta (C) accumulated when
/// non-null (rows summed in a fixed order). ws: column_grad_workspace_floats(rows, C) floats.
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int64_t rows, int C, float* ws, cudaStream_t stream);
/// RMSNorm (as cpu::rmsnorm_forward): y (rows, C) = x * rstd * gamma; rstd (rows) written.
void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C, float eps,
                     cudaStream_t stream);
/// RMSNorm output from the forward's rstd (recompute in backward).
void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C,
                   cudaStream_t stream);
/// RMSNorm backward: dx (rows, C) accumulated (+=); dgamma (C) accumulated when non-null.
/// ws: column_grad_workspace_floats(rows, C) floats.
void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx, float* dgamma,
                      int64_t rows, int C, float* ws, cudaStream_t stream);
/// BatchNorm2d forward on x (N, C, HW), as cpu::batchnorm_forward (training: batch
/// statistics, mean/rstd written, running stats updated with unbiased variance; eval:
/// running statistics).
void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                       float eps, cudaStream_t stream);
/// BatchNorm2d backward: dx written; dgamma/dbeta accumulated for channels < grad_channels.
void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels,
                        cudaStream_t stream);

// ---- embedding (embedding.cu) ----------------------------------------------------------

/// y (rows, C) (=|+=) w[ids[r]] (w: (num, C)). A row whose id lies outside [0, num) is left
/// untouched (the CUDA backend counts them with count_out_of_range and raises the error).
void embedding_forward(const int32_t* ids, const float* w, float* y, int64_t rows, int64_t C, int64_t num,
                       bool accumulate, cudaStream_t stream);
/// Bytes of workspace embedding_backward needs for `rows` ids.
size_t embedding_backward_workspace_bytes(int64_t rows);
/// dw[ids[r]] += dy[r] for every row, dy (rows, C), dw (num, C): rows are sorted by id (stable
/// radix sort) and each id's rows summed in row order, so the result is deterministic (no
/// float atomics). A row whose id lies outside [0, num) is skipped. ws: ws_bytes of device
/// memory; throws (cudaErrorInvalidValue) when ws_bytes < embedding_backward_workspace_bytes.
void embedding_backward(const int32_t* ids, const float* dy, float* dw, int64_t rows, int64_t C, int64_t num, void* ws,
                        size_t ws_bytes, cudaStream_t stream);

// ---- attention (attention.cu) ----------------------------------------------------------

/// Widest head the attention kernels are compiled for (their per-thread rows are HD floats).
constexpr int kMaxAttentionHeadDim = kCudaMaxAttentionHeadDim;
/// Floats of workspace attention_backward needs: the log-sum-exp and rowsum(dy * y) of each
/// (sequence, head, row), 2 B H T; no (T, T) matrix.
int64_t attention_workspace_floats(const AttentionShape& s);
/// Flash-style causal attention, as cpu::attention_forward: y (B, T, H*hd) from qkv
/// (B, T, (H + 2 KV)*hd), float32, grouped-query when KV < H; lse (B, H, T), the rows'
/// log-sum-exp of the scaled scores, when not null. Throws std::invalid_argument when hd is
/// outside 1..kMaxAttentionHeadDim or KV does not divide H.
void attention_forward(const AttentionShape& s, const float* qkv, float* y, float* lse, cudaStream_t stream);
/// attention_forward on tensor cores (attention_tc.cu, precision = "bf16"): q, k, v and the
/// probabilities rounded to bf16, products summed in float; y and lse as attention_forward's
/// within bf16 rounding, lse in base 2 (the form attention_backward_tc reads from
/// AttentionKept::lse, bit for bit what its own statistics pass computes) when lse_base2.
/// Returns false (nothing launched) unless hd is a multiple of 16 up to kMaxAttentionHeadDim
/// and KV divides H.
bool attention_forward_tc(const AttentionShape& s, const float* qkv, float* y, float* lse, cudaStream_t stream,
                          bool lse_base2 = false);
/// Floats of workspace attention_backward_tc needs: attention_workspace_floats(s) (rounded
/// up to 16 bytes) for the statistics, then dy rounded to bf16, B T H*hd / 2 floats.
int64_t attention_tc_workspace_floats(const AttentionShape& s);
/// attention_backward on tensor cores (attention_tc_backward.cu, precision = "bf16"): the
/// statistics and a bf16 copy of dy from the tensor-core forward run again (or, with kept, the
/// forward's base-2 log-sum-exp and delta from its kept output: attention_delta), then dk / dv
/// and dq with q, k, v, dy and the probabilities and score gradients rounded to bf16, float
/// sums; ws: attention_tc_workspace_floats(s) floats, 16-byte aligned. Returns false (nothing
/// launched) where attention_forward_tc would.
bool attention_backward_tc(const AttentionShape& s, const float* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream, const AttentionKept* kept = nullptr);
/// True when the tensor-core kernels take shape s: hd a multiple of 16 up to
/// kMaxAttentionHeadDim, KV dividing H (where attention_forward_tc would not return false).
bool attention_tc_supported(const AttentionShape& s);
/// attention_forward_tc and attention_backward_tc reading q, k, v as bf16 (B, T, (H + 2 KV)*hd)
/// rows, the layer's kept copy: no float32 copy of them and no conversion pass. Bit for bit
/// the float overloads' results on that copy's float values (the kernels round what they load
/// to bf16 either way); dqkv, dy, y and lse stay float32. Same returns.
bool attention_forward_tc(const AttentionShape& s, const bf16* qkv, float* y, float* lse, cudaStream_t stream,
                          bool lse_base2 = false);
bool attention_backward_tc(const AttentionShape& s, const bf16* qkv, const float* dy, float* dqkv, float* ws,
                           cudaStream_t stream, const AttentionKept* kept = nullptr);
/// Backward of attention_forward, as cpu::attention_backward: dqkv (B, T, (H + 2 KV)*hd)
/// written from dy (B, T, H*hd); recomputes the forward's statistics into ws
/// (attention_workspace_floats(s) floats), or with kept takes the forward's log-sum-exp
/// (natural log, as attention_forward writes it) and forms delta from its kept output
/// (attention_delta), one pass over y and dy instead of the forward's products. A key / value
/// head sums its query heads' shares in head order. Deterministic (no atomics).
void attention_backward(const AttentionShape& s, const float* qkv, const float* dy, float* dqkv, float* ws,
                        cudaStream_t stream, const AttentionKept* kept = nullptr);
/// delta (B, H, T) = kept.y_scale * rowsum(dy * kept.y) per (sequence, head, row), dy and
/// kept.y (B, T, H*hd) rows (kept.y float32 or bf16); dy16 (unless null) = dy rounded to bf16,
/// as the tensor-core statistics pass writes it. One warp a row: a fixed order, deterministic.
void attention_delta(const AttentionShape& s, const AttentionKept& kept, const float* dy, float* delta, bf16* dy16,
                     cudaStream_t stream);

// ---- convolution and pooling (conv.cu) -------------------------------------------------

/// cols (n, Cin*k*k, Ho*Wo) = im2col of n images x (n, Cin, H, W); padding reads as 0.
void im2col(const ConvShape& s, const float* x, float* cols, int n, cudaStream_t stream);
/// dx (n, Cin, H, W) = col2im(cols (n, Cin*k*k, Ho*Wo)), written (each input pixel gathers
/// its contributions in a fixed order: no atomics).
void col2im(const ConvShape& s, const float* cols, float* dx, int n, cudaStream_t stream);
/// Floats of workspace conv2d_forward / conv2d_backward need with `chunk` samples per
/// im2col pass (larger chunks: fewer, larger GEMMs): chunk * (Cin*k*k + Cout) * Ho*Wo.
int64_t conv2d_workspace_floats(const ConvShape& s, int chunk);
/// As cpu::conv2d_forward: y (N, Cout, Ho, Wo) = conv(x, w), no bias.
void conv2d_forward(const ConvShape& s, const float* x, const float* w, float* y, float* ws, int chunk,
                    cudaStream_t stream);
/// As cpu::conv2d_backward (without its accumulate_dx): dx written when non-null; dw
/// (dw_cout, dw_cin, k, k) accumulated
/// (+=) with the gradient of the prefix w[:dw_cout, :dw_cin] when non-null.
void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int dw_cout, int dw_cin, float* ws, int chunk, cudaStream_t stream);
/// y (N, C) = mean over HW of x (N, C, HW).
void global_avg_pool_forward(const float* x, float* y, int N, int C, int HW, cudaStream_t stream);
/// dx (N, C, HW) = dy (N, C) / HW broadcast.
void global_avg_pool_backward(const float* dy, float* dx, int N, int C, int HW, cudaStream_t stream);

// ---- optimizers (optimizer.cu), formulas of engine/optim/optimizer.cpp -----------------------

/// torch.optim.SGD on one run of n values: d = g + wd * w; with buf: buf = first ? d :
/// momentum * buf + d, d = nesterov ? d + momentum * buf : buf; w -= lr * d. buf may be null
/// (no momentum).
void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float weight_decay,
                bool nesterov, bool first, cudaStream_t stream);
/// torch.optim.AdamW on one run of n values at step t (1-based, already incremented):
/// w = w * (1 - lr*wd) - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) after the moment updates.
void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t t, cudaStream_t stream);
/// The same update from the scalars cpu::adamw_update takes: step_size = lr / (1 - beta1^t),
/// bc2_sqrt = sqrt(1 - beta2^t), decay = 1 - lr * weight_decay (the CUDA backend's entry).
void adamw_update_scaled(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float bc2_sqrt,
                         float decay, float eps, float beta1, float beta2, cudaStream_t stream);
/// Longest chunk the multi-tensor updates take: callers cut longer runs (one block per chunk).
int64_t update_chunk_floats();
/// Multi-tensor sgd_update over `count` chunks (device memory; s0 = buf, or null), one launch;
/// adds the non-finite values written to *nonfinite. Each element gets sgd_update's bits.
void sgd_update_chunks(const UpdateRun* chunks, int64_t count, float lr, float momentum, float weight_decay,
                       bool nesterov, bool first, unsigned long long* nonfinite, cudaStream_t stream);
/// Multi-tensor adamw_update_scaled over `count` chunks (device memory; s0 = m, s1 = v), one
/// launch; adds the non-finite values written (w, m, v) to *nonfinite. The same bits per element.
void adamw_update_chunks(const UpdateRun* chunks, int64_t count, float step_size, float bc2_sqrt, float decay,
                         float eps, float beta1, float beta2, unsigned long long* nonfinite, cudaStream_t stream);

// ---- GEMM through cuBLAS (gemm.cpp) ----------------------------------------------------

/// The calling thread's cuBLAS handle for the current device (created on first use).
cublasHandle_t cublas_handle();
/// The precision of sgemm and sgemm_strided_batched ([device] precision); operands, results
/// and the sums are float32 in memory in every case.
enum class GemmMath {
  fp32,  // pure float32 (the default): the CPU's results to fp32 rounding
  tf32,  // CUBLAS_TF32_TENSOR_OP_MATH: operands rounded to 10 mantissa bits, fp32 sums
  bf16,  // CUBLAS_COMPUTE_32F_FAST_16BF: operands rounded to bf16 (7 mantissa bits; cuBLAS may
         // pick TF32 instead), fp32 sums, on the bf16 tensor cores
};
/// From now on, every thread.
void set_gemm_math(GemmMath math);
GemmMath gemm_math();
/// "fp32", "tf32" or "bf16".
const char* gemm_math_name(GemmMath math);
/// As cpu::sgemm, row-major: C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, in the
/// precision set_gemm_math chose. Runs cuBLAS on the column-major transposes (operands swapped).
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc, cudaStream_t stream);
/// `batch` independent sgemm calls; matrix i starts stride_* elements after matrix i-1
/// (stride 0 shares one operand).
void sgemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           int64_t stride_a, const float* B, int ldb, int64_t stride_b, float beta, float* C, int ldc,
                           int64_t stride_c, int batch, cudaStream_t stream);
/// cuBLASLt's workspace for linear_lt and linear_dx_dgelu_lt: device memory, 256-byte
/// aligned, `bytes` long (0: none; the heuristic then offers only algorithms that need none).
/// The heuristic may choose split-K or stream-K algorithms that use it.
struct LtWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};
/// The workspace the CUDA backend gives cuBLASLt: 32 MiB, cuBLAS's recommendation for Hopper
/// (cuBLAS documentation, cublasSetWorkspace; PyTorch's cuBLASLt workspace on sm_90).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
/// From now on cuBLAS's GEMMs on `stream` (sgemm, sgemm_strided_batched, gemm) use `ws` as
/// their workspace (cublasSetWorkspace), not the library's default pool, which cuBLAS would
/// otherwise take from device memory outside the caller's pool, uncounted by the planner. The
/// caller keeps ws alive while GEMMs run on the stream, and shares it only with work ordered on
/// that stream (cuBLASLt's calls there may use the same bytes). An empty ws (data null) forgets
/// the stream's workspace.
void set_gemm_workspace(cudaStream_t stream, LtWorkspace ws);
/// A linear layer's forward as one cuBLASLt GEMM (gemm_lt.cpp), row-major, float32, in the
/// precision set_gemm_math chose: y (rows, out) = x (rows, in) . w^T (in, out) + b (b: out
/// floats, or null), and with pre (rows, out) not null: pre = that, y = gelu(pre) (tanh form),
/// by the epilogues BIAS, GELU_AUX_BIAS or GELU_AUX. Returns false, having done nothing, where
/// the fusion has nothing to fuse (no bias, no GELU), a size is 0, `out` is not a multiple of 8
/// under GELU (the library's rule for pre's leading dimension), b or pre is not 16-byte aligned,
/// or cuBLASLt offers no algorithm or refuses the one it offered (lt_matmul_refusals):
/// the caller then runs sgemm and its own kernels. ws: the workspace cuBLASLt may use.
bool linear_lt(const float* x, const float* w, const float* b, float* y, float* pre, int64_t rows, int64_t in,
               int64_t out, LtWorkspace ws, cudaStream_t stream);
/// A linear layer's input gradient through the GELU before it, as one cuBLASLt GEMM with the
/// DGELU epilogue: dx (rows, in) = (dy (rows, out) . w (out, in)) * gelu'(pre), pre (rows, in)
/// the GELU's input. Returns false, having done nothing, where a size is 0, `in` is not a
/// multiple of 8, pre is not 16-byte aligned or cuBLASLt offers or runs no algorithm.
bool linear_dx_dgelu_lt(const float* dy, const float* w, const float* pre, float* dx, int64_t rows, int64_t in,
                        int64_t out, LtWorkspace ws, cudaStream_t stream);
/// cuBLASLt heuristic queries the calling thread has made (linear_lt and linear_dx_dgelu_lt
/// ask once per problem: shape, epilogue, compute type, device, the operands', bias's and
/// auxiliary buffer's alignments and the workspace offered).
int64_t lt_heuristic_queries();
/// Algorithms the calling thread's cublasLtMatmul refused (NOT_SUPPORTED) after its heuristic
/// offered them: linear_lt and linear_dx_dgelu_lt then returned false (the caller's unfused
/// path ran), warned once on stderr, and decline that problem from then on.
int64_t lt_matmul_refusals();
/// bf16 GEMM (cublasGemmEx, fp32 accumulation: CUBLAS_COMPUTE_32F), bf16 or fp32 output.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, bf16* C, int ldc, cudaStream_t stream);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, float* C, int ldc, cudaStream_t stream);

}  // namespace subdp::cuda
