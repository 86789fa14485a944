// LayerNorm, RMSNorm and BatchNorm2d forward/backward: twins of kernels/cpu/norm.cpp.
// LayerNorm and RMSNorm: one block per row; parameter gradients by column_sums.cuh (rows in
// slices sized to the device, summed in a fixed order). BatchNorm: one block per channel (statistics in double, two
// passes as on the CPU), then an elementwise normalisation.
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::block_sum;
using detail::blocks_for;
using detail::from_f;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;
using detail::to_f;

constexpr int kRowThreads = 128;      // LayerNorm threads per row
constexpr int kChannelThreads = 512;  // BatchNorm threads per channel

template <class T>
__global__ void layernorm_forward_kernel(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                                         float* rstd, int C, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const T* p = x + r * C;
  T* q = y + r * C;
  float s = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) s += to_f(p[i]);
  const float m = block_sum(s, shared) / C;
  float v = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float d = to_f(p[i]) - m;
    v += d * d;
  }
  const float rs = 1.f / sqrtf(block_sum(v, shared) / C + eps);
  for (int i = threadIdx.x; i < C; i += blockDim.x) q[i] = from_f<T>((to_f(p[i]) - m) * rs * gamma[i] + beta[i]);
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

__global__ void layernorm_backward_dx_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                             const float* dy, float* dx, int C) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* p = x + r * C;
  const float* g = dy + r * C;
  const float m = mean[r], rs = rstd[r];
  float a = 0.f, b = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float dn = gamma[i] * g[i];
    a += dn;
    b += dn * (p[i] - m) * rs;
  }
  const float dnorm_mean = block_sum(a, shared) / C;
  const float dnorm_norm_mean = block_sum(b, shared) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    const float xhat = (p[i] - m) * rs;
    dx[r * C + i] += (gamma[i] * g[i] - dnorm_mean - xhat * dnorm_norm_mean) * rs;
  }
}

/// The gamma and beta gradient terms of (row r, column c): (xhat * dy, dy). RMSNorm passes
/// mean null (no centring; its beta term goes nowhere).
struct NormGradTerm {
  const float *x, *mean, *rstd, *dy;
  int64_t C;
  __device__ detail::Pair operator()(int64_t r, int64_t c) const {
    const float g = dy[r * C + c];
    return {(x[r * C + c] - (mean ? mean[r] : 0.f)) * rstd[r] * g, g};
  }
};

__global__ void rmsnorm_forward_kernel(const float* x, const float* gamma, float* y, float* rstd, int C, float eps) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* p = x + r * C;
  float ss = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) ss += p[i] * p[i];
  const float rs = 1.f / sqrtf(block_sum(ss, shared) / C + eps);
  for (int i = threadIdx.x; i < C; i += blockDim.x) y[r * C + i] = p[i] * rs * gamma[i];
  if (threadIdx.x == 0) rstd[r] = rs;
}

__global__ void rmsnorm_apply_kernel(const float* x, const float* gamma, const float* rstd, float* y, int C,
                                     int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) y[i] = x[i] * rstd[i / C] * gamma[i % C];
}

__global__ void rmsnorm_backward_dx_kernel(const float* x, const float* gamma, const float* rstd, const float* dy,
                                           float* dx, int C) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const float* p = x + r * C;
  const float* g = dy + r * C;
  const float rs = rstd[r];
  float dot = 0.f;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dot += gamma[i] * g[i] * (p[i] * rs);
  const float m = block_sum(dot, shared) / C;
  for (int i = threadIdx.x; i < C; i += blockDim.x) dx[r * C + i] += (gamma[i] * g[i] - p[i] * rs * m) * rs;
}

/// Element m of channel c in (N, C, HW), m over N*HW.
__device__ __forceinline__ int64_t bn_index(int64_t m, int c, int C, int HW) {
  return ((m / HW) * C + c) * HW + m % HW;
}

__global__ void batchnorm_stats_kernel(const float* x, float* mean, float* rstd, float* running_mean,
                                       float* running_var, int N, int C, int HW, float momentum, float eps) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  const int64_t M = static_cast<int64_t>(N) * HW;
  double s = 0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) s += x[bn_index(m, c, C, HW)];
  const double mu = block_sum(s, shared) / M;
  double ss = 0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const double d = x[bn_index(m, c, C, HW)] - mu;
    ss += d * d;
  }
  ss = block_sum(ss, shared);
  if (threadIdx.x == 0) {
    const double var = ss / M;
    const float fmu = static_cast<float>(mu);
    mean[c] = fmu;
    rstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
    const double unbiased = M > 1 ? ss / (M - 1) : var;
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * fmu;
    running_var[c] = (1 - momentum) * running_var[c] + momentum * static_cast<float>(unbiased);
  }
}

