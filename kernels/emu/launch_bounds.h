// __launch_bounds__ in the emulated build. The device language accepts the qualifier and
// drops it (a kernel is a host function there), so kernels/emu/CMakeLists.txt reads every
// `__launch_bounds__(N) name(` of kernels/cuda and tests/gpu at configure time into a table
// (launch_bounds_table.cpp in the build tree), and each launch of a kernel is checked against
// its N, as a GPU refuses a block larger than the kernel was compiled for
// (cudaErrorLaunchOutOfResources). N must be an integer literal: the table is built from the
// source text, and configuring fails on anything else, naming the file.
#pragma once
#include <cstddef>

namespace subdp::emu {

struct LaunchBound {
  const char* kernel;  // the kernel's name, without template arguments
  const char* file;    // where __launch_bounds__ was read
  unsigned max_threads;
};

/// The generated table (kernels/emu/CMakeLists.txt).
extern const LaunchBound kLaunchBounds[];
extern const size_t kLaunchBoundsCount;

/// The declared maximum threads per block of the kernel whose launch text is `kernel`
/// ("name", "ns::name" or "name<T, ...>"); 0 when it declares none, or when the launch names
/// the kernel through a variable (a function pointer passed in), which the table cannot see.
unsigned launch_bound_of(const char* kernel);

}  // namespace subdp::emu
