// Asynchronous copies from global to shared memory (PTX cp.async, sm_80 and later): a thread
// issues 4- or 16-byte copies, commits them as a group and later waits for the group, so a tile's
// load overlaps the products on the previous one (the tensor-core attention, attention_tc.cu).
// A copy's bytes are visible to the issuing thread after the wait and to the block's other
// threads after a __syncthreads that follows it. The emulated build runs kernels/emu/cp_async.h,
// which leaves a destination NaN until its wait.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"
#if defined(SUBDP_CUDA_EMULATED)
#include "kernels/emu/cp_async.h"
#endif

namespace subdp::cuda::async {

/// Copies src_bytes (0 to 16) bytes of src to dst and zero-fills the rest of 16 bytes
/// (cp.async.cg.shared.global, which bypasses L1). dst: 16-byte aligned shared memory; src:
/// 16-byte aligned global memory, not read when src_bytes is 0.
__device__ __forceinline__ void copy16(void* dst, const void* src, int src_bytes) {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::cp_async(dst, src, 16, src_bytes);
#else
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}

/// copy16 for 4 bytes (0 or 4 of src; cp.async.ca.shared.global, the only form of a 4-byte
/// copy, through L1): a float of a row's statistics. dst and src 4-byte aligned.
__device__ __forceinline__ void copy4(void* dst, const void* src, int src_bytes) {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::cp_async(dst, src, 4, src_bytes);
#else
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}

/// Closes a group: the copies this thread issued since the last commit (none makes an empty group).
__device__ __forceinline__ void commit() {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until every group this thread committed, but the N most recent, has landed.
template <int N>
__device__ __forceinline__ void wait() {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

}  // namespace subdp::cuda::async