// y = x * a + b per channel, a = gamma * rstd, b = beta - mean * a; rstd from the batch
// (training) or from the running variance (eval).
__global__ void batchnorm_apply_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                       const float* mean, const float* rstd, const float* var, float eps, int C, int HW,
                                       int64_t n) {
  for (int64_t i = grid_first(); i < n; i += grid_stride()) {
    const int c = static_cast<int>((i / HW) % C);
    const float rs = rstd ? rstd[c] : 1.f / sqrtf(var[c] + eps);
    const float a = gamma[c] * rs, b = beta[c] - mean[c] * a;
    y[i] = x[i] * a + b;
  }
}

__global__ void batchnorm_backward_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                          const float* dy, float* dx, float* dgamma, float* dbeta, int N, int C, int HW,
                                          int grad_channels) {
  __shared__ double shared[32];
  const int c = blockIdx.x;
  const int64_t M = static_cast<int64_t>(N) * HW;
  const float mu = mean[c], rs = rstd[c];
  double sdy = 0, sdyx = 0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const int64_t i = bn_index(m, c, C, HW);
    sdy += dy[i];
    sdyx += dy[i] * (x[i] - mu) * rs;
  }
  sdy = block_sum(sdy, shared);
  sdyx = block_sum(sdyx, shared);
  if (threadIdx.x == 0 && c < grad_channels) {
    dgamma[c] += static_cast<float>(sdyx);
    dbeta[c] += static_cast<float>(sdy);
  }
  const float k = gamma[c] * rs / M;
  const float mdy = static_cast<float>(sdy), mdyx = static_cast<float>(sdyx);
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const int64_t i = bn_index(m, c, C, HW);
    const float xhat = (x[i] - mu) * rs;
    dx[i] = k * (M * dy[i] - mdy - xhat * mdyx);
  }
}

}  // namespace

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, layernorm_forward_kernel<float>)
  (x, gamma, beta, y, mean, rstd, C, eps);
  CUDA_CHECK_LAUNCH();
}

void layernorm_forward(const bf16* x, const float* gamma, const float* beta, bf16* y, float* mean, float* rstd,
                       int64_t rows, int C, float eps, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, layernorm_forward_kernel<bf16>)
  (x, gamma, beta, y, mean, rstd, C, eps);
  CUDA_CHECK_LAUNCH();
}

int64_t column_grad_workspace_floats(int64_t rows, int64_t cols) {
  return detail::column_sums_workspace_floats(rows, cols);
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int64_t rows, int C, float* ws, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, layernorm_backward_dx_kernel)
  (x, gamma, mean, rstd, dy, dx, C);
  CUDA_CHECK_LAUNCH();
  if (dgamma == nullptr) return;
  detail::column_sums(NormGradTerm{x, mean, rstd, dy, C}, rows, C, dgamma, dbeta, ws, s);
}

void rmsnorm_forward(const float* x, const float* gamma, float* y, float* rstd, int64_t rows, int C, float eps,
                     cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, rmsnorm_forward_kernel)(x, gamma, y, rstd, C, eps);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_apply(const float* x, const float* gamma, const float* rstd, float* y, int64_t rows, int C,
                   cudaStream_t s) {
  const int64_t n = rows * C;
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, rmsnorm_apply_kernel)(x, gamma, rstd, y, C, n);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(const float* x, const float* gamma, const float* rstd, const float* dy, float* dx, float* dgamma,
                      int64_t rows, int C, float* ws, cudaStream_t s) {
  if (rows <= 0 || C <= 0) return;
  SUBDP_LAUNCH(static_cast<unsigned>(rows), kRowThreads, 0, s, rmsnorm_backward_dx_kernel)(x, gamma, rstd, dy, dx, C);
  CUDA_CHECK_LAUNCH();
  if (dgamma == nullptr) return;
  detail::column_sums(NormGradTerm{x, nullptr, rstd, dy, C}, rows, C, dgamma, nullptr, ws, s);
}

void batchnorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                       float* running_mean, float* running_var, int N, int C, int HW, bool training, float momentum,
                       float eps, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(N) * C * HW;
  if (n <= 0) return;
  if (training) {
    SUBDP_LAUNCH(C, kChannelThreads, 0, s, batchnorm_stats_kernel)
    (x, mean, rstd, running_mean, running_var, N, C, HW, momentum, eps);
    CUDA_CHECK_LAUNCH();
    SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, batchnorm_apply_kernel)
    (x, gamma, beta, y, mean, rstd, nullptr, eps, C, HW, n);
  } else {
    SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, batchnorm_apply_kernel)
    (x, gamma, beta, y, running_mean, nullptr, running_var, eps, C, HW, n);
  }
  CUDA_CHECK_LAUNCH();
}

void batchnorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                        float* dx, float* dgamma, float* dbeta, int N, int C, int HW, int grad_channels,
                        cudaStream_t s) {
  if (static_cast<int64_t>(N) * C * HW <= 0) return;
  SUBDP_LAUNCH(C, kChannelThreads, 0, s, batchnorm_backward_kernel)
  (x, gamma, mean, rstd, dy, dx, dgamma, dbeta, N, C, HW, grad_channels);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
