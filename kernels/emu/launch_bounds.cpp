// Lookup in the generated table of __launch_bounds__ (launch_bounds.h).
#include "kernels/emu/launch_bounds.h"

#include <cstring>
#include <string>

namespace subdp::emu {

unsigned launch_bound_of(const char* kernel) {
  std::string name(kernel);
  name = name.substr(0, name.find('<'));
  while (!name.empty() && name.back() == ' ') name.pop_back();
  const size_t scope = name.rfind("::");  // detail::kernel<T>: the table holds "kernel"
  if (scope != std::string::npos) name = name.substr(scope + 2);
  for (size_t i = 0; i < kLaunchBoundsCount; ++i)
    if (name == kLaunchBounds[i].kernel) return kLaunchBounds[i].max_threads;
  return 0;
}

}  // namespace subdp::emu
