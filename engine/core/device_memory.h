// Where a backend's tensors live. Storage allocates through a DeviceMemory and keeps it alive,
// so a buffer is always returned to the memory it came from, whatever backend runs later.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>

namespace subdp {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// `bytes` bytes, 64-byte aligned (a unique non-null pointer even for 0 bytes).
  /// Throws Error naming the size when the memory is exhausted.
  virtual void* allocate(size_t bytes) = 0;
  /// Returns a block from allocate(bytes) (the same `bytes`).
  virtual void deallocate(void* p, size_t bytes) = 0;
  /// True when host code may read and write this memory directly (the CPU backend's); false
  /// for device memory, reached only through Backend operations and collectives.
  virtual bool host_accessible() const = 0;
};

/// Plain host memory (aligned_alloc): the CPU backend's memory and every staging buffer.
std::shared_ptr<DeviceMemory> host_memory();

/// A device pool size from the environment variable `name` (a decimal number of GiB in
/// [0.001, 1024]), in bytes; nullopt when it is unset or empty. Throws Error naming the
/// variable and its value otherwise (hex, trailing text, out of range).
std::optional<size_t> pool_bytes_from_env(const char* name);

}  // namespace subdp
