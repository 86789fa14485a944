// Row-major GEMM through cuBLAS (column-major): a row-major C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so each call passes B before A and swaps M and N.
// Handles are per thread and device (handle_cache.h), bound to the caller's stream on every
// call, with the stream's workspace (set_gemm_workspace) if it has one. The float32 GEMMs run in the precision
// set_gemm_math chose: fp32, TF32 (the math mode) or bf16 (cublasGemmEx's compute type).
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handle_cache.h"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

std::atomic<GemmMath> g_math{GemmMath::fp32};

/// set_gemm_workspace's table: few streams (one per backend), so a vector.
struct StreamWorkspaces {
  std::mutex mutex;
  std::vector<std::pair<cudaStream_t, LtWorkspace>> entries;
};
StreamWorkspaces& stream_workspaces() {
  static StreamWorkspaces table;
  return table;
}

LtWorkspace workspace_of(cudaStream_t stream) {
  StreamWorkspaces& t = stream_workspaces();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& [s, ws] : t.entries)
    if (s == stream) return ws;
  return {};
}

/// The handle on `stream`, with its workspace, in the math mode set_gemm_math chose (all set
/// on every call: the handles are per thread, and cublasSetStream resets the workspace to the
/// default pool).
cublasHandle_t bound_handle(cudaStream_t stream) {
  cublasHandle_t h = cublas_handle();
  CUBLAS_CHECK(cublasSetStream(h, stream));
  if (const LtWorkspace ws = workspace_of(stream); ws.data != nullptr)
    CUBLAS_CHECK(cublasSetWorkspace(h, ws.data, ws.bytes));
  CUBLAS_CHECK(cublasSetMathMode(h, g_math == GemmMath::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return h;
}

template <class TC>
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B,
               int ldb, float beta, TC* C, int ldc, cudaDataType_t c_type, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  CUBLAS_CHECK(cublasGemmEx(bound_handle(stream), op(trans_b), op(trans_a), N, M, K, &alpha, B, CUDA_R_16BF, ldb, A,
                            CUDA_R_16BF, lda, &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void set_gemm_workspace(cudaStream_t stream, LtWorkspace ws) {
  StreamWorkspaces& t = stream_workspaces();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& e = t.entries;
  e.erase(std::remove_if(e.begin(), e.end(), [&](const auto& entry) { return entry.first == stream; }), e.end());
  if (ws.data != nullptr) e.emplace_back(stream, ws);
}

void set_gemm_math(GemmMath math) { g_math = math; }
GemmMath gemm_math() { return g_math; }

const char* gemm_math_name(GemmMath math) {
  switch (math) {
    case GemmMath::fp32: return "fp32";
    case GemmMath::tf32: return "tf32";
    case GemmMath::bf16: return "bf16";
  }
  return "?";
}

cublasHandle_t cublas_handle() {
  // Made in CUBLAS_DEFAULT_MATH (pure fp32); bound_handle sets set_gemm_math's mode per call.
  return thread_device_handle<cublasHandle_t, &cublasCreate, &cublasDestroy>();
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc, cudaStream_t stream) {
  sgemm_strided_batched(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, stream);
}

void sgemm_strided_batched(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           int64_t stride_a, const float* B, int ldb, int64_t stride_b, float beta, float* C, int ldc,
                           int64_t stride_c, int batch, cudaStream_t stream) {
  if (M == 0 || N == 0 || batch == 0) return;
  cublasHandle_t h = bound_handle(stream);
  if (g_math == GemmMath::bf16) {  // fp32 in and out, bf16 tensor cores: cuBLAS rounds the operands
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op(trans_b), op(trans_a), N, M, K, &alpha, B, CUDA_R_32F, ldb, stride_b,
                                            A, CUDA_R_32F, lda, stride_a, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
                                            CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
  } else if (batch == 1) {
    CUBLAS_CHECK(cublasSgemm(h, op(trans_b), op(trans_a), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  } else {
    CUBLAS_CHECK(cublasSgemmStridedBatched(h, op(trans_b), op(trans_a), N, M, K, &alpha, B, ldb, stride_b, A, lda,
                                           stride_a, &beta, C, ldc, stride_c, batch));
  }
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, bf16* C, int ldc, cudaStream_t stream) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_16BF, stream);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda, const bf16* B, int ldb,
          float beta, float* C, int ldc, cudaStream_t stream) {
  gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F, stream);
}

}  // namespace subdp::cuda
