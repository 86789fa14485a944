// The emulated cuBLAS (cublas.h): argument rules first (as cuBLAS returns
// CUBLAS_STATUS_INVALID_VALUE for them), then the GEMM queued on the handle's stream,
// computed by OpenBLAS in column-major order; bf16 operands are widened to float and a bf16
// result rounded to nearest even; under CUBLAS_TF32_TENSOR_OP_MATH (or the compute types
// CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF) float32 operands are rounded to TF32 (bf16) first,
// as the tensor cores read them.
#include "kernels/emu/cublas.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/emu/blas_ref.h"
#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/runtime.h"
#include "kernels/emu/streams.h"

namespace subdp::emu {

struct BlasHandle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;  // cublasSetWorkspace's, in use until the next cublasSetStream
  size_t workspace_bytes = 0;
  bool user_workspace = false;
  void* default_pool = nullptr;  // the library's own, taken at the first GEMM that needs it
};

}  // namespace subdp::emu

using namespace subdp::emu;

namespace {

/// The library's default workspace pool: the size of CUBLAS_WORKSPACE_CONFIG's documented
/// default (":4096:2:16:8", 2 x 4 MiB + 8 x 16 KiB). Device memory outside any pool of the
/// caller's, as on a GPU, where it shows only in cudaMemGetInfo.
constexpr size_t kDefaultPoolBytes = 2 * (size_t{4096} << 10) + 8 * (size_t{16} << 10);
/// How much of a caller's workspace a GEMM overwrites (its split-K partial sums), in stream
/// order, so that a tensor sharing the workspace is lost as on a device.
constexpr size_t kScribbledBytes = size_t{1} << 20;

cublasStatus_t invalid(const char* call, const std::string& why) {
  std::fprintf(stderr, "subdp CUDA emulator: %s: %s\n", call, why.c_str());
  set_error(cudaErrorInvalidValue, std::string(call) + ": " + why);
  return CUBLAS_STATUS_INVALID_VALUE;
}

/// The rules every GEMM shares; CUBLAS_STATUS_SUCCESS when the call may run.
cublasStatus_t check_gemm(const char* call, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const void* alpha, const void* beta, const Operand& a, const Operand& b,
                          const Operand& c, int batch) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ta > CUBLAS_OP_C || tb > CUBLAS_OP_C) return invalid(call, "unknown cublasOperation_t");
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return invalid(call, "negative m, n, k or batchCount (" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                             std::to_string(k) + ", " + std::to_string(batch) + ")");
  for (const Operand* o : {&a, &b, &c})
    if (o->ld < std::max<int64_t>(1, o->rows))
      return invalid(call, std::string("leading dimension of ") + o->name + " is " + std::to_string(o->ld) +
                               ", less than its " + std::to_string(o->rows) + " stored rows");
  if (alpha == nullptr || beta == nullptr) return invalid(call, "alpha or beta is null");
  for (const void* s : {alpha, beta})
    if (region_of(s, 0) == Region::device)
      return invalid(call, "alpha or beta points to device memory, but the pointer mode is host");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  for (const Operand* o : {&a, &b, &c}) {
    if (o == &a || o == &b) {
      if (k == 0) continue;
    }
    const size_t bytes = static_cast<size_t>(extent(*o, batch)) * o->element;
    if (region_of(o->p, bytes) != Region::device)
      return invalid(call, std::string("matrix ") + o->name + " (" + std::to_string(bytes) + " bytes with its " +
                               "leading dimension, strides and batch count) is " + describe_region(o->p, bytes) +
                               ", not device memory");
  }
  return CUBLAS_STATUS_SUCCESS;
}

Stream* stream_or_null(cublasHandle_t h) { return stream_of(h->stream); }

/// One GEMM call of any entry point, column-major as cuBLAS sees it.
struct GemmArgs {
  const char* call;
  cublasOperation_t ta, tb;
  int m, n, k;
  Operand a, b, c;
  cudaDataType_t at, bt, ct;
  int batch;
  cublasComputeType_t compute;
};

/// The type combinations subdp uses, from cublasGemmEx's table: fp32 compute over fp32 or
/// bf16 inputs with a matching (or fp32) output; the fast fp32 modes over fp32 only.
bool supported_types(const GemmArgs& g) {
  if (g.at != g.bt) return false;
  if (g.compute == CUBLAS_COMPUTE_32F_FAST_16BF || g.compute == CUBLAS_COMPUTE_32F_FAST_TF32)
    return g.at == CUDA_R_32F && g.ct == CUDA_R_32F;
  if (g.compute != CUBLAS_COMPUTE_32F) return false;
  return g.at == CUDA_R_32F ? g.ct == CUDA_R_32F : g.at == CUDA_R_16BF && (g.ct == CUDA_R_16BF || g.ct == CUDA_R_32F);
}

