// Emulated build only (cmake -DSUBDP_CUDA=EMULATE): the warp matrix functions of the toolkit's
// <mma.h> (nvcuda::wmma): m16n16k16 tiles of __nv_bfloat16 operands with float accumulators,
// on tensor cores on a GPU. No kernel of kernels/cuda uses them since the attention moved to
// mma.sync (kernels/emu/mma_sync.h); they stay, tested (Emulator.WarpMatrix*), for the next.
//
// What a GPU leaves unspecified, the emulator makes adversarial:
// - which lane holds which element of a fragment: a seeded permutation (SUBDP_EMU_SEED) per
//   fragment kind, so code that reads x[i] as a given row or column gets wrong values here;
//   element-wise code (scaling every x[i], converting) works as on a GPU;
// - every lane of the warp must call load, store and mma with the same pointer, ldm and
//   layout (a differing lane, or a lane that has exited, is an error);
// - the pointer must be 256-bit aligned and ldm a multiple of 16 bytes, else a sticky
//   cudaErrorMisalignedAddress, as the hardware raises.
// The products of bf16 operands are exact in float; they are summed in k order onto the
// accumulator in float (a tensor core's order and internal rounding are unspecified).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <type_traits>
#include <string>

#include "kernels/emu/bf16.h"
#include "kernels/emu/device.h"
#include "kernels/emu/errors.h"
#include "kernels/emu/seed.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/// A warp's 16 x 16 tile, 8 elements a lane (x[0..7]); which elements, see the file comment.
template <class Use, int m, int n, int k, class T, class Layout = void>
struct fragment {
  static_assert(m == 16 && n == 16 && k == 16, "the emulated wmma has m16n16k16 tiles only");
  static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value
                                                      : std::is_same<T, __nv_bfloat16>::value,
                "the emulated wmma has __nv_bfloat16 operands and float accumulators only");
  static constexpr int num_elements = 8;
  T x[num_elements];
};

namespace detail {

constexpr int kLaneElements = 8;

/// map[lane * 8 + i] = the tile position (row * 16 + col) that lane's x[i] holds, drawn
/// once per fragment kind from the emulator's seed.
template <class Use>
const int* element_map() {
  static const auto map = [] {
    std::array<int, 256> m{};
    for (int p = 0; p < 256; ++p) m[p] = p;
    std::mt19937_64 rng(subdp::emu::seed() ^ (std::is_same<Use, matrix_a>::value   ? 0xa11u
                                              : std::is_same<Use, matrix_b>::value ? 0xb11u
                                                                                   : 0xacc1u));
    std::shuffle(m.begin(), m.end(), rng);
    return m;
  }();
  return map.data();
}

inline void fail(cudaError_t code, const std::string& what) { subdp::emu::set_error(code, what, true); }

/// Every lane must pass the same (pointer, ldm, layout); the pointer 32-byte aligned and
/// ldm * element bytes a multiple of 16. False (a sticky error set) otherwise.
inline bool check_access(const char* what, const void* p, unsigned ldm, size_t element_bytes, int layout) {
  uint64_t ptrs[32], lds[32];
  subdp::emu::warp_gather(0xffffffffu, reinterpret_cast<uint64_t>(p), ptrs, what);
  subdp::emu::warp_gather(0xffffffffu, (uint64_t{ldm} << 8) | static_cast<unsigned>(layout), lds, what);
  for (int l = 0; l < 32; ++l)
    if (ptrs[l] != ptrs[0] || lds[l] != lds[0]) {
      fail(cudaErrorLaunchFailure,
           std::string(what) + ": the lanes of a warp passed different pointers, ldm or layouts");
      return false;
    }
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * element_bytes) % 16 != 0) {
    fail(cudaErrorMisalignedAddress, std::string(what) + ": pointer not 256-bit aligned or ldm " + std::to_string(ldm) +
                                         " not a multiple of 16 bytes");
    return false;
  }
  return true;
}

