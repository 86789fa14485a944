// cuBLASLt as the bf16 path will call it, against a host reference: D = GELU(A^T B + bias) in
// bf16 with float32 accumulation, the pre-activation kept in the auxiliary buffer (GELU_AUX_BIAS),
// and DGELU_BGRAD's input gradient and bias gradient. On a GPU this checks what the emulator
// assumes of the library (the bias runs along D's rows, GELU in its tanh form, the aux layout);
// on the emulator, that it refuses what the library refuses (shapes that do not agree, host
// memory).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/gpu/gpu_test_util.h"

namespace subdp::gpu_test {
namespace {

float gelu(float x) { return 0.5f * x * (1.f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
float gelu_grad(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x), t = std::tanh(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608f * (1.f + 3.f * 0.044715f * x * x);
}

/// The descriptors of one column-major problem D (m, n) = op(A) op(B) with A stored (k, m)
/// (transposed, as subdp's row-major weights appear to cuBLAS) and B stored (k, n), run with a
/// workspace as the backend's (32 MiB; some epilogues' algorithms may need one on a device).
struct LtProblem {
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  int m, n, k;
  Dev<unsigned char> workspace{kWorkspaceBytes};
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  LtProblem(int m_, int n_, int k_, cudaDataType_t in, cudaDataType_t out) : m(m_), n(n_), k(k_) {
    CUBLAS_CHECK(cublasLtCreate(&handle));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t t = CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, in, k, m, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, in, k, n, k));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, out, m, n, m));
  }
  ~LtProblem() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  void epilogue(cublasLtEpilogue_t e, const void* bias, void* aux) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    const int64_t ld = m;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  cublasStatus_t run(const void* A, const void* B, void* D, float beta = 0.f) {
    const float alpha = 1.f;
    return cublasLtMatmul(handle, desc, &alpha, A, a, B, b, &beta, D, d, D, d, nullptr, workspace.get(),
                          kWorkspaceBytes, nullptr);
  }
};

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}
std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

/// pre[j * m + i] = sum_p A[i * k + p] B[j * k + p] + bias[i], on bf16-rounded inputs.
std::vector<float> reference_pre(const std::vector<float>& A, const std::vector<float>& B,
                                 const std::vector<float>& bias, int m, int n, int k) {
  std::vector<float> pre(static_cast<size_t>(m) * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = bias.empty() ? 0.0 : bias[i];
      for (int p = 0; p < k; ++p) s += double(A[i * k + p]) * B[j * k + p];
      pre[j * m + i] = static_cast<float>(s);
    }
  return pre;
}

using CublasLt = GpuTest;

TEST_F(CublasLt, Bf16GeluAuxBiasMatchesTheHostReference) {
  const int m = 48, n = 20, k = 64;
  const auto A = from_bf16(to_bf16(random_vec(m * k, 1))), B = from_bf16(to_bf16(random_vec(k * n, 2)));
  const auto bias = from_bf16(to_bf16(random_vec(m, 3)));
  Dev<__nv_bfloat16> dA(to_bf16(A)), dB(to_bf16(B)), dbias(to_bf16(bias)), dD(m * n), daux(m * n);
  LtProblem lt(m, n, k, CUDA_R_16BF, CUDA_R_16BF);
  lt.epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dbias.get(), daux.get());
  ASSERT_EQ(lt.run(dA.get(), dB.get(), dD.get()), CUBLAS_STATUS_SUCCESS);
  const auto pre = reference_pre(A, B, bias, m, n, k);
  const auto D = from_bf16(dD.download()), aux = from_bf16(daux.download());
  for (size_t i = 0; i < pre.size(); ++i) {
    // bf16 output: 2^-8 relative, plus the float32 accumulation's order.
    EXPECT_NEAR(aux[i], pre[i], 8e-3 * std::abs(pre[i]) + 1e-3) << "aux " << i;
    EXPECT_NEAR(D[i], gelu(pre[i]), 8e-3 * std::abs(gelu(pre[i])) + 1e-3) << "D " << i;
  }
}

TEST_F(CublasLt, Fp32DgeluBgradGivesTheInputAndBiasGradients) {
  const int m = 32, n = 12, k = 40;
  const auto A = random_vec(m * k, 4), B = random_vec(k * n, 5), aux = random_vec(m * n, 6, -2.f, 2.f);
  Dev<float> dA(A), dB(B), dD(m * n), daux(aux), dbias(m);
  LtProblem lt(m, n, k, CUDA_R_32F, CUDA_R_32F);
  lt.epilogue(CUBLASLT_EPILOGUE_DGELU_BGRAD, dbias.get(), daux.get());
  ASSERT_EQ(lt.run(dA.get(), dB.get(), dD.get()), CUBLAS_STATUS_SUCCESS);
  const auto g = reference_pre(A, B, {}, m, n, k);
  const auto D = dD.download(), bias = dbias.download();
  std::vector<double> bgrad(m, 0.0);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float want = g[j * m + i] * gelu_grad(aux[j * m + i]);
      EXPECT_NEAR(D[j * m + i], want, 1e-4 * (std::abs(want) + 1)) << i << "," << j;
      bgrad[i] += want;
    }
  for (int i = 0; i < m; ++i) EXPECT_NEAR(bias[i], bgrad[i], 1e-4 * (std::abs(bgrad[i]) + 1)) << "bias " << i;
}

#if defined(SUBDP_CUDA_EMULATED)
TEST_F(CublasLt, EmulatorRefusesDisagreeingShapesAndHostMemory) {
  const int m = 8, n = 4, k = 16;
  Dev<float> dA(m * k), dB(k * n), dD(m * n);
  LtProblem lt(m, n, k, CUDA_R_32F, CUDA_R_32F);
  const int32_t no_transpose = CUBLAS_OP_N;  // A stored (k, m) read as (m, k): op(A) is k x m, D is m x n
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose, sizeof(no_transpose)));
  EXPECT_EQ(lt.run(dA.get(), dB.get(), dD.get()), CUBLAS_STATUS_INVALID_VALUE);
  cudaGetLastError();
  const int32_t transpose = CUBLAS_OP_T;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  std::vector<float> host(k * n);
  EXPECT_EQ(lt.run(dA.get(), host.data(), dD.get()), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("B ("), std::string::npos);
  EXPECT_EQ(lt.run(dA.get(), dB.get(), dD.get()), CUBLAS_STATUS_SUCCESS);
}
#endif

}  // namespace
}  // namespace subdp::gpu_test
