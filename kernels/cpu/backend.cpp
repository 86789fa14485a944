// The CPU backend: host memory, kernels/cpu arithmetic (kernels/cpu/backend.h).
#include "kernels/cpu/backend.h"

namespace subdp {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend<cpu::HostAccess>>(); }

}  // namespace subdp
