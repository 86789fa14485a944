// The emulated cuBLASLt (cublaslt.h): descriptors as plain structs, the argument rules checked
// when the matmul is asked for (heuristic or cublasLtMatmul), the matmul queued on its stream
// and computed on OpenBLAS with the epilogue applied in float, then stored as D's type.
#include "kernels/emu/cublaslt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/emu/blas_ref.h"
#include "kernels/emu/env.h"
#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/streams.h"

namespace subdp::emu {

struct LtHandle {};
struct LtMatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t pointer_mode = 0;  // host
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  int32_t bias_type = -1, aux_type = -1;  // -1: D's type
};
struct LtLayout {
  cudaDataType_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct LtPreference {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D, in bytes
};

}  // namespace subdp::emu

using namespace subdp::emu;

namespace {

cublasStatus_t refuse(cublasStatus_t code, const std::string& why) {
  std::fprintf(stderr, "subdp CUDA emulator: %s\n", why.c_str());
  set_error(cudaErrorInvalidValue, why);
  return code;
}

/// SUBDP_EMU_LT_REFUSE_MATMUL=1 (read per call): cublasLtMatmul answers NOT_SUPPORTED for any
/// algorithm the heuristic gave, as the library may for one it will not run after all, so a
/// test can see what the caller then does.
bool refuse_every_algorithm() { return env_flag("SUBDP_EMU_LT_REFUSE_MATMUL"); }

/// Copies an attribute's value, checking its size as the library does.
template <class T>
cublasStatus_t set(T& field, const void* buf, size_t size, const char* what) {
  if (buf == nullptr || size != sizeof(T))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": buffer of " + std::to_string(size) +
                                                   " bytes, the attribute holds " + std::to_string(sizeof(T)));
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool supported_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return true;
    default: return false;
  }
}

bool has(uint32_t e, uint32_t bits) { return (e & bits) == bits; }
bool writes_bias_grad(uint32_t e) { return has(e, 16); }  // the *_BGRAD epilogues
bool adds_bias(uint32_t e) { return has(e, CUBLASLT_EPILOGUE_BIAS) && !writes_bias_grad(e); }
bool uses_aux(uint32_t e) { return has(e, 128); }
bool is_dgelu(uint32_t e) { return has(e, 64 | 128); }

/// The bias's and the auxiliary buffer's types: their attributes, else D's.
cudaDataType_t bias_type(const LtMatmulDesc& d, const LtLayout& dd) {
  return d.bias_type < 0 ? dd.type : static_cast<cudaDataType_t>(d.bias_type);
}
cudaDataType_t aux_type(const LtMatmulDesc& d, const LtLayout& dd) {
  return d.aux_type < 0 ? dd.type : static_cast<cudaDataType_t>(d.aux_type);
}

/// The problem a descriptor and four layouts state: m, n, k, batch and the checked types.
struct Problem {
  int m = 0, n = 0, k = 0, batch = 1;
  std::string error;
  cublasStatus_t code = CUBLAS_STATUS_SUCCESS;
  bool fail(cublasStatus_t c, const std::string& why) {
    code = c;
    error = "cublasLtMatmul: " + why;
    return false;
  }
};

