// Helpers of the GPU tests: the skip fixture (no device -> GTEST_SKIP with the reason),
// RAII device arrays, random inputs, bf16 rounding on the host and the relative-error
// measure every kernel test uses: max |gpu - cpu| / max |cpu|.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_pool.h"

namespace subdp::gpu_test {

/// Empty when a CUDA device is usable, else "no CUDA device: <cudaGetErrorString>".
inline const std::string& no_device_reason() {
  static const std::string reason = [] {
    std::string why;
    return cuda::device_count(&why) > 0 ? std::string() : "no CUDA device: " + why;
  }();
  return reason;
}

/// Base of every test that needs a device: skipped, with the reason, when there is none.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!no_device_reason().empty()) GTEST_SKIP() << no_device_reason();
    CUDA_CHECK(cudaSetDevice(0));
  }
  void sync() { CUDA_CHECK(cudaDeviceSynchronize()); }
  cudaStream_t stream = nullptr;  // the legacy default stream
};

/// Device array of n elements of T (cudaMalloc / cudaFree), filled from and read into host vectors.
template <class T>
class Dev {
 public:
  explicit Dev(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void upload(const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* get() const { return p_; }
  operator T*() const { return p_; }

 private:
  T* p_ = nullptr;
  size_t n_;
};

/// n values uniform in [lo, hi), seeded.
inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = d(gen);
  return v;
}

/// max |a - b| / max |b| (0 when both are all zero). NaN anywhere gives +inf.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

#ifdef SUBDP_CUDA_EMULATED
/// The emulated device (kernels/emu): its cuBLAS rounds operands exactly as it models, so
/// tests may hold it to that model; a real device is held to what the library documents.
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;
/// TF32 (10 mantissa bits): an operand off by 2^-11 rounded, 2^-10 truncated.
constexpr double kTf32Tol = 2e-3;

#define EXPECT_REL(gpu, cpu, tol) EXPECT_LT(::subdp::gpu_test::rel_error((gpu), (cpu)), (tol))

// ---- bf16 on the host: bit patterns, round to nearest even --------------------------------

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Values rounded to bf16 (the inputs both backends see in a bf16 test).
inline std::vector<float> round_bf16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_bits_to_f32(f32_to_bf16_bits(v[i]));
  return r;
}

/// Device bf16 array holding v (rounded).
class DevBf16 {
 public:
  explicit DevBf16(const std::vector<float>& v) : bits_(v.size()) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16_bits(v[i]);
    bits_.upload(h);
  }
  explicit DevBf16(size_t n) : bits_(n) {}
  __nv_bfloat16* get() const { return reinterpret_cast<__nv_bfloat16*>(bits_.get()); }
  operator __nv_bfloat16*() const { return get(); }
  std::vector<float> download() const {
    const std::vector<uint16_t> h = bits_.download();
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_bits_to_f32(h[i]);
    return v;
  }

 private:
  Dev<uint16_t> bits_;
};

}  // namespace subdp::gpu_test