/// Offset in memory of tile element (r, c) stored row-major (or column-major) with ldm.
inline int64_t offset(int r, int c, unsigned ldm, bool col) {
  return col ? int64_t{c} * ldm + r : int64_t{r} * ldm + c;
}

inline float as_float(float v) { return v; }
inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

/// Every lane's 8 elements of fragment f gathered into the whole tile (row-major floats).
template <class Use, class Frag>
void gather_tile(const Frag& f, float (&tile)[256]) {
  uint64_t where[32];
  subdp::emu::warp_gather(0xffffffffu, reinterpret_cast<uint64_t>(&f), where, "wmma::mma_sync");
  const int* map = element_map<Use>();
  for (int l = 0; l < 32; ++l) {
    const Frag& other = *reinterpret_cast<const Frag*>(where[l]);
    for (int i = 0; i < kLaneElements; ++i) tile[map[l * kLaneElements + i]] = as_float(other.x[i]);
  }
}

}  // namespace detail

template <class Use, class T, class Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T v) {
  for (auto& e : f.x) e = v;
}
template <class Layout>
void fill_fragment(fragment<accumulator, 16, 16, 16, float, Layout>& f, float v) {
  for (float& e : f.x) e = v;
}

/// matrix_a (16 x k) or matrix_b (k x 16) from memory laid out as the fragment's Layout.
template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout_t");
  constexpr bool col = std::is_same<Layout, col_major>::value;
  if (!detail::check_access("wmma::load_matrix_sync", p, ldm, sizeof(T), col)) return;
  const int* map = detail::element_map<Use>() + subdp::emu::lane_id() * detail::kLaneElements;
  for (int i = 0; i < detail::kLaneElements; ++i) f.x[i] = p[detail::offset(map[i] / 16, map[i] % 16, ldm, col)];
}

template <class Layout>
void load_matrix_sync(fragment<accumulator, 16, 16, 16, float, Layout>& f, const float* p, unsigned ldm,
                      layout_t layout) {
  const bool col = layout == mem_col_major;
  if (!detail::check_access("wmma::load_matrix_sync", p, ldm, sizeof(float), col)) return;
  const int* map = detail::element_map<accumulator>() + subdp::emu::lane_id() * detail::kLaneElements;
  for (int i = 0; i < detail::kLaneElements; ++i) f.x[i] = p[detail::offset(map[i] / 16, map[i] % 16, ldm, col)];
}

template <class Layout>
void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float, Layout>& f, unsigned ldm,
                       layout_t layout) {
  const bool col = layout == mem_col_major;
  if (!detail::check_access("wmma::store_matrix_sync", p, ldm, sizeof(float), col)) return;
  const int* map = detail::element_map<accumulator>() + subdp::emu::lane_id() * detail::kLaneElements;
  for (int i = 0; i < detail::kLaneElements; ++i) p[detail::offset(map[i] / 16, map[i] % 16, ldm, col)] = f.x[i];
}

/// d = a b + c (d may be c), float sums of exact bf16 products in k order.
template <class LA, class LB, class LC, class LD>
void mma_sync(fragment<accumulator, 16, 16, 16, float, LD>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB>& b,
              const fragment<accumulator, 16, 16, 16, float, LC>& c) {
  float A[256], B[256], C[256];
  detail::gather_tile<matrix_a>(a, A);
  detail::gather_tile<matrix_b>(b, B);
  detail::gather_tile<accumulator>(c, C);
  __syncwarp();  // every lane has read every fragment before any lane writes d (which may be c)
  const int* map = detail::element_map<accumulator>() + subdp::emu::lane_id() * detail::kLaneElements;
  for (int i = 0; i < detail::kLaneElements; ++i) {
    const int r = map[i] / 16, col = map[i] % 16;
    float s = C[map[i]];
    for (int kk = 0; kk < 16; ++kk) s += A[r * 16 + kk] * B[kk * 16 + col];
    d.x[i] = s;
  }
}

}  // namespace nvcuda::wmma