/// Batch entry i of an operand as floats: widened from bf16, or rounded as the compute type's
/// tensor cores read float32 operands (inputs only).
std::vector<float> entry_floats(const Operand& o, cudaDataType_t type, int i, cublasComputeType_t compute, bool input) {
  const char* base = static_cast<const char*>(o.p) + static_cast<size_t>(i) * o.stride * o.element;
  std::vector<float> v = widen(base, type, extent(o, 1));
  if (input && type == CUDA_R_32F) round_as_read(v, compute);
  return v;
}

/// Checks the call (cuBLAS's status for a bad one) and queues the batched GEMM on the handle's
/// stream: per entry, alpha op(A) op(B) + beta C in float over the operands as read, stored as
/// C's type.
cublasStatus_t run_gemm(cublasHandle_t handle, const GemmArgs& g, const float* alpha, const float* beta) {
  if (!supported_types(g)) {
    std::fprintf(stderr, "subdp CUDA emulator: %s: unsupported type combination\n", g.call);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const cublasStatus_t st = check_gemm(g.call, handle, g.ta, g.tb, g.m, g.n, g.k, alpha, beta, g.a, g.b, g.c, g.batch);
  if (st != CUBLAS_STATUS_SUCCESS || g.m == 0 || g.n == 0 || g.batch == 0) return st;
  Stream* s = stream_or_null(handle);
  if (s == nullptr) return invalid(g.call, "the handle's stream was destroyed");
  void* scribbled = handle->user_workspace ? handle->workspace : nullptr;
  const size_t scribbled_bytes = std::min(handle->workspace_bytes, kScribbledBytes);
  if (!handle->user_workspace && handle->default_pool == nullptr &&
      cudaMalloc(&handle->default_pool, kDefaultPoolBytes) != cudaSuccess)
    return CUBLAS_STATUS_ALLOC_FAILED;
  const float al = *alpha, be = *beta;
  enqueue(s, g.call, [g, al, be, scribbled, scribbled_bytes] {
    if (scribbled != nullptr) std::memset(scribbled, 0xff, scribbled_bytes);
    for (int i = 0; i < g.batch; ++i) {
      const std::vector<float> fa = entry_floats(g.a, g.at, i, g.compute, true);
      const std::vector<float> fb = entry_floats(g.b, g.bt, i, g.compute, true);
      std::vector<float> fc = entry_floats(g.c, g.ct, i, g.compute, false);
      cblas_sgemm(CblasColMajor, cblas_op(g.ta), cblas_op(g.tb), g.m, g.n, g.k, al, fa.data(), static_cast<int>(g.a.ld),
                  fb.data(), static_cast<int>(g.b.ld), be, fc.data(), static_cast<int>(g.c.ld));
      store(fc, const_cast<char*>(static_cast<const char*>(g.c.p)) + static_cast<size_t>(i) * g.c.stride * g.c.element,
            g.ct, g.m, g.n, g.c.ld);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new BlasHandle();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (handle->default_pool != nullptr) cudaFree(handle->default_pool);  // at thread exit: nobody to tell
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream_of(stream) == nullptr) return invalid("cublasSetStream", "destroyed stream");
  handle->stream = stream;
  handle->user_workspace = false;  // cuBLAS: "unconditionally resets" it to the default pool
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspaceSizeInBytes > 0) {
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
      return invalid("cublasSetWorkspace", "the workspace is not 256-byte aligned");
    if (region_of(workspace, workspaceSizeInBytes) != Region::device)
      return invalid("cublasSetWorkspace", "the workspace (" + std::to_string(workspaceSizeInBytes) + " bytes) is " +
                                               describe_region(workspace, workspaceSizeInBytes) +
                                               ", not device memory");
  }
  handle->workspace = workspace;
  handle->workspace_bytes = workspaceSizeInBytes;
  handle->user_workspace = true;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb, long long strideB,
                                         const float* beta, float* C, int ldc, long long strideC, int batchCount) {
  // CUBLAS_TF32_TENSOR_OP_MATH: the operands as the TF32 tensor cores read them, fp32 sums.
  const bool tf32 = handle != nullptr && (handle->math & CUBLAS_TF32_TENSOR_OP_MATH) != 0;
  const GemmArgs g{"cublasSgemmStridedBatched",
                   transa,
                   transb,
                   m,
                   n,
                   k,
                   {"A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, strideA, 4},
                   {"B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, strideB, 4},
                   {"C", C, m, n, ldc, strideC, 4},
                   CUDA_R_32F,
                   CUDA_R_32F,
                   CUDA_R_32F,
                   batchCount,
                   tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
  return run_gemm(handle, g, alpha, beta);
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  const GemmArgs g{
      "cublasGemmStridedBatchedEx",
      transa,
      transb,
      m,
      n,
      k,
      {"A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, strideA, type_size(Atype)},
      {"B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, strideB, type_size(Btype)},
      {"C", C, m, n, ldc, strideC, type_size(Ctype)},
      Atype,
      Btype,
      Ctype,
      batchCount,
      computeType};
  return run_gemm(handle, g, static_cast<const float*>(alpha), static_cast<const float*>(beta));
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                    Ctype, ldc, 0, 1, computeType, algo);
}