bool check_problem(const LtMatmulDesc* d, const LtLayout* a, const LtLayout* b, const LtLayout* c, const LtLayout* dd,
                   Problem& p) {
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dd == nullptr)
    return p.fail(CUBLAS_STATUS_INVALID_VALUE, "null descriptor or layout");
  if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
      d->compute != CUBLAS_COMPUTE_32F_FAST_16BF)
    return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "the emulator computes in float32 only");
  if (d->scale != CUDA_R_32F) return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "scale type must be float32");
  if (d->pointer_mode != 0) return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "the emulator takes host alpha and beta only");
  if (!supported_epilogue(d->epilogue))
    return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue " + std::to_string(d->epilogue) + " is not emulated");
  for (const LtLayout* l : {a, b, c, dd}) {
    if (l->order != CUBLASLT_ORDER_COL) return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "only column-major layouts");
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows)))
      return p.fail(CUBLAS_STATUS_INVALID_VALUE,
                    "leading dimension " + std::to_string(l->ld) + " below " + std::to_string(l->rows) + " rows");
    if (l->batch != dd->batch) return p.fail(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ between layouts");
  }
  if (a->type != b->type || (a->type != CUDA_R_32F && a->type != CUDA_R_16BF))
    return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "A and B must both be float32 or both bf16");
  if (c->type != dd->type || (dd->type != CUDA_R_32F && dd->type != CUDA_R_16BF))
    return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "C and D must both be float32 or both bf16");
  const bool ta = d->transa != CUBLAS_OP_N, tb = d->transb != CUBLAS_OP_N;
  p.m = static_cast<int>(dd->rows);
  p.n = static_cast<int>(dd->cols);
  p.k = static_cast<int>(ta ? a->rows : a->cols);
  p.batch = dd->batch;
  const uint64_t a_m = ta ? a->cols : a->rows, b_k = tb ? b->cols : b->rows, b_n = tb ? b->rows : b->cols;
  if (a_m != dd->rows || b_k != static_cast<uint64_t>(p.k) || b_n != dd->cols || c->rows != dd->rows ||
      c->cols != dd->cols)
    return p.fail(CUBLAS_STATUS_INVALID_VALUE,
                  "shapes do not agree: op(A) " + std::to_string(a_m) + "x" + std::to_string(p.k) + ", op(B) " +
                      std::to_string(b_k) + "x" + std::to_string(b_n) + ", C " + std::to_string(c->rows) + "x" +
                      std::to_string(c->cols) + ", D " + std::to_string(dd->rows) + "x" + std::to_string(dd->cols));
  // The library's rule for the GELU input matrix: ld divisible by 8, no less than m.
  if (uses_aux(d->epilogue) && (d->aux_ld < p.m || d->aux_ld % 8 != 0))
    return p.fail(CUBLAS_STATUS_INVALID_VALUE, "EPILOGUE_AUX_LD " + std::to_string(d->aux_ld) +
                                                   ": must be divisible by 8 and at least m = " + std::to_string(p.m));
  for (const int32_t t : {d->bias_type, d->aux_type})
    if (t >= 0 && t != CUDA_R_32F && t != CUDA_R_16BF)
      return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "bias and aux data types: float32 or bf16 only");
  return true;
}

bool device_extent(Problem& p, const char* name, const void* ptr, size_t bytes) {
  if (bytes == 0 || region_of(ptr, bytes) == Region::device) return true;
  return p.fail(CUBLAS_STATUS_INVALID_VALUE, std::string(name) + " (" + std::to_string(bytes) + " bytes) is " +
                                                 describe_region(ptr, bytes) + ", not device memory");
}

/// The slot of cublasLtMatmulAlgo_t::data holding the workspace bytes the algorithm needs
/// (slots 0-3: the alignments it assumes), and the most it takes of what it is offered.
constexpr int kAlgoWorkspaceSlot = 4;
constexpr uint64_t kAlgoWorkspaceBytes = uint64_t{1} << 20;
/// The slots holding the bias's and the auxiliary buffer's alignment the algorithm assumes.
constexpr int kAlgoBiasAlignmentSlot = 5, kAlgoAuxAlignmentSlot = 6;

