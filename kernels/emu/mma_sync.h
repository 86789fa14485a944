// Emulated build only: the warp-level matrix instruction the tensor-core attention kernels
// issue as inline PTX on a GPU, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (kernels/cuda/mma_sync.cuh). Unlike wmma's fragments, its register layout is specified
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), so the emulator
// implements exactly that layout: a kernel that places an element in the wrong lane or half
// register multiplies the wrong values here as on a GPU.
// Also ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16, which loads such operands from shared
// memory, in the layout of the PTX ISA's "Warp-level matrix load instruction: ldmatrix".
// Every lane of the warp must take part (a lane that has exited is an error, as the
// instruction's .aligned requires). The products of bf16 operands are exact in float; they
// are summed in k order onto the accumulator in float (a tensor core's order is unspecified).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/emu/device.h"
#include "kernels/emu/errors.h"

namespace subdp::emu {

namespace mma_detail {

inline float bf16_bits(uint32_t reg, int half) {
  const uint32_t u = (reg >> (16 * half) & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// The registers of every lane of the warp, gathered: all[l] points at lane l's array.
template <class T>
void gather(const T* regs, const T* (&all)[32]) {
  uint64_t where[32];
  warp_gather(0xffffffffu, reinterpret_cast<uint64_t>(regs), where, "mma.sync.m16n8k16");
  for (int l = 0; l < 32; ++l) all[l] = reinterpret_cast<const T*>(where[l]);
}

}  // namespace mma_detail

/// d = A B + c for one warp: A (16 x 16 bf16, row-major) in a[4], B (16 x 8 bf16, column-
/// major) in b[2], c and d (16 x 8 float) in c[4], d[4]; d may be c. Lane l, g = l / 4,
/// t = l % 4, holds (low half first): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
/// a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]; b[0] = B[2t, 2t+1][g],
/// b[1] = B[2t+8, 2t+9][g]; c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1].
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  const uint32_t* pa[32];
  const uint32_t* pb[32];
  const float* pc[32];
  mma_detail::gather(a, pa);
  mma_detail::gather(b, pb);
  mma_detail::gather(c, pc);
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i)
      A[i % 4 < 2 ? g : g + 8][2 * t + (i & 1) + (i >= 4 ? 8 : 0)] = mma_detail::bf16_bits(pa[l][i / 2], i & 1);
    for (int i = 0; i < 4; ++i) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = mma_detail::bf16_bits(pb[l][i / 2], i & 1);
    for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][2 * t + (i & 1)] = pc[l][i];
  }
  __syncwarp();  // every lane has read every operand before any lane writes d (which may be c)
  const int g = lane_id() / 4, t = lane_id() % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
    float s = C[row][col];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
    d[i] = s;
  }
}

/// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 for one warp: four 8 x 8 bf16 matrices,
/// lane 8 i + r giving in `row` the address of row r of matrix i (16 bytes, 16-byte aligned,
/// in shared memory). Lane l, g = l / 4, t = l % 4, receives in r[i] matrix i's elements
/// (g, 2t) and (g, 2t + 1), low half first; with `trans`, (2t, g) and (2t + 1, g). A row
/// address that is not 16-byte aligned is a sticky cudaErrorMisalignedAddress, one outside
/// shared memory a sticky cudaErrorIllegalAddress, as each faults on a GPU; r is then zeros.
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  uint64_t where[32];
  warp_gather(0xffffffffu, reinterpret_cast<uint64_t>(row), where, trans ? "ldmatrix.trans" : "ldmatrix");
  r[0] = r[1] = r[2] = r[3] = 0;
  bool valid = true;
  for (uint64_t a : where) valid = shared_operand_ok(reinterpret_cast<const void*>(a), 16, "ldmatrix row") && valid;
  const int g = lane_id() / 4, t = lane_id() % 4;
  const auto row_of = [&](int i, int k) { return reinterpret_cast<const unsigned char*>(where[8 * i + k]); };
  for (int i = 0; valid && i < 4; ++i) {
    uint16_t lo, hi;
    std::memcpy(&lo, trans ? row_of(i, 2 * t) + 2 * g : row_of(i, g) + 4 * t, 2);
    std::memcpy(&hi, trans ? row_of(i, 2 * t + 1) + 2 * g : row_of(i, g) + 4 * t + 2, 2);
    r[i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
  }
  __syncwarp();  // every lane has read before any lane goes on to write shared memory
}

}  // namespace subdp::emu
