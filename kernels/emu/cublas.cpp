// The emulated cuBLAS (cublas.h): argument rules first (as cuBLAS returns
// CUBLAS_STATUS_INVALID_VALUE for them), then the GEMM queued on the handle's stream,
// computed by OpenBLAS in column-major order; bf16 operands are widened to float and a bf16
// result rounded to nearest even; under CUBLAS_TF32_TENSOR_OP_MATH float32 operands are
// rounded to TF32 first, as the tensor cores read them.
#include "kernels/emu/cublas.h"

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/emu/blas_ref.h"
#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/streams.h"

namespace subdp::emu {

struct BlasHandle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

}  // namespace subdp::emu

using namespace subdp::emu;

namespace {

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

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new BlasHandle();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream_of(stream) == nullptr) return invalid("cublasSetStream", "destroyed stream");
  handle->stream = stream;
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
  const char* call = "cublasSgemmStridedBatched";
  const Operand a{"A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, strideA, 4};
  const Operand b{"B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, strideB, 4};
  const Operand c{"C", C, m, n, ldc, strideC, 4};
  const cublasStatus_t st = check_gemm(call, handle, transa, transb, m, n, k, alpha, beta, a, b, c, batchCount);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0 || batchCount == 0) return st;
  Stream* s = stream_or_null(handle);
  if (s == nullptr) return invalid(call, "the handle's stream was destroyed");
  const float al = *alpha, be = *beta;
  // CUBLAS_TF32_TENSOR_OP_MATH: the operands as the tensor cores read them (TF32), fp32 sums.
  const bool tf32 = (handle->math & CUBLAS_TF32_TENSOR_OP_MATH) != 0;
  const int64_t na = extent(a, batchCount), nb = extent(b, batchCount);
  enqueue(s, call, [=] {
    std::vector<float> ra, rb;
    const float *pa = A, *pb = B;
    if (tf32 && k > 0) {
      ra = tf32_copy(A, na);
      rb = tf32_copy(B, nb);
      pa = ra.data();
      pb = rb.data();
    }
    for (int i = 0; i < batchCount; ++i)
      cblas_sgemm(CblasColMajor, cblas_op(transa), cblas_op(transb), m, n, k, al, pa + i * strideA, lda,
                  pb + i * strideB, ldb, be, C + i * strideC, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                           const float* beta, float* C, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  const char* call = "cublasGemmEx";
  // The combinations subdp uses, from the table of cublasGemmEx: fp32 compute over fp32 or
  // bf16 inputs, with a matching (or fp32) output.
  const bool types_ok = computeType == CUBLAS_COMPUTE_32F && Atype == Btype &&
                        (Atype == CUDA_R_32F ? Ctype == CUDA_R_32F
                                             : Atype == CUDA_R_16BF && (Ctype == CUDA_R_16BF || Ctype == CUDA_R_32F));
  if (!types_ok) {
    std::fprintf(stderr, "subdp CUDA emulator: %s: unsupported type combination\n", call);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const Operand a{"A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, 0, type_size(Atype)};
  const Operand b{"B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, 0, type_size(Btype)};
  const Operand c{"C", C, m, n, ldc, 0, type_size(Ctype)};
  const cublasStatus_t st = check_gemm(call, handle, transa, transb, m, n, k, alpha, beta, a, b, c, 1);
  if (st != CUBLAS_STATUS_SUCCESS || m == 0 || n == 0) return st;
  Stream* s = stream_or_null(handle);
  if (s == nullptr) return invalid(call, "the handle's stream was destroyed");
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  enqueue(s, call, [=] {
    const std::vector<float> fa = widen(A, Atype, extent(a, 1)), fb = widen(B, Btype, extent(b, 1));
    std::vector<float> fc = widen(C, Ctype, extent(c, 1));
    cblas_sgemm(CblasColMajor, cblas_op(transa), cblas_op(transb), m, n, k, al, fa.data(), lda, fb.data(), ldb, be,
                fc.data(), ldc);
    store(fc, C, Ctype, m, n, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}