/// The largest power of two up to 256 dividing p's address (256 for null: nothing assumed).
uint64_t pointer_alignment(const void* p) {
  uint64_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

/// False (p's error set) when the descriptor's bias or auxiliary pointer is aligned to less
/// than the algorithm assumed when the heuristic chose it.
bool epilogue_pointers_as_assumed(const cublasLtMatmulAlgo_t& algo, const LtMatmulDesc& d, Problem& p) {
  const struct {
    const void* ptr;
    int slot;
    const char* name;
  } pointers[] = {{d.bias, kAlgoBiasAlignmentSlot, "the bias"}, {d.aux, kAlgoAuxAlignmentSlot, "the auxiliary buffer"}};
  for (const auto& e : pointers)
    if (pointer_alignment(e.ptr) < algo.data[e.slot])
      return p.fail(CUBLAS_STATUS_NOT_SUPPORTED,
                    std::string(e.name) + " is aligned to less than the " + std::to_string(algo.data[e.slot]) +
                        " bytes the algorithm assumed (the heuristic saw another pointer)");
  return true;
}

/// False (p's error set) when the workspace is smaller than the algorithm's need, or not
/// 256-byte aligned (cuBLASLt's rule for cublasLtMatmul's workspace pointer).
bool workspace_fits(const cublasLtMatmulAlgo_t& algo, const void* workspace, size_t bytes, Problem& p) {
  const uint64_t need = algo.data[kAlgoWorkspaceSlot];
  if (need == 0) return true;
  if (bytes < need)
    return p.fail(CUBLAS_STATUS_NOT_SUPPORTED, "the algorithm needs " + std::to_string(need) + " bytes of workspace, " +
                                                   std::to_string(bytes) + " given");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return p.fail(CUBLAS_STATUS_INVALID_VALUE, "the workspace is not 256-byte aligned");
  return true;
}

/// The heuristic's algorithm runs only on matrices aligned as its preference promised.
bool aligned_as_assumed(const cublasLtMatmulAlgo_t& algo, std::initializer_list<const void*> ptrs, Problem& p) {
  const char* names[] = {"A", "B", "C", "D"};
  int i = 0;
  for (const void* ptr : ptrs) {
    const uint64_t need = algo.data[i];
    if (need > 1 && reinterpret_cast<uintptr_t>(ptr) % need != 0)
      return p.fail(CUBLAS_STATUS_NOT_SUPPORTED,
                    std::string(names[i]) + " is not aligned to the " + std::to_string(need) +
                        " bytes the algorithm assumes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" + names[i] + "_BYTES)");
    ++i;
  }
  return true;
}

/// Elements the auxiliary buffer spans for an m x n D: its leading dimension, n columns.
int64_t aux_elements(const LtMatmulDesc& d, const Problem& p) { return d.aux_ld * (p.n - 1) + p.m; }

size_t layout_bytes(const LtLayout& l) {
  const Operand o{"",       nullptr,          static_cast<int64_t>(l.rows), static_cast<int64_t>(l.cols), l.ld,
                  l.stride, type_size(l.type)};
  return static_cast<size_t>(extent(o, l.batch)) * o.element;
}

float gelu(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

float gelu_grad(float x) {
  const float c = 0.7978845608028654f, u = c * (x + 0.044715f * x * x * x), t = std::tanh(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * c * (1.f + 3.f * 0.044715f * x * x);
}

/// Batch entry i of a matrix at `base` laid out as l.
char* entry(const void* base, const LtLayout& l, int i) {
  return static_cast<char*>(const_cast<void*>(base)) + static_cast<size_t>(l.stride) * i * type_size(l.type);
}

/// Batch entry i: D = epilogue(alpha op(A) op(B) + beta C), in float, then stored.
void run_one(const LtMatmulDesc& d, const Problem& p, float alpha, float beta, const void* A, const LtLayout& a,
             const void* B, const LtLayout& b, const void* C, const LtLayout& c, void* D, const LtLayout& dd, int i) {
  const Operand oa{"A", nullptr, static_cast<int64_t>(a.rows), static_cast<int64_t>(a.cols), a.ld, 0, 0};
  const Operand ob{"B", nullptr, static_cast<int64_t>(b.rows), static_cast<int64_t>(b.cols), b.ld, 0, 0};
  const Operand oc{"C", nullptr, p.m, p.n, c.ld, 0, 0};
  std::vector<float> fa = widen(entry(A, a, i), a.type, extent(oa, 1));
  std::vector<float> fb = widen(entry(B, b, i), b.type, extent(ob, 1));
  if (a.type == CUDA_R_32F) {  // as the tensor cores read them
    round_as_read(fa, d.compute);
    round_as_read(fb, d.compute);
  }
  std::vector<float> f = beta != 0.f ? widen(entry(C, c, i), c.type, extent(oc, 1))
                                     : std::vector<float>(static_cast<size_t>(extent(oc, 1)), 0.f);
  if (c.ld != dd.ld) {  // D's layout from here on
    std::vector<float> g(static_cast<size_t>(dd.ld) * (p.n - 1) + p.m, 0.f);
    for (int j = 0; j < p.n; ++j)
      for (int r = 0; r < p.m; ++r) g[j * dd.ld + r] = f[j * c.ld + r];
    f.swap(g);
  }
  if (p.k == 0)  // alpha op(A) op(B) is empty: D = beta C
    for (float& v : f) v *= beta;
  else
    cblas_sgemm(CblasColMajor, cblas_op(static_cast<cublasOperation_t>(d.transa)),
                cblas_op(static_cast<cublasOperation_t>(d.transb)), p.m, p.n, p.k, alpha, fa.data(),
                static_cast<int>(a.ld), fb.data(), static_cast<int>(b.ld), beta, f.data(), static_cast<int>(dd.ld));
  const std::vector<float> bias = adds_bias(d.epilogue) ? widen(d.bias, bias_type(d, dd), p.m) : std::vector<float>();
  const std::vector<float> aux =
      is_dgelu(d.epilogue) ? widen(d.aux, aux_type(d, dd), aux_elements(d, p)) : std::vector<float>();
  std::vector<float> pre(uses_aux(d.epilogue) && !is_dgelu(d.epilogue) ? aux_elements(d, p) : 0);
  std::vector<float> bgrad(writes_bias_grad(d.epilogue) ? p.m : 0, 0.f);
  for (int j = 0; j < p.n; ++j)
    for (int r = 0; r < p.m; ++r) {
      float& v = f[static_cast<size_t>(j) * dd.ld + r];
      if (is_dgelu(d.epilogue)) {
        v *= gelu_grad(aux[static_cast<size_t>(j) * d.aux_ld + r]);
        if (!bgrad.empty()) bgrad[r] += v;
        continue;
      }
      if (!bias.empty()) v += bias[r];
      if (!pre.empty()) pre[static_cast<size_t>(j) * d.aux_ld + r] = v;
      if (has(d.epilogue, CUBLASLT_EPILOGUE_GELU))
        v = gelu(v);
      else if (has(d.epilogue, CUBLASLT_EPILOGUE_RELU))
        v = std::max(v, 0.f);
    }
  store(f, entry(D, dd, i), dd.type, p.m, p.n, dd.ld);
  if (!pre.empty()) store(pre, d.aux, aux_type(d, dd), p.m, p.n, d.aux_ld);
  if (!bgrad.empty()) store(bgrad, const_cast<void*>(d.bias), bias_type(d, dd), p.m, 1, p.m);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new LtHandle();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new LtMatmulDesc();
  (*desc)->compute = computeType;
  (*desc)->scale = scaleType;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const char* what = "cublasLtMatmulDescSetAttribute";
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return set(d->compute, buf, size, what);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return set(d->scale, buf, size, what);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set(d->pointer_mode, buf, size, what);
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(d->transa, buf, size, what);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(d->transb, buf, size, what);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(d->epilogue, buf, size, what);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(d->bias, buf, size, what);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(d->aux, buf, size, what);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(d->aux_ld, buf, size, what);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(d->bias_type, buf, size, what);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set(d->aux_type, buf, size, what);
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    std::string(what) + ": attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new LtLayout{type, CUBLASLT_ORDER_COL, rows, cols, ld, 1, 0};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (l == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const char* what = "cublasLtMatrixLayoutSetAttribute";
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return set(l->type, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return set(l->order, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set(l->rows, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set(l->cols, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_LD: return set(l->ld, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return set(l->batch, buf, size, what);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(l->stride, buf, size, what);
  }
  return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": unknown attribute");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new LtPreference();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (pref == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return set(pref->max_workspace, buf, size, "cublasLtMatmulPreferenceSetAttribute");
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
    return set(pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size,
               "cublasLtMatmulPreferenceSetAttribute");
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) {
    uint32_t mode = 0;
    return set(mode, buf, size, "cublasLtMatmulPreferenceSetAttribute");
  }
  return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: unknown attribute");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (pref == nullptr || results == nullptr || returned == nullptr || requested < 1)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: null argument or no algorithm asked");
  *returned = 0;
  Problem p;
  if (!check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, p)) return refuse(p.code, p.error);
  // One algorithm. Offered a workspace, it takes some of it, as a split-K or stream-K kernel
  // would: cublasLtMatmul then needs that much, and scribbles on it.
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->min_alignment[i];  // what it assumes
  results[0].algo.data[kAlgoWorkspaceSlot] = std::min<uint64_t>(pref->max_workspace, kAlgoWorkspaceBytes);
  // The bias and auxiliary pointers in the descriptor: not read here, but their values tell
  // the heuristic what alignment to expect of them (cuBLASLt's documentation of the epilogue
  // pointers), so the algorithm assumes it.
  results[0].algo.data[kAlgoBiasAlignmentSlot] = pointer_alignment(desc->bias);
  results[0].algo.data[kAlgoAuxAlignmentSlot] = pointer_alignment(desc->aux);
  results[0].workspaceSize = results[0].algo.data[kAlgoWorkspaceSlot];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSize, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p;
  if (!check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, p)) return refuse(p.code, p.error);
  if (alpha == nullptr || beta == nullptr || region_of(alpha, 0) == Region::device ||
      region_of(beta, 0) == Region::device)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: alpha and beta must be host pointers");
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const LtMatmulDesc d = *desc;
  const LtLayout a = *Adesc, b = *Bdesc, c = *Cdesc, dd = *Ddesc;
  const uint32_t e = d.epilogue;
  const size_t aux_bytes = uses_aux(e) ? aux_elements(d, p) * type_size(aux_type(d, dd)) : 0;
  const size_t bias_bytes = adds_bias(e) || writes_bias_grad(e) ? p.m * type_size(bias_type(d, dd)) : 0;
  if (C == D && c.ld != dd.ld) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: C == D with other layouts");
  if (!device_extent(p, "A", A, p.k ? layout_bytes(a) : 0) || !device_extent(p, "B", B, p.k ? layout_bytes(b) : 0) ||
      !device_extent(p, "C", C, be != 0.f ? layout_bytes(c) : 0) || !device_extent(p, "D", D, layout_bytes(dd)) ||
      !device_extent(p, "the bias", d.bias, bias_bytes) ||
      !device_extent(p, "the auxiliary buffer", d.aux, aux_bytes) ||
      !device_extent(p, "the workspace", workspace, workspaceSize))
    return refuse(p.code, p.error);
  if (p.batch > 1 && (uses_aux(e) || adds_bias(e) || writes_bias_grad(e)))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "cublasLtMatmul: the emulator applies bias and aux epilogues to one "
                  "matrix, not a batch");
  if (algo != nullptr && !aligned_as_assumed(*algo, {A, B, C, D}, p)) return refuse(p.code, p.error);
  if (algo != nullptr && !workspace_fits(*algo, workspace, workspaceSize, p)) return refuse(p.code, p.error);
  if (algo != nullptr && !epilogue_pointers_as_assumed(*algo, d, p)) return refuse(p.code, p.error);
  if (algo != nullptr && refuse_every_algorithm()) {  // no CUDA error: the library sets none
    std::fprintf(stderr, "subdp CUDA emulator: cublasLtMatmul: SUBDP_EMU_LT_REFUSE_MATMUL refuses the algorithm\n");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  Stream* s = stream_of(stream);
  if (s == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: destroyed stream");
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t scribbled = algo != nullptr ? algo->data[kAlgoWorkspaceSlot] : 0;
  enqueue(s, "cublasLtMatmul", [=] {
    // The algorithm's partial sums: NaN bytes over the workspace it took, so that a tensor
    // sharing it is lost in stream order, as on a device.
    if (scribbled > 0) std::memset(workspace, 0xff, scribbled);
    for (int i = 0; i < p.batch; ++i) run_one(d, p, al, be, A, a, B, b, C, c, D, dd, i);
  });
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }
