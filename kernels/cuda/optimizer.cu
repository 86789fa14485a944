// SGD (momentum, Nesterov, weight decay) and AdamW updates on one contiguous run of a
// parameter: the formulas of engine/optim/optimizer.cpp (torch.optim semantics), float32. The
// caller walks a parameter's gradient runs (for_each_grad_run) and passes each run's
// value, gradient and state pointers.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace subdp::cuda {

namespace {

using detail::blocks_for;
using detail::grid_first;
using detail::grid_stride;
using detail::kThreads;

__global__ void sgd_kernel(float* w, const float* g, float* buf, int64_t n, float lr, float mu, float wd, bool nesterov,
                           bool first) {
  for (int64_t k = grid_first(); k < n; k += grid_stride()) {
    float d = g[k] + wd * w[k];
    if (buf) {
      const float b = first ? d : mu * buf[k] + d;
      buf[k] = b;
      d = nesterov ? d + mu * b : b;
    }
    w[k] -= lr * d;
  }
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, int64_t n, float b1, float b2,
                             float bc2_sqrt, float step_size, float decay, float eps) {
  for (int64_t k = grid_first(); k < n; k += grid_stride()) {
    const float gk = g[k];
    const float mk = b1 * m[k] + (1.f - b1) * gk;
    const float vk = b2 * v[k] + (1.f - b2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    const float denom = sqrtf(vk) / bc2_sqrt + eps;
    w[k] = w[k] * decay - step_size * mk / denom;
  }
}

}  // namespace

void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float weight_decay,
                bool nesterov, bool first, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, sgd_kernel)(w, g, buf, n, lr, momentum, weight_decay, nesterov, first);
  CUDA_CHECK_LAUNCH();
}

void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t t, cudaStream_t s) {
  if (n <= 0) return;
  // Scalars exactly as engine/optim/optimizer.cpp computes them (double, then rounded to float).
  const float bc1 = static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
  const float step_size = static_cast<float>(lr) / bc1;
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  adamw_update_scaled(w, g, m, v, n, step_size, bc2_sqrt, decay, static_cast<float>(eps), static_cast<float>(beta1),
                      static_cast<float>(beta2), s);
}

void adamw_update_scaled(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float bc2_sqrt,
                         float decay, float eps, float beta1, float beta2, cudaStream_t s) {
  if (n <= 0) return;
  SUBDP_LAUNCH(blocks_for(n), kThreads, 0, s, adamw_kernel)
  (w, g, m, v, n, beta1, beta2, bc2_sqrt, step_size, decay, eps);
  CUDA_CHECK_LAUNCH();
}

}  // namespace subdp::cuda
