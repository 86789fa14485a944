// The fenced test device: the CPU backend's kernels (bit for bit the same arithmetic) on a
// Pool that host code cannot touch outside backend operations and collectives. The trainer's
// tests run on it so that every missing host <-> device transfer faults on a machine without
// a GPU, at its line, instead of on the first GPU the engine meets.
#include <string>

#include "engine/core/device_memory.h"
#include "kernels/cpu/backend.h"
#include "kernels/fenced/pool.h"

namespace subdp {

namespace {

/// Pool size: SUBDP_FENCED_POOL_GB GiB of address space (default 16; only touched pages cost).
size_t pool_capacity() { return pool_bytes_from_env("SUBDP_FENCED_POOL_GB").value_or(size_t{16} << 30); }

/// The fenced device's access policy for cpu::CpuBackend: every operation opens the pool.
class FencedAccess {
 public:
  FencedAccess() : pool_(std::make_shared<fenced::Pool>(pool_capacity())) {}
  fenced::OpenScope open() { return fenced::OpenScope(*pool_); }
  void open_for_collective() { pool_->open(); }
  void close_for_collective() { pool_->close(); }
  std::shared_ptr<DeviceMemory> memory() { return pool_; }
  std::string name() const { return "fenced"; }

 private:
  std::shared_ptr<fenced::Pool> pool_;
};

}  // namespace

std::unique_ptr<Backend> make_fenced_backend() { return std::make_unique<cpu::CpuBackend<FencedAccess>>(); }

}  // namespace subdp
