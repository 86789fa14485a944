// Finite-difference gradient checking helpers for the unit tests (design brief,
// invariant 6). Header-only; used by test_gradcheck.cpp.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/subnet/param.h"
#include "engine/core/tensor.h"

namespace subdp::test {

/// How a finite-difference check probes and compares.
struct FdOptions {
  float eps = 1e-2f;    // central-difference step (float32 values)
  double rtol = 1e-2;   // relative tolerance per probe
  double atol = 2e-3;   // absolute floor, as a fraction of the largest |gradient| probed
  int max_probes = 64;  // every element when the tensor is smaller, else a random sample
  uint64_t seed = 1;    // probe sampling
  // Piecewise-smooth functions (ReLU / max networks): extra, smaller central-difference steps
  // ("witnesses") and the fraction of probes that may be skipped as non-smooth.
  std::vector<float> witness_steps;
  double max_nonsmooth = 0;
};

/// Central difference (f(v+eps) - f(v-eps)) / (actual step) of loss() in element i of v,
/// and the two one-sided differences (f(v+eps) - f0) / step and (f0 - f(v-eps)) / step
/// around f0 = loss() at v.
struct Differences {
  double central, right, left;
};
inline Differences differences(float* v, int64_t i, float eps, double f0, const std::function<double()>& loss) {
  const float orig = v[i];
  const float hi = orig + eps, lo = orig - eps;
  v[i] = hi;
  const double lp = loss();
  v[i] = lo;
  const double lm = loss();
  v[i] = orig;
  const double up = static_cast<double>(hi) - orig, down = orig - static_cast<double>(lo);
  return {(lp - lm) / (up + down), (lp - f0) / up, (f0 - lm) / down};
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
/// probes: |analytic - numeric| <= rtol * max(|analytic|, |numeric|) + atol * scale, scale the
/// largest |gradient| probed.
/// With witness steps (networks with ReLU / max, whose loss has kinks dense enough that a
/// step of 1e-3 often crosses one), a probe passes when the difference at any of the steps
/// matches; a probe that matches none is a mismatch when all its differences agree with one
/// another within half the tolerance (the loss is smooth there: the analytic gradient is
/// wrong) and is skipped as non-smooth when they disagree (a kink inside the steps), or when
/// the one-sided differences at the first step disagree with each other (a kink so close to
/// the probed value that every central difference straddles it and returns the mean of the
/// two slopes, while the analytic gradient is the slope of one side) and the analytic value
/// matches neither one-sided difference (when it matches one, the probe passes). That
/// decision depends on the forward pass only, so a wrong backward cannot hide behind it, and
/// at most max_nonsmooth of the probes may be skipped. Fails when the probed gradient is all
/// zero (a check that compares nothing). value_index (optional) maps analytic index ->
/// values index (a gradient that covers a prefix of a larger value).
/// SUBDP_GRADCHECK_VERBOSE=1 prints the probe and skip counts of every passing check.
inline ::testing::AssertionResult check_gradient(const std::string& what, float* values, const float* analytic,
                                                 int64_t n, const std::function<double()>& loss,
                                                 const FdOptions& opt = {},
                                                 const std::vector<int64_t>& value_index = {}) {
  const auto idx = probe_indices(n, opt.max_probes, opt.seed);
  std::vector<float> steps = {opt.eps};
  steps.insert(steps.end(), opt.witness_steps.begin(), opt.witness_steps.end());
  std::vector<std::vector<double>> num(idx.size());
  std::vector<Differences> first(idx.size());  // at opt.eps
  const double f0 = loss();
  double scale = 0;
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t vi = value_index.empty() ? idx[k] : value_index.at(idx[k]);
    for (float h : steps) {
      const Differences d = differences(values, vi, h, f0, loss);
      if (num[k].empty()) first[k] = d;
      num[k].push_back(d.central);
    }
    scale = std::max({scale, std::abs(num[k][0]), static_cast<double>(std::abs(analytic[idx[k]]))});
  }
  if (!(scale > 1e-7))
    return ::testing::AssertionFailure() << what << ": gradient is zero on all " << idx.size()
                                         << " probes (degenerate check)";
  const double atol = opt.atol * scale;
  auto close = [&](double a, double b, double f = 1) {
    return std::abs(a - b) <= f * (opt.rtol * std::max(std::abs(a), std::abs(b)) + atol);
  };
  size_t skipped = 0, bad = 0;
  std::string detail;
  for (size_t k = 0; k < idx.size(); ++k) {
    const double a = analytic[idx[k]];
    bool match = false, smooth = true;
    for (double v : num[k]) {
      match = match || close(a, v);
      for (double w : num[k]) smooth = smooth && close(v, w, 0.5);
    }
    if (!opt.witness_steps.empty() && !close(first[k].right, first[k].left)) {
      // A kink at the probed value: the backward takes one side's slope, so the analytic
      // value must match one of the one-sided differences (a check, not a skip).
      smooth = false;
      match = match || close(a, first[k].right) || close(a, first[k].left);
    }
    if (match) continue;
    if (!smooth) {
      ++skipped;
      continue;
    }
    if (++bad <= 5) {
      detail += "\n  [" + std::to_string(idx[k]) + "] analytic " + std::to_string(a) + " numeric";
      for (double v : num[k]) detail += " " + std::to_string(v);
    }
  }
  if (bad)
    return ::testing::AssertionFailure() << what << ": " << bad << " of " << idx.size() << " probes mismatch (scale "
                                         << scale << ")" << detail;
  if (skipped > opt.max_nonsmooth * idx.size())
    return ::testing::AssertionFailure() << what << ": " << skipped << " of " << idx.size()
                                         << " probes non-smooth (allowed fraction " << opt.max_nonsmooth << ")";
  if (std::getenv("SUBDP_GRADCHECK_VERBOSE"))
    std::printf("gradcheck %s: %zu probes, %zu non-smooth\n", what.c_str(), idx.size(), skipped);
  return ::testing::AssertionSuccess();
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
