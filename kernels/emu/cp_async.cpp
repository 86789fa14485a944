// The emulated cp.async (cp_async.h).
#include "kernels/emu/cp_async.h"

#include <cstdint>
#include <cstring>

#include "kernels/emu/device.h"
#include "kernels/emu/errors.h"

namespace subdp::emu {

void cp_async(void* dst, const void* src, int cp_size, int src_bytes) {
  if (cp_size != 4 && cp_size != 8 && cp_size != 16) {
    set_error(cudaErrorLaunchFailure, "cp.async: a copy size of " + std::to_string(cp_size) + " (4, 8 or 16)", true);
    return;
  }
  if (src_bytes < 0 || src_bytes > cp_size) {
    set_error(cudaErrorLaunchFailure,
              "cp.async: a source size of " + std::to_string(src_bytes) + " (0 to " + std::to_string(cp_size) + ")",
              true);
    return;
  }
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % cp_size != 0) {
    set_error(cudaErrorMisalignedAddress,
              "cp.async source: an address not " + std::to_string(cp_size) + "-byte aligned", true);
    return;
  }
  if (!shared_operand_ok(dst, cp_size, "cp.async destination")) return;
  AsyncCopies& c = thread_async_copies();
  std::memset(dst, 0xff, cp_size);  // undefined until the wait
  c.pending.push_back(
      {static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), cp_size, src_bytes, c.committed});
}

void cp_async_commit() { ++thread_async_copies().committed; }

void cp_async_wait(int n) {
  AsyncCopies& c = thread_async_copies();
  const int landed = c.committed - n;  // groups 0 .. landed - 1 complete
  size_t kept = 0;
  for (const AsyncCopies::Copy& copy : c.pending) {
    if (copy.group < landed) {
      std::memcpy(copy.dst, copy.src, copy.src_bytes);
      std::memset(copy.dst + copy.src_bytes, 0, copy.cp_size - copy.src_bytes);
    } else {
      c.pending[kept++] = copy;
    }
  }
  c.pending.resize(kept);
}

std::string unwaited_copies(const AsyncCopies& c) {
  if (c.pending.empty()) return "";
  return "a thread ended with " + std::to_string(c.pending.size()) +
         " cp.async copies it never waited for (cp.async.wait_group)";
}

}  // namespace subdp::emu
