// Emulated build only: the asynchronous copies of PTX's cp.async (global -> shared memory,
// sm_80 and later), which kernels/cuda/cp_async.cuh issues as inline PTX on a GPU. A copy's
// destination is undefined until the thread waits for its group, so the emulator fills it
// with 0xff bytes (NaN) when the copy is issued and writes the data only at the wait: a kernel
// that reads a tile before cp.async.wait_group (or, in another thread, before the barrier
// after it) reads NaN instead of the bytes a lucky GPU schedule would have delivered.
#pragma once
#include <string>
#include <vector>

namespace subdp::emu {

/// One thread's copies in flight, in issue order, and its committed group count.
struct AsyncCopies {
  struct Copy {
    unsigned char* dst;
    const unsigned char* src;
    int cp_size;    // 4, 8 or 16 bytes
    int src_bytes;  // the rest of the cp_size bytes are zero-filled
    int group;      // the commit group it belongs to (== committed while still open)
  };
  std::vector<Copy> pending;
  int committed = 0;
};

/// The calling kernel thread's copies (block.cpp keeps one per thread).
AsyncCopies& thread_async_copies();

/// cp.async.{ca,cg}.shared.global [dst], [src], cp_size, src_bytes: copies src_bytes
/// (0..cp_size) bytes of src to dst and zero-fills the rest of cp_size (4, 8 or 16 bytes). dst
/// must be cp_size-aligned in shared memory, src cp_size-aligned where src_bytes > 0: a sticky
/// cudaErrorMisalignedAddress or cudaErrorIllegalAddress otherwise, as a GPU faults. The bytes
/// land at cp_async_wait.
void cp_async(void* dst, const void* src, int cp_size, int src_bytes);
/// cp.async.commit_group: the copies issued since the last commit form one group.
void cp_async_commit();
/// cp.async.wait_group n: every committed group but the n most recent has landed.
void cp_async_wait(int n);
/// "" when `c` has no copy in flight, else why a thread may not end so.
std::string unwaited_copies(const AsyncCopies& c);

}  // namespace subdp::emu
