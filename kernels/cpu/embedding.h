// Embedding lookup and its scatter-add backward (OpenMP over rows / column chunks).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// y (rows, C) = table[ids[r]] (accumulate: +=) for a table of `num` rows. Rows whose id lies
/// outside [0, num) are skipped (y untouched); returns how many there were, so that the caller
/// can raise an error without reading the ids on the host.
int64_t embedding_forward(const int32_t* ids, const float* table, int64_t num, float* y, int64_t rows, int64_t C,
                          bool accumulate);

/// dtable[ids[r]] += dy (rows, C), ids outside [0, num) skipped. Threads own column chunks of
/// 16 floats (one cache line), so repeated ids never race and every element is summed over
/// rows in order (deterministic).
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t num, int64_t rows, int64_t C);

}  // namespace subdp::cpu
