// Host memory for Storage: 64-byte aligned, so vector kernels may use aligned loads.
#include "engine/core/device_memory.h"

#include <cstdlib>
#include <string>

#include "engine/core/error.h"

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

std::optional<size_t> pool_bytes_from_env(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  const double gib = std::strtod(env, &end);
  const bool decimal = std::string(env).find_first_of("xXpP") == std::string::npos;  // strtod reads hex
  SUBDP_CHECK(decimal && end != env && *end == '\0' && gib >= 0.001 && gib <= 1024,
              "{} = \"{}\": expected a decimal size in GiB in [0.001, 1024]", name, env);
  return static_cast<size_t>(gib * double(size_t{1} << 30));
}

}  // namespace subdp
