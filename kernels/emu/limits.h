// The emulated device's limits: those of an H200 (compute capability 9.0), enforced at launch.
#pragma once
#include <cstddef>

namespace subdp::emu {

constexpr int kWarpSize = 32;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535u, 65535u};
constexpr size_t kStaticSharedBytes = 48 * 1024;  // per block without opt-in
constexpr size_t kOptinSharedBytes = 227 * 1024;  // per block with cudaFuncSetAttribute
constexpr int kMultiprocessors = 132;
constexpr int kMajor = 9, kMinor = 0;

}  // namespace subdp::emu
