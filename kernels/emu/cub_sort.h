// cub::DeviceRadixSort::SortPairs of the emulated build, for the int32 keys and values that
// kernels/cuda/embedding.cu sorts: the two-phase protocol (a null temp pointer asks for the
// workspace size), the workspace size checked, the sort (stable, keys in numeric order over
// bits [begin_bit, end_bit)) queued on the stream.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/emu/runtime.h"

namespace subdp::emu {
/// The emulated SortPairs for int32 keys and values.
cudaError_t sort_pairs_i32(void* temp, size_t& temp_bytes, const int32_t* keys_in, int32_t* keys_out,
                           const int32_t* values_in, int32_t* values_out, int n, int begin_bit, int end_bit,
                           cudaStream_t stream);
}  // namespace subdp::emu

namespace cub {

struct DeviceRadixSort {
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const int32_t* d_keys_in,
                               int32_t* d_keys_out, const int32_t* d_values_in, int32_t* d_values_out, int num_items,
                               int begin_bit = 0, int end_bit = 32, cudaStream_t stream = nullptr) {
    return subdp::emu::sort_pairs_i32(d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in,
                                      d_values_out, num_items, begin_bit, end_bit, stream);
  }
};

}  // namespace cub
