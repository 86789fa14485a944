// The warp-level tensor-core instruction mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// and the register moves around it, for kernels that keep their tiles in registers (the
// tensor-core attention, attention_tc.cuh). Unlike wmma's fragments, its register layout is
// specified (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), so a
// kernel can do per-row work (masks, softmax) on the accumulators in place. The emulated build
// runs kernels/emu/mma_sync.h, which implements that same layout. Also the vector moves such
// kernels stage their tiles with, each checked for alignment on the emulated device.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cuda/common.cuh"
#if defined(SUBDP_CUDA_EMULATED)
#include "kernels/emu/mma_sync.h"
#endif

namespace subdp::cuda::mma {

#if defined(SUBDP_CUDA_EMULATED)
/// True where p is `bytes`-aligned; else false, with a sticky cudaErrorMisalignedAddress
/// "<access> an address not <bytes>-byte aligned", as a GPU faults there.
inline bool emu_aligned(const void* p, size_t bytes, const char* access) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return true;
  subdp::emu::set_error(cudaErrorMisalignedAddress,
                        std::string(access) + " an address not " + std::to_string(bytes) + "-byte aligned", true);
  return false;
}
#endif

/// d (16 x 8 floats) = A (16 x 16 bf16, row-major) B (16 x 8 bf16, column-major) + c, one warp,
/// every lane calling. Lane l, g = l / 4 (its group), t = l % 4 (its place in the group),
/// holds, each 32-bit register with its lower-indexed element in its low half:
///   a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9];
///   b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g];
///   c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1] (d likewise).
__device__ __forceinline__ void m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::mma_m16n8k16_bf16(d, a, b, c);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

/// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8 x 8 bf16 matrices from shared
/// memory, one warp, every lane calling. Lane 8 i + k gives in `row` the address of row k of
/// matrix i: 16 bytes, 16-byte aligned, in shared memory (the emulated build raises
/// cudaErrorMisalignedAddress / cudaErrorIllegalAddress otherwise, as a GPU faults). Lane l,
/// g = l / 4, t = l % 4, receives in r[i] matrix i's elements (g, 2t), (g, 2t + 1), the low
/// half first: r[i] is, of an 8 x 8 block stored as rows, the A or B operand register of
/// m16n8k16 that block fills. With kTrans, (2t, g) and (2t + 1, g): the register of a block
/// stored transposed (PTX ISA, "Warp-level matrix load instruction: ldmatrix").
template <bool kTrans = false>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
#if defined(SUBDP_CUDA_EMULATED)
  subdp::emu::ldmatrix_x4(r, row, kTrans);
#else
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
#endif
}

/// The two bf16 at p, p[0] in the low half: one 32-bit load. p must be 4-byte aligned (the
/// emulated build raises cudaErrorMisalignedAddress otherwise, as a GPU faults).
__device__ __forceinline__ uint32_t pair(const __nv_bfloat16* p) {
#if defined(SUBDP_CUDA_EMULATED)
  if (!emu_aligned(p, 4, "mma::pair: a 32-bit load from")) return 0;
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

/// Stores v's two bf16 at p (p[0] from the low half): one 32-bit store. p must be 4-byte
/// aligned, as for pair.
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, uint32_t v) {
#if defined(SUBDP_CUDA_EMULATED)
  if (!emu_aligned(p, 4, "mma::store_pair: a 32-bit store to")) return;
  std::memcpy(p, &v, 4);
#else
  *reinterpret_cast<uint32_t*>(p) = v;
#endif
}

/// The 16 bytes at p as four 32-bit words: one 128-bit load. p must be 16-byte aligned (the
/// emulated build raises cudaErrorMisalignedAddress otherwise, as a GPU faults).
__device__ __forceinline__ void load16(uint32_t (&w)[4], const void* p) {
#if defined(SUBDP_CUDA_EMULATED)
  if (!emu_aligned(p, 16, "mma::load16: a 128-bit load from")) {
    w[0] = w[1] = w[2] = w[3] = 0;
    return;
  }
  std::memcpy(w, p, 16);
#else
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#endif
}

/// lo and hi as one register, lo in the low half.
__device__ __forceinline__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  uint16_t l, h;
  std::memcpy(&l, &lo, 2);
  std::memcpy(&h, &hi, 2);
  return static_cast<uint32_t>(l) | static_cast<uint32_t>(h) << 16;
}

}  // namespace subdp::cuda::mma
