// Host memory for Storage: 64-byte aligned, so vector kernels may use aligned loads.
#include "engine/device_memory.h"

#include <cstdlib>

#include "engine/error.h"

namespace subdp {

namespace {

class HostMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes) override {
    const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  bool host_accessible() const override { return true; }
};

}  // namespace

std::shared_ptr<DeviceMemory> host_memory() {
  static const std::shared_ptr<DeviceMemory> memory = std::make_shared<HostMemory>();
  return memory;
}

}  // namespace subdp
