// Finite-difference gradient checking helpers for the unit tests (design brief,
// invariant 6). Header-only; used by test_gradcheck.cpp.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/param.h"
#include "engine/tensor.h"

namespace subdp::test {

/// How a finite-difference check probes and compares.
struct FdOptions {
  float eps = 1e-2f;         // central-difference step (float32 values)
  double rtol = 1e-2;        // relative tolerance per probe
  double atol = 2e-3;        // absolute floor, as a fraction of the largest |gradient| probed
  int max_probes = 64;       // every element when the tensor is smaller, else a random sample
  uint64_t seed = 1;         // probe sampling
  double max_nonsmooth = 0;  // fraction of probes that may be skipped as non-smooth (kinks)
};

/// Central difference (f(v+eps) - f(v-eps)) / (actual step) of loss() in element i of v.
inline double central_difference(float* v, int64_t i, float eps, const std::function<double()>& loss) {
  const float orig = v[i];
  const float hi = orig + eps, lo = orig - eps;
  v[i] = hi;
  const double lp = loss();
  v[i] = lo;
  const double lm = loss();
  v[i] = orig;
  return (lp - lm) / (static_cast<double>(hi) - static_cast<double>(lo));
}

/// Probe indices: all of [0, n) when n <= max_probes, else a seeded sample without repeats.
inline std::vector<int64_t> probe_indices(int64_t n, int max_probes, uint64_t seed) {
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= max_probes) return idx;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < max_probes; ++i) {
    std::uniform_int_distribution<int64_t> d(i, n - 1);
    std::swap(idx[i], idx[d(rng)]);
  }
  idx.resize(max_probes);
  std::sort(idx.begin(), idx.end());
  return idx;
}

/// Compares analytic[i] with the central difference of loss() in values[i] on a sample of
/// probes. With max_nonsmooth > 0, a probe whose differences at eps and eps/2 disagree (a kink
/// of ReLU / max within the step) is skipped; that decision depends on the forward pass only,
/// so a wrong backward cannot hide behind it. Fails when the probed gradient is all zero
/// (a check that compares nothing). value_index (optional) maps analytic index -> values
/// index (a gradient that covers a prefix of a larger value).
inline ::testing::AssertionResult check_gradient(const std::string& what, float* values,
                                                 const float* analytic, int64_t n,
                                                 const std::function<double()>& loss,
                                                 const FdOptions& opt = {},
                                                 const std::vector<int64_t>& value_index = {}) {
  const auto idx = probe_indices(n, opt.max_probes, opt.seed);
  std::vector<double> num(idx.size()), half(idx.size());
  double scale = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t vi = value_index.empty() ? idx[k] : value_index.at(idx[k]);
    num[k] = central_difference(values, vi, opt.eps, loss);
    if (opt.max_nonsmooth > 0) half[k] = central_difference(values, vi, opt.eps / 2, loss);
    scale = std::max({scale, std::abs(num[k]), static_cast<double>(std::abs(analytic[idx[k]]))});
  }
  if (!(scale > 1e-7))
    return ::testing::AssertionFailure() << what << ": gradient is zero on all " << idx.size()
                                         << " probes (degenerate check)";
  const double atol = opt.atol * scale;
  size_t skipped = 0, bad = 0;
  std::string detail;
  double worst = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (opt.max_nonsmooth > 0 &&
        std::abs(num[k] - half[k]) > opt.rtol * std::max(std::abs(num[k]), std::abs(half[k])) + atol) {
      ++skipped;
      continue;
    }
    const double a = analytic[idx[k]];
    const double err = std::abs(a - num[k]);
    const double tol = opt.rtol * std::max(std::abs(a), std::abs(num[k])) + atol;
    worst = std::max(worst, err / tol);
    if (err > tol) {
      if (++bad <= 5)
        detail += "\n  [" + std::to_string(idx[k]) + "] analytic " + std::to_string(a) + " numeric " +
                  std::to_string(num[k]);
    }
  }
  if (skipped > opt.max_nonsmooth * idx.size())
    return ::testing::AssertionFailure() << what << ": " << skipped << " of " << idx.size()
                                         << " probes non-smooth (allowed fraction " << opt.max_nonsmooth << ")";
  if (bad)
    return ::testing::AssertionFailure() << what << ": " << bad << " of " << idx.size() - skipped
                                         << " probes mismatch (scale " << scale << ")" << detail;
  return ::testing::AssertionSuccess() << what << ": worst err/tol " << worst;
}

/// Fills t with U(-a, a) from a seeded generator.
inline void fill_uniform(const Tensor& t, float a, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-a, a);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
}

/// Random tensor of shape under the activations category.
inline Tensor random_tensor(const Shape& shape, float a, uint64_t seed) {
  Tensor t = Tensor::empty(shape, MemCategory::activations);
  fill_uniform(t, a, seed);
  return t;
}

/// sum(y * r) in double precision.
inline double dot(const float* y, const float* r, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

/// For each element of p.grad (the kept prefix), the index of the local value it belongs to.
inline std::vector<int64_t> grad_value_index(const Param& p) {
  std::vector<int64_t> out(p.grad.defined() ? p.grad.numel() : 0, -1);
  for_each_grad_run(p, [&](int64_t voff, int64_t goff, int64_t len, int) {
    for (int64_t i = 0; i < len; ++i) out.at(goff + i) = voff + i;
  });
  return out;
}

/// For each element of p.value, its flat index in the full-model tensor.
inline std::vector<int64_t> value_full_index(const Param& p) {
  std::vector<int64_t> out(p.value.numel(), -1);
  for_each_value_run(p, [&](int64_t loff, int64_t foff, int64_t len) {
    for (int64_t i = 0; i < len; ++i) out.at(loff + i) = foff + i;
  });
  return out;
}

}  // namespace subdp::test
