// The fenced pool: mmap'd PROT_NONE, opened with mprotect around backend operations. A fault
// inside it is reported by a SIGSEGV handler (offset and backtrace), then handed on to the
// handler installed before ours (the sanitizers' report, or the default: the process dies).
#include "kernels/fenced/pool.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace subdp::fenced {

namespace {

constexpr size_t kPage = 4096;
// Protection changes walk the page table of the range: on 2 MiB transparent huge pages one
// entry covers 512 pages, so the range flipped is kept in whole huge pages (where THP is on).
constexpr size_t kHuge = size_t{2} << 20;

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

std::atomic<const Pool*> g_pool{nullptr};
struct sigaction g_previous;

void write_str(const char* s) {
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void write_number(size_t v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  char out[24];
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  out[n] = '\0';
  write_str(out);
}

// Async-signal-safe: write(2) and backtrace_symbols_fd only.
void on_segv(int sig, siginfo_t* info, void* context) {
  const Pool* pool = g_pool.load();
  if (pool != nullptr && pool->contains(info->si_addr)) {
    write_str("subdp: host access to fenced device memory at byte ");
    write_number(pool->offset_of(info->si_addr));
    write_str(
        " of the pool: host code read or wrote a device tensor without a transfer "
        "(use Tensor::copy_from or HostCopy); backtrace:\n");
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  }
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);  // returning re-runs the faulting access, which now kills the process
}

void install_handler() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction action {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  SUBDP_CHECK(sigaction(SIGSEGV, &action, &g_previous) == 0, "sigaction(SIGSEGV): {}", std::strerror(errno));
}

}  // namespace

Pool::Pool(size_t capacity) : capacity_(round_up(capacity, kHuge)) {
  // Reserve one huge page more than needed, so that the pool can start on a 2 MiB boundary.
  void* p = mmap(nullptr, capacity_ + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  SUBDP_CHECK(p != MAP_FAILED,
              "fenced device: reserving {} bytes of address space failed: {} (a smaller SUBDP_FENCED_POOL_GB, or a "
              "higher ulimit -v)",
              capacity_, std::strerror(errno));
  mapping_ = static_cast<char*>(p);
  base_ = mapping_ + (round_up(reinterpret_cast<uintptr_t>(p), kHuge) - reinterpret_cast<uintptr_t>(p));
  madvise(base_, capacity_, MADV_HUGEPAGE);  // advice only: without THP the pool works, more slowly
  install_handler();
  g_pool.store(this);
}

Pool::~Pool() {
  const Pool* self = this;
  g_pool.compare_exchange_strong(self, nullptr);
  munmap(mapping_, capacity_ + kHuge);
}

void Pool::protect(char* begin, size_t bytes, bool open) const {
  if (bytes == 0) return;
  SUBDP_CHECK(mprotect(begin, bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE) == 0,
              "fenced device: mprotect of {} bytes failed: {}", bytes, std::strerror(errno));
}

void* Pool::allocate(size_t bytes) {
  const size_t size = bytes == 0 ? kPage : (bytes + kPage - 1) / kPage * kPage;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left > 0) free_[offset + size] = left;
    return base_ + offset;
  }
  if (top_ + size > capacity_)
    throw Error(fmt::format(
        "fenced device: out of memory allocating {} bytes (pool of {} bytes, earlier blocks reach byte {}; set "
        "SUBDP_FENCED_POOL_GB for a larger pool)",
        bytes, capacity_, top_));
  const size_t offset = top_, old_span = span();
  top_ += size;
  if (depth_ > 0) protect(base_ + old_span, span() - old_span, true);  // the rest of the span is open too
  return base_ + offset;
}

void Pool::deallocate(void* p, size_t bytes) {
  const size_t size = bytes == 0 ? kPage : (bytes + kPage - 1) / kPage * kPage;
  size_t offset = static_cast<char*>(p) - base_;
  SUBDP_ASSERT(contains(p) && offset % kPage == 0 && offset + size <= top_);
  // The pages stay committed (returning them would split huge pages); first fit reuses them.
  size_t length = size;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = length;
}

void Pool::open() {
  if (depth_++ == 0) protect(base_, span(), true);
}

void Pool::close() {
  SUBDP_ASSERT(depth_ > 0);
  if (--depth_ == 0) protect(base_, span(), false);
}

bool Pool::contains(const void* address) const {
  const char* a = static_cast<const char*>(address);
  return a >= base_ && a < base_ + capacity_;
}

size_t Pool::span() const { return round_up(top_, kHuge); }

size_t Pool::offset_of(const void* address) const { return static_cast<const char*>(address) - base_; }

}  // namespace subdp::fenced
