// The emulated device's memory (memory.h): an mmap'd PROT_NONE reservation opened by
// mprotect around the emulator's own work, a first-fit block list, and the pinned registry.
// A SIGSEGV inside the reservation is named before the previous handler runs.
#include "kernels/emu/memory.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>

namespace subdp::emu {

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kPage = 4096;
constexpr size_t kPoisonLimit = size_t{64} << 20;  // larger blocks (a backend's arena) stay unfilled

size_t round_up(size_t b, size_t to) { return (b + to - 1) / to * to; }

struct Pool {
  char* base = nullptr;
  size_t capacity = 0;
  size_t top = 0;                 // high-water mark: [base, base + top) is ever handed out
  std::map<size_t, size_t> free;  // offset -> bytes
  std::map<size_t, size_t> live;  // offset -> bytes
  int depth = 0;
};

struct sigaction g_previous;

Pool& pool();

void on_segv(int sig, siginfo_t* info, void* context) {
  const Pool& p = pool();
  const char* a = static_cast<const char*>(info->si_addr);
  if (p.base != nullptr && a >= p.base && a < p.base + p.capacity) {
    static const char msg[] =
        "subdp CUDA emulator: host code touched emulated device memory outside a runtime call "
        "(a missing cudaMemcpy, or a device pointer read on the host); backtrace:\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  }
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);  // the faulting access reruns and kills the process
}

/// Capacity: SUBDP_EMU_DEVICE_GB GiB of address space (default 16; nothing is committed
/// until written).
size_t capacity_from_env() {
  const char* v = std::getenv("SUBDP_EMU_DEVICE_GB");
  const double gb = v ? std::atof(v) : 16.0;
  return round_up(static_cast<size_t>((gb > 0 ? gb : 16.0) * double(size_t{1} << 30)), kPage);
}

Pool& pool() {
  // Never destroyed: the run's backend, a static, frees its memory after statics made later.
  static Pool& p = *[] {
    Pool& q = *new Pool;
    q.capacity = capacity_from_env();
    void* m = mmap(nullptr, q.capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "subdp CUDA emulator: reserving %zu bytes failed: %s\n", q.capacity, std::strerror(errno));
      std::abort();
    }
    q.base = static_cast<char*>(m);
    q.free.emplace(0, q.capacity);
    struct sigaction action {};
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &g_previous);
    return &q;
  }();
  return p;
}

void protect(char* begin, size_t bytes, bool open) {
  if (bytes == 0) return;
  if (mprotect(begin, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::fprintf(stderr, "subdp CUDA emulator: mprotect failed: %s\n", std::strerror(errno));
    std::abort();
  }
}

size_t span(const Pool& p) { return round_up(p.top, kPage); }

struct Pinned {
  std::map<uintptr_t, size_t> blocks;  // start -> bytes
};
Pinned& pinned() {
  static Pinned& p = *new Pinned;  // never destroyed: the run's backend, a static, is torn down after it
  return p;
}

}  // namespace

Region region_of(const void* p, size_t bytes) {
  if (p == nullptr) return Region::null;
  const Pool& d = pool();
  const char* a = static_cast<const char*>(p);
  if (a >= d.base && a < d.base + d.capacity) {
    const size_t off = static_cast<size_t>(a - d.base);
    auto it = d.live.upper_bound(off);
    if (it != d.live.begin()) {
      --it;
      // The end of a block counts as inside for an empty range (a one-past-the-end pointer).
      if (off + bytes <= it->first + it->second && (off < it->first + it->second || bytes == 0)) return Region::device;
    }
    return Region::pageable;
  }
  const auto& blocks = pinned().blocks;
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(u);
  if (it != blocks.begin()) {
    --it;
    if (u + bytes <= it->first + it->second) return Region::pinned;
  }
  return Region::pageable;
}

std::string describe_region(const void* p, size_t bytes) {
  switch (region_of(p, bytes)) {
    case Region::null: return "a null pointer";
    case Region::device: return "device memory";
    case Region::pinned: return "pinned host memory";
    case Region::pageable: break;
  }
  if (in_device_range(p)) return "device memory outside every live cudaMalloc block (freed, or overrun)";
  return "pageable host memory";
}

bool in_device_range(const void* p) {
  const Pool& d = pool();
  const char* a = static_cast<const char*>(p);
  return a >= d.base && a < d.base + d.capacity;
}

void* device_allocate(size_t bytes) {
  Pool& d = pool();
  const size_t size = round_up(bytes == 0 ? 1 : bytes, kAlign);
  for (auto it = d.free.begin(); it != d.free.end(); ++it) {
    if (it->second < size) continue;
    const size_t off = it->first, rest = it->second - size;
    d.free.erase(it);
    if (rest > 0) d.free.emplace(off + size, rest);
    d.live.emplace(off, size);
    const size_t old_span = span(d);
    d.top = std::max(d.top, off + size);
    if (d.depth > 0) protect(d.base + old_span, span(d) - old_span, true);
    if (size <= kPoisonLimit) {
      DeviceOpen open;
      std::memset(d.base + off, 0xff, size);
    }
    return d.base + off;
  }
  return nullptr;
}

bool device_free(void* p) {
  Pool& d = pool();
  if (!in_device_range(p)) return false;
  size_t off = static_cast<size_t>(static_cast<char*>(p) - d.base);
  auto it = d.live.find(off);
  if (it == d.live.end()) return false;
  size_t size = it->second;
  d.live.erase(it);
  auto next = d.free.lower_bound(off);
  if (next != d.free.end() && next->first == off + size) {
    size += next->second;
    next = d.free.erase(next);
  }
  if (next != d.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      size += prev->second;
      d.free.erase(prev);
    }
  }
  d.free.emplace(off, size);
  return true;
}

size_t device_capacity() { return pool().capacity; }

size_t device_used() {
  size_t used = 0;
  for (const auto& kv : pool().live) used += kv.second;
  return used;
}

void* pinned_allocate(size_t bytes) {
  void* p = std::aligned_alloc(kPage, round_up(bytes == 0 ? 1 : bytes, kPage));
  if (p != nullptr) pinned().blocks.emplace(reinterpret_cast<uintptr_t>(p), bytes == 0 ? 1 : bytes);
  return p;
}

bool pinned_free(void* p) {
  auto& blocks = pinned().blocks;
  auto it = blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == blocks.end()) return false;
  blocks.erase(it);
  std::free(p);
  return true;
}

void open_device() {
  Pool& d = pool();
  if (d.depth++ == 0) protect(d.base, span(d), true);
}

void close_device() {
  Pool& d = pool();
  if (--d.depth == 0) protect(d.base, span(d), false);
}

}  // namespace subdp::emu
