// Optimizer update kernels over n contiguous elements (OpenMP SIMD), as torch.optim does
// them; each returns how many non-finite values it wrote, counted inside the loop so that
// the check costs no second pass over the weights.
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// SGD as torch.optim.SGD: d = g + wd * w; with a momentum buffer buf (null: none),
/// buf = first ? d : momentum * buf + d, d = nesterov ? d + momentum * buf : buf; w -= lr * d.
int64_t sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float momentum, float weight_decay,
                   bool nesterov, bool first);

/// AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW: m = b1 m + (1 - b1) g,
/// v = b2 v + (1 - b2) g^2, w = w * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps), with
/// decay = 1 - lr * wd, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t).
int64_t adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float step_size, float bc2_sqrt,
                     float decay, float eps, float beta1, float beta2);

}  // namespace subdp::cpu
