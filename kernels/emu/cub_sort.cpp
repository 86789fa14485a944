// The emulated CUB radix sort (cub_sort.h).
#include "kernels/emu/cub_sort.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/emu/errors.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/streams.h"

namespace subdp::emu {

namespace {

/// Workspace CUB would want: a histogram block plus double buffers of keys and values.
size_t workspace_bytes(int n) { return 4096 + 2 * sizeof(int32_t) * static_cast<size_t>(std::max(n, 1)); }

/// Radix order of a signed key: the sign bit flipped, then the bits [begin, end).
uint32_t radix_key(int32_t k, int begin, int end) {
  const uint32_t u = static_cast<uint32_t>(k) ^ 0x80000000u;
  const uint32_t width = static_cast<uint32_t>(end - begin);
  const uint32_t mask = width >= 32 ? 0xffffffffu : ((1u << width) - 1u);
  return (u >> begin) & mask;
}

}  // namespace

cudaError_t sort_pairs_i32(void* temp, size_t& temp_bytes, const int32_t* keys_in, int32_t* keys_out,
                           const int32_t* values_in, int32_t* values_out, int n, int begin_bit, int end_bit,
                           cudaStream_t stream) {
  const std::string call = "cub::DeviceRadixSort::SortPairs";
  if (temp == nullptr) {
    temp_bytes = workspace_bytes(n);
    return cudaSuccess;
  }
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (temp_bytes < workspace_bytes(n))
    return set_error(cudaErrorInvalidValue, call + ": temp_storage_bytes " + std::to_string(temp_bytes) +
                                                " is less than the size query's " + std::to_string(workspace_bytes(n)));
  if (begin_bit < 0 || end_bit > 32 || begin_bit >= end_bit)
    return set_error(cudaErrorInvalidValue, call + ": bits outside [0, 32)");
  if (n <= 0) return cudaSuccess;
  const size_t bytes = sizeof(int32_t) * static_cast<size_t>(n);
  const std::pair<const char*, const void*> args[] = {{"d_temp_storage", temp},
                                                      {"d_keys_in", keys_in},
                                                      {"d_keys_out", keys_out},
                                                      {"d_values_in", values_in},
                                                      {"d_values_out", values_out}};
  for (const auto& a : args) {
    const size_t need = a.second == temp ? temp_bytes : bytes;
    if (region_of(a.second, need) != Region::device)
      return set_error(cudaErrorInvalidValue, call + ": argument " + a.first + " is " +
                                                  describe_region(a.second, need) + ", not device memory");
  }
  Stream* s = stream_of(stream);
  if (s == nullptr) return set_error(cudaErrorInvalidResourceHandle, call + ": destroyed stream");
  enqueue(s, call, [=] {
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return radix_key(keys_in[a], begin_bit, end_bit) < radix_key(keys_in[b], begin_bit, end_bit);
    });
    std::vector<int32_t> k(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      k[i] = keys_in[order[i]];
      v[i] = values_in[order[i]];
    }
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
  });
  return cudaSuccess;
}

}  // namespace subdp::emu
