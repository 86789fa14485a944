// Embedding lookup and its scatter-add backward (OpenMP over rows / column chunks).
#pragma once
#include <cstdint>

namespace subdp::cpu {

/// y (rows, C) = table[ids[r]] (accumulate: +=). ids must be in range (checked by the caller).
void embedding_forward(const int32_t* ids, const float* table, float* y, int64_t rows, int64_t C, bool accumulate);

/// dtable[ids[r]] += dy (rows, C). Threads own column chunks of 16 floats (one cache line),
/// so repeated ids never race and every element is summed over rows in order (deterministic).
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t rows, int64_t C);

}  // namespace subdp::cpu
