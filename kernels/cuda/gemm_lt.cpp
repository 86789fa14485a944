// A linear layer's forward as one cuBLASLt GEMM with its bias / GELU epilogue (issue 41:
// fused bias and GELU), row-major as gemm.cpp: y (rows, out) = x (rows, in) w^T is, column-
// major, D (out, rows) = op(W) (out, in) X (in, rows) with W stored (in, out) and transposed.
// Handles are per thread and device (handle_cache.h); descriptors are made per call (host work
// of microseconds against a GEMM's device time).
#include <cublasLt.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handle_cache.h"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

cublasLtHandle_t lt_handle() { return thread_device_handle<cublasLtHandle_t, &cublasLtCreate, &cublasLtDestroy>(); }

/// One call's descriptors, destroyed on every path out.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, d})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

/// The compute type of set_gemm_math's precision (the fp32 operands rounded as cuBLAS's sgemm
/// would round them in that mode).
cublasComputeType_t compute_type() {
  switch (gemm_math()) {
    case GemmMath::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmMath::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmMath::fp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

/// The largest power of two up to 256 that divides p's address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 4 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

void set_alignment(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* p) {
  const uint32_t a = alignment_of(p);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &a, sizeof(a)));
}

}  // namespace

bool linear_lt(const float* x, const float* w, const float* b, float* y, float* pre, int64_t rows, int64_t in,
               int64_t out, cudaStream_t stream) {
  if ((b == nullptr && pre == nullptr) || rows <= 0 || in <= 0 || out <= 0 || rows > INT_MAX || in > INT_MAX ||
      out > INT_MAX)
    return false;
  if (pre != nullptr && out % 8 != 0) return false;  // the library's rule for the GELU input's ld
  // The bias and the GELU input have no alignment preference to state: run only on the
  // 16-byte alignment any vectorised epilogue could want (a separately allocated tensor has it).
  if (alignment_of(b) < 16 || alignment_of(pre) < 16) return false;
  LtCall c;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&c.desc, compute_type(), CUDA_R_32F));
  set_desc(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T});
  const cublasLtEpilogue_t epilogue = pre == nullptr ? CUBLASLT_EPILOGUE_BIAS
                                      : b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                     : CUBLASLT_EPILOGUE_GELU_AUX;
  set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (b != nullptr) set_desc(c.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(b));
  if (pre != nullptr) {
    set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(pre));
    set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, out);
  }
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.a, CUDA_R_32F, in, out, in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.b, CUDA_R_32F, in, rows, in));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, out, rows, out));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&c.pref));
  const uint64_t no_workspace = 0;  // nothing the planner does not count
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &no_workspace,
                                                    sizeof(no_workspace)));
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, w);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, x);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, y);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, y);
  cublasLtHandle_t h = lt_handle();
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, c.desc, c.a, c.b, c.d, c.d, c.pref, 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return false;
  CUBLAS_CHECK(st);
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(
      cublasLtMatmul(h, c.desc, &alpha, w, c.a, x, c.b, &beta, y, c.d, y, c.d, &result.algo, nullptr, 0, stream));
  return true;
}

}  // namespace subdp::cuda
