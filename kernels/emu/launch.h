// The emulated kernel launch behind SUBDP_LAUNCH (kernels/cuda/launch.cuh): checks the
// configuration against sm_90's limits and every pointer argument against device memory,
// then queues the grid on the stream. Arguments are converted to the kernel's parameter
// types and copied at launch, as CUDA copies them into the launch's parameter buffer.
#pragma once
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/emu/device.h"
#include "kernels/emu/types.h"

namespace subdp::emu {

/// The most bytes of parameters a kernel may take (CUDA 12.1 and later, Volta and later; 4,096
/// before): nvcc refuses a kernel above it, so the emulated build does too.
constexpr size_t kMaxParameterBytes = 32764;

struct LaunchConfig {
  const char* kernel;  // the kernel's source text, e.g. "partial_sum_kernel<T, Square>"
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
};

/// False (and the launch error recorded for cudaGetLastError) when the configuration breaks
/// an sm_90 limit or names a destroyed stream.
bool check_launch(const LaunchConfig& c);
/// False (and a sticky cudaErrorIllegalAddress naming the kernel and argument) when a
/// non-null pointer argument does not point into a live device block.
bool check_pointer_argument(const LaunchConfig& c, int index, const void* p);
/// Queues the grid: `thread` is run once per thread, blocks in a seeded order.
void enqueue_grid(const LaunchConfig& c, std::function<void()> thread);

template <class T>
bool check_argument(const LaunchConfig& c, int index, const T& v) {
  if constexpr (std::is_pointer<T>::value) return check_pointer_argument(c, index, v);
  (void)c, (void)index, (void)v;
  return true;
}

template <class... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), LaunchConfig config) : kernel_(kernel), config_(config) {}

  template <class... A>
  void operator()(A&&... a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    static_assert((sizeof(std::decay_t<P>) + ... + 0) <= kMaxParameterBytes,
                  "kernel parameters above CUDA 12.1+'s 32,764-byte limit");
    std::tuple<std::decay_t<P>...> args(static_cast<P>(std::forward<A>(a))...);
    if (!check_launch(config_)) return;
    bool ok = true;
    int index = 0;
    std::apply([&](const auto&... v) { ((ok = ok && check_argument(config_, index++, v)), ...); }, args);
    if (!ok) return;
    void (*kernel)(P...) = kernel_;
    enqueue_grid(config_, [kernel, args]() { std::apply(kernel, args); });
  }

 private:
  void (*kernel_)(P...);
  LaunchConfig config_;
};

/// SUBDP_LAUNCH's emulated form: launcher(&kernel, "kernel", grid, block, smem, stream)(args...).
template <class... P>
Launcher<P...> launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                        cudaStream_t stream) {
  return Launcher<P...>(kernel, LaunchConfig{name, grid, block, shared_bytes, stream});
}

}  // namespace subdp::emu
