// Matrix transpose on the CPU with 8 x 8 register blocks.
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// dst (cols, rows) = src (rows, cols)^T, or dst += src^T when accumulate; float32, row-major,
/// leading dimensions ld_src and ld_dst in elements (at least cols and rows). src and dst
/// must not overlap. Single-threaded. Whole 8 x 8 blocks move through registers, the ragged
/// edges element by element.
void transpose(const float* src, int rows, int cols, int64_t ld_src, float* dst, int64_t ld_dst, bool accumulate);

}  // namespace subdp::cpu
