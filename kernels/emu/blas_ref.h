// Helpers shared by the emulated cuBLAS and cuBLASLt (cublas.cpp, cublaslt.cpp): a
// column-major operand and the elements it spans, widening bf16 operands to float and storing
// a float result as the output type (bf16 rounded to nearest even, as the libraries do).
#pragma once
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/emu/bf16.h"
#include "kernels/emu/cublas.h"

namespace subdp::emu {

/// A column-major operand: rows x cols as stored (before op), leading dimension ld.
struct Operand {
  const char* name;
  const void* p;
  int64_t rows, cols, ld, stride;
  size_t element;
};

/// Elements a batch of `batch` matrices spans, the last one's last column included.
inline int64_t extent(const Operand& o, int batch) {
  if (o.rows == 0 || o.cols == 0) return 0;
  return o.stride * (batch - 1) + o.ld * (o.cols - 1) + o.rows;
}

inline CBLAS_TRANSPOSE cblas_op(cublasOperation_t t) { return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

/// The n elements at p as floats (bf16 widened).
inline std::vector<float> widen(const void* p, cudaDataType_t type, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (type == CUDA_R_32F) {
    const float* f = static_cast<const float*>(p);
    std::copy(f, f + n, v.begin());
  } else {
    const __nv_bfloat16* b = static_cast<const __nv_bfloat16*>(p);
    for (int64_t i = 0; i < n; ++i) v[i] = __bfloat162float(b[i]);
  }
  return v;
}

inline size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/// x rounded to TF32 (8 exponent bits, 10 mantissa bits), to nearest with ties away from zero
/// as PTX's cvt.rna.tf32.f32: what tensor cores read from a float32 operand. inf and NaN stay.
inline float round_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u = (u + 0x1000u) & ~0x1fffu;  // half of the 13 dropped bits' unit, then drop them
  std::memcpy(&x, &u, sizeof(u));
  return x;
}

/// Rounds float32 operands in place as a compute type's tensor cores read them:
/// CUBLAS_COMPUTE_32F_FAST_TF32 to TF32, CUBLAS_COMPUTE_32F_FAST_16BF to bf16 (nearest even;
/// cuBLAS may choose TF32 kernels for it, and the emulator takes the coarser rounding, so that
/// a test tolerance fit for bf16 holds on the device whichever it picks). Others leave v as is.
inline void round_as_read(std::vector<float>& v, cublasComputeType_t compute) {
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32)
    for (float& x : v) x = round_tf32(x);
  else if (compute == CUBLAS_COMPUTE_32F_FAST_16BF)
    for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
}

/// Writes the m x n column-major result `f` (leading dimension ld) into `out` of `type`.
inline void store(const std::vector<float>& f, void* out, cudaDataType_t type, int m, int n, int64_t ld) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const int64_t at = int64_t{j} * ld + i;
      if (type == CUDA_R_32F)
        static_cast<float*>(out)[at] = f[at];
      else
        static_cast<__nv_bfloat16*>(out)[at] = __float2bfloat16(f[at]);
    }
}

}  // namespace subdp::emu
