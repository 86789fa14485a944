// A linear layer's forward as one cuBLASLt GEMM with its bias / GELU epilogue (issue 41:
// fused bias and GELU), row-major as gemm.cpp: y (rows, out) = x (rows, in) w^T is, column-
// major, D (out, rows) = op(W) (out, in) X (in, rows) with W stored (in, out) and transposed.
// Handles are per thread and device (handle_cache.h); descriptors are made per call (host work
// of microseconds against a GEMM's device time); the heuristic's answer, tens of microseconds
// of host time, is kept per thread for each problem (shape, epilogue, compute type, device,
// the alignments the algorithm may rely on and the workspace offered). An algorithm that
// cublasLtMatmul refuses (NOT_SUPPORTED) is forgotten with a warning and the caller runs its
// unfused path, as PyTorch's gemm_and_bias does, rather than stopping the run.
#include <cublasLt.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <tuple>

#include "kernels/cuda/check.h"
#include "kernels/cuda/handle_cache.h"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

thread_local int64_t lt_heuristic_queries_ = 0;  // lt_heuristic_queries()
thread_local int64_t lt_matmul_refusals_ = 0;    // lt_matmul_refusals()

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

/// One column-major problem D (m, n) = op(A) B with an epilogue: A stored (k, m) and
/// transposed (trans_a) or (m, k) as is, B (k, n), D (m, n), each with its leading dimension
/// its row count; aux (m, n) when the epilogue has one.
struct LtProblem {
  bool trans_a;
  int64_t m, n, k;
  const float *A, *B;
  float* D;
  cublasLtEpilogue_t epilogue;
  const float* bias;
  float* aux;
  LtWorkspace ws;
};

/// What the heuristic's answer depends on: the problem's shape and epilogue, the compute type,
/// the device, the alignments the preference states, the bias's and auxiliary buffer's (the
/// heuristic may infer an alignment from the pointers in the descriptor, which it does not
/// dereference), and the workspace it may use.
using HeuristicKey = std::tuple<bool, int64_t, int64_t, int64_t, int, bool, bool, int, int, uint32_t, uint32_t,
                                uint32_t, uint32_t, uint32_t, size_t>;

HeuristicKey key_of(const LtProblem& p) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return {p.trans_a,
          p.m,
          p.n,
          p.k,
          static_cast<int>(p.epilogue),
          p.bias != nullptr,
          p.aux != nullptr,
          static_cast<int>(compute_type()),
          device,
          alignment_of(p.A),
          alignment_of(p.B),
          alignment_of(p.D),
          alignment_of(p.bias),
          alignment_of(p.aux),
          p.ws.bytes};
}

/// The heuristic's answer for one key: its first algorithm, or none (`found` false: none
/// offered, or cublasLtMatmul refused the one offered).
struct Answer {
  bool found;
  cublasLtMatmulAlgo_t algo;
};

/// The heuristic's answer for p's key, asked once per thread.
Answer& cached_answer(cublasLtHandle_t h, const LtProblem& p, const LtCall& c) {
  thread_local std::map<HeuristicKey, Answer> answers;
  const HeuristicKey key = key_of(p);
  auto it = answers.find(key);
  if (it == answers.end()) {
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, c.desc, c.a, c.b, c.d, c.d, c.pref, 1, &result, &found);
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(st);
    ++lt_heuristic_queries_;
    it = answers.emplace(key, Answer{st == CUBLAS_STATUS_SUCCESS && found > 0, result.algo}).first;
  }
  return it->second;
}

/// Forgets the refused algorithm (the key's calls go unfused from now on) and says so once.
void forget_refused(Answer& answer, const LtProblem& p) {
  answer.found = false;
  ++lt_matmul_refusals_;
  std::fprintf(stderr,
               "subdp: warning: cublasLtMatmul refused (NOT_SUPPORTED) the algorithm its heuristic chose for a "
               "(%lld x %lld x %lld) GEMM with epilogue %d; that layer runs unfused (GEMM, then its own bias / GELU "
               "kernels) from now on\n",
               static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
               static_cast<int>(p.epilogue));
}

/// Runs p through the heuristic's first algorithm; false, having queued nothing, when cuBLASLt
/// offers none or refuses it.
bool run_lt(const LtProblem& p, cudaStream_t stream) {
  LtCall c;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&c.desc, compute_type(), CUDA_R_32F));
  set_desc(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N});
  set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, p.epilogue);
  if (p.bias != nullptr) set_desc(c.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(p.bias));
  if (p.aux != nullptr) {
    set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(p.aux));
    set_desc(c.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.m);
  }
  CUBLAS_CHECK(p.trans_a ? cublasLtMatrixLayoutCreate(&c.a, CUDA_R_32F, p.k, p.m, p.k)
                         : cublasLtMatrixLayoutCreate(&c.a, CUDA_R_32F, p.m, p.k, p.m));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.b, CUDA_R_32F, p.k, p.n, p.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c.d, CUDA_R_32F, p.m, p.n, p.m));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&c.pref));
  const uint64_t workspace_bytes = p.ws.bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                    sizeof(workspace_bytes)));
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.A);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.B);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.D);
  set_alignment(c.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.D);
  cublasLtHandle_t h = lt_handle();
  Answer& answer = cached_answer(h, p, c);
  if (!answer.found) return false;
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t st = cublasLtMatmul(h, c.desc, &alpha, p.A, c.a, p.B, c.b, &beta, p.D, c.d, p.D, c.d,
                                           &answer.algo, p.ws.data, p.ws.bytes, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    forget_refused(answer, p);
    return false;
  }
  CUBLAS_CHECK(st);
  return true;
}

bool fits_int(int64_t v) { return v > 0 && v <= INT_MAX; }

}  // namespace

int64_t lt_heuristic_queries() { return lt_heuristic_queries_; }
int64_t lt_matmul_refusals() { return lt_matmul_refusals_; }

bool linear_lt(const float* x, const float* w, const float* b, float* y, float* pre, int64_t rows, int64_t in,
               int64_t out, LtWorkspace ws, cudaStream_t stream) {
  if ((b == nullptr && pre == nullptr) || !fits_int(rows) || !fits_int(in) || !fits_int(out)) return false;
  if (pre != nullptr && out % 8 != 0) return false;  // the library's rule for the GELU input's ld
  // The bias and the GELU input have no alignment preference to state: run only on the
  // 16-byte alignment any vectorised epilogue could want (a separately allocated tensor has it).
  if (alignment_of(b) < 16 || alignment_of(pre) < 16) return false;
  // y^T (out, rows) = W (out, in) x^T (in, rows): W stored (in, out) column-major, transposed.
  const cublasLtEpilogue_t epilogue = pre == nullptr ? CUBLASLT_EPILOGUE_BIAS
                                      : b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                     : CUBLASLT_EPILOGUE_GELU_AUX;
  return run_lt({true, out, rows, in, w, x, y, epilogue, b, pre, ws}, stream);
}

bool linear_dx_dgelu_lt(const float* dy, const float* w, const float* pre, float* dx, int64_t rows, int64_t in,
                        int64_t out, LtWorkspace ws, cudaStream_t stream) {
  if (!fits_int(rows) || !fits_int(in) || !fits_int(out) || in % 8 != 0 || alignment_of(pre) < 16) return false;
  // dx^T (in, rows) = W^T (in, out) dy^T (out, rows): W stored (in, out) column-major, as is.
  return run_lt({false, in, rows, out, w, dy, dx, CUBLASLT_EPILOGUE_DGELU, nullptr, const_cast<float*>(pre), ws},
                stream);
}

}  // namespace subdp::cuda
