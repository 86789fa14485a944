// Device-side language of the emulated CUDA build: the qualifiers, the built-in index
// variables, barriers, warp shuffles and atomics that kernels/cuda uses, for a kernel
// compiled as host C++. A block's threads are fibers (block.cpp) that switch only at
// __syncthreads and at warp collectives, in a seeded shuffled order between them.
#pragma once
#include <math.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/emu/types.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Dropped here (a kernel is a host function); the emulator reads each kernel's bound from the
// source text into a table and checks every launch against it (launch_bounds.h).
#define __launch_bounds__(...)
// Static shared memory: every kernel's __shared__ arrays sit in one linker section, which the
// emulator fills with 0xff bytes (NaN in float and double) before each block runs, so a read
// of shared memory no thread of the block has written gives NaN instead of a plausible value.
// One block runs at a time, so one copy serves every block. This needs clang: GCC ignores the
// section attribute on the static locals of a template (GCC bug 70435), which is every template
// kernel's shared memory, and cmake/cuda.cmake refuses it for the emulated build.
#define __shared__ static __attribute__((section("subdp_emu_shared")))

// Built-in variables, set by the emulator before it resumes a thread's fiber.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace subdp::emu {

/// Waits until every live thread of the block arrives; returns the OR of their `predicate`.
int block_barrier(int predicate);
/// Warp collective: every lane in `mask` of the calling warp must call it; returns the value
/// lane `source` offered (a lane outside the warp or block gives the caller's own value).
uint64_t warp_exchange(unsigned mask, uint64_t value, int source, const char* what);
/// Warp collective: every lane in `mask` of the calling warp posts `value`; on return all[l]
/// holds lane l's (0 for a lane the warp does not have).
void warp_gather(unsigned mask, uint64_t value, uint64_t (&all)[32], const char* what);
/// True when the `bytes` at p lie in the block's static shared memory (the kernels' __shared__
/// arrays; the emulator gives kernels no dynamic shared memory).
bool in_shared_memory(const void* p, size_t bytes);
/// True when the `bytes` at p are `bytes`-aligned and lie in shared memory, as the operand of
/// an ldmatrix row or a cp.async destination must; else sets the sticky error a GPU would
/// fault with (cudaErrorMisalignedAddress, else cudaErrorIllegalAddress), its message opening
/// with `what`, and returns false.
bool shared_operand_ok(const void* p, size_t bytes, const char* what);
/// Lane of the calling thread in its warp.
inline int lane_id() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return static_cast<int>(linear % 32);
}

template <class T>
T shuffle(unsigned mask, T v, int source, const char* what) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value, "shuffle of a 1-8 byte value");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, source, what);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace subdp::emu

inline void __syncthreads() { subdp::emu::block_barrier(0); }
inline int __syncthreads_or(int predicate) { return subdp::emu::block_barrier(predicate != 0); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  subdp::emu::warp_exchange(mask, 0, subdp::emu::lane_id(), "__syncwarp");
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = subdp::emu::lane_id();
  return subdp::emu::shuffle(mask, v, (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1)), "__shfl_xor_sync");
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = subdp::emu::lane_id();
  return subdp::emu::shuffle(mask, v, (lane & ~(width - 1)) | (src & (width - 1)), "__shfl_sync");
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = subdp::emu::lane_id();
  const int in = (lane & (width - 1)) + static_cast<int>(delta);
  return subdp::emu::shuffle(mask, v, in < width ? lane + static_cast<int>(delta) : lane, "__shfl_down_sync");
}

// Fibers of one block share an OS thread and never switch inside these: plain updates are
// atomic with respect to each other.
template <class T>
inline T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// CUDA's integer overloads, so an int min / max does not convert to float here.
inline int max(int a, int b) { return a < b ? b : a; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
