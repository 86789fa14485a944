// Kernel execution of the emulated device (launch.h, device.h): the launch checks, then each
// block of the grid (blocks in a seeded order) runs its threads as Boost.Context fibers.
// A thread runs until it reaches __syncthreads or a warp collective, then the next thread in
// a freshly shuffled order runs; a barrier opens once every thread it waits for has arrived.
// A warp collective that a lane of its mask has left (exited) and a block whose threads
// wait at different kinds of barrier are errors, as they hang or misbehave on a GPU.
#include <boost/context/fiber.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/emu/cp_async.h"
#include "kernels/emu/errors.h"
#include "kernels/emu/exit_count.h"
#include "kernels/emu/launch_bounds.h"
#include "kernels/emu/launch.h"
#include "kernels/emu/limits.h"
#include "kernels/emu/memory.h"
#include "kernels/emu/seed.h"
#include "kernels/emu/streams.h"

extern "C" char __start_subdp_emu_shared[] __attribute__((weak));
extern "C" char __stop_subdp_emu_shared[] __attribute__((weak));

namespace subdp::emu {

namespace ctx = boost::context;

namespace {

constexpr size_t kStackBytes = 64 * 1024;

/// Fiber stacks, reused from launch to launch (a grid creates one fiber per thread).
struct StackPool {
  std::vector<void*> free;
  ~StackPool() {
    for (void* p : free) std::free(p);
  }
};
StackPool& stacks() {
  static StackPool p;
  return p;
}

struct PooledStack {
  ctx::stack_context allocate() {
    auto& pool = stacks().free;
    void* p = nullptr;
    if (!pool.empty()) {
      p = pool.back();
      pool.pop_back();
    } else {
      p = std::malloc(kStackBytes);
      if (p == nullptr) throw std::bad_alloc();
    }
    ctx::stack_context sc;
    sc.size = kStackBytes;
    sc.sp = static_cast<char*>(p) + kStackBytes;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { stacks().free.push_back(static_cast<char*>(sc.sp) - sc.size); }
};

enum class State { ready, at_block_barrier, at_warp_barrier, done };

struct Thread {
  ctx::fiber fiber;
  ctx::fiber back;  // the scheduler, to switch back to
  uint3 index{};
  int warp = 0, lane = 0;
  State state = State::ready;
  AsyncCopies copies;  // its cp.async copies in flight
};

/// A warp's collectives in flight: lanes with disjoint masks (the lanes of one row each, say)
/// take part in different collectives at once, each lane waiting for the lanes of its mask.
struct Warp {
  uint64_t value[32] = {};
  unsigned members = 0;    // lanes that exist (a last partial warp has fewer)
  unsigned mask[32] = {};  // the lanes each arrived lane's collective waits for
  unsigned arrived = 0;    // lanes at a collective
  const char* what[32] = {};
};

/// How a block's rounds pick the threads they run (drawn per block, seeded): every ready
/// thread (warps in lock step); the ready threads of a random half of the warps (warps drift
/// apart); or those of one warp at a time, in an order redrawn at each __syncthreads (a warp
/// runs to the barrier before the next starts, so one warp's writes land before, or after,
/// every read of another's between two barriers).
enum class Schedule { lock_step, some_warps, warp_by_warp };

struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  Schedule schedule = Schedule::lock_step;
  std::vector<int> warp_order;  // warp_by_warp: warps in the order they run
  int live = 0, at_barrier = 0;
  int or_pending = 0, or_result = 0;
  std::string error;
  std::string ended_badly;  // why a thread may not have ended as it did ("" when none)
};

thread_local Block* g_block = nullptr;
thread_local Thread* g_thread = nullptr;

std::mt19937_64& schedule_rng() {
  static std::mt19937_64 rng(seed() ^ 0xb10c5u);
  return rng;
}

void yield() {
  Thread* t = g_thread;
  t->back = std::move(t->back).resume();
}

void fail_outside_kernel(const char* what) {
  std::fprintf(stderr, "subdp CUDA emulator: %s called outside a kernel\n", what);
  std::abort();
}

/// Opens the collectives of warp w (index wi) whose lanes have all arrived; returns an error
/// text when a lane of an arrived lane's mask has exited or waits with another mask, and sets
/// `waiting` when a collective still waits for lanes that may come.
std::string release_warp(Block& b, Warp& w, size_t wi, bool& waiting) {
  for (unsigned pending = w.arrived; pending != 0;) {
    const int first = __builtin_ctz(pending);
    const unsigned need = (w.mask[first] | 1u << first) & w.members;
    pending &= ~need;
    for (int lane = 0; lane < 32; ++lane) {
      if (!(need >> lane & 1u)) continue;
      const bool exited = b.threads[wi * 32 + lane].state == State::done;
      const bool other_mask = w.arrived >> lane & 1u && ((w.mask[lane] | 1u << lane) & w.members) != need;
      if (!exited && !other_mask) continue;
      const std::string where =
          std::string(w.what[first]) + ": lane " + std::to_string(lane) + " of warp " + std::to_string(wi);
      if (exited) return where + " is in the mask but has exited";
      return where + " waits with mask " + std::to_string(w.mask[lane]) + " (" + w.what[lane] + "), lane " +
             std::to_string(first) + " with " + std::to_string(w.mask[first]);
    }
    if ((w.arrived & need) != need) {
      waiting = true;
      continue;
    }
    for (int lane = 0; lane < 32; ++lane)
      if (need >> lane & 1u) b.threads[wi * 32 + lane].state = State::ready;
    w.arrived &= ~need;
  }
  return "";
}

/// Opens the barriers whose threads have all arrived; returns an error text on a hang.
std::string release_barriers(Block& b) {
  bool warp_waiting = false;
  for (size_t w = 0; w < b.warps.size(); ++w) {
    if (b.warps[w].arrived == 0) continue;
    if (std::string error = release_warp(b, b.warps[w], w, warp_waiting); !error.empty()) return error;
  }
  if (b.at_barrier > 0 && b.at_barrier == b.live) {
    if (warp_waiting) return "threads wait at __syncthreads while others wait at a warp collective";
    for (Thread& t : b.threads)
      if (t.state == State::at_block_barrier) t.state = State::ready;
    b.or_result = b.or_pending;
    b.or_pending = 0;
    b.at_barrier = 0;
    std::shuffle(b.warp_order.begin(), b.warp_order.end(), schedule_rng());
  }
  return "";
}

/// Keeps in `ready` (shuffled, not empty) the threads this round runs under b.schedule.
void choose_threads(const Block& b, std::vector<Thread*>& ready) {
  std::vector<bool> chosen(b.warps.size(), b.schedule == Schedule::lock_step);
  if (b.schedule == Schedule::some_warps) {
    for (size_t w = 0; w < chosen.size(); ++w) chosen[w] = schedule_rng()() & 1u;
    chosen[ready.front()->warp] = true;
  } else if (b.schedule == Schedule::warp_by_warp) {
    std::vector<bool> has_ready(b.warps.size());
    for (const Thread* t : ready) has_ready[t->warp] = true;
    for (int w : b.warp_order)
      if (has_ready[w]) {
        chosen[w] = true;
        break;
      }
  }
  ready.erase(std::remove_if(ready.begin(), ready.end(), [&](const Thread* t) { return !chosen[t->warp]; }),
              ready.end());
}

/// Runs one block's threads to the end; returns an error text ("" when it completed).
std::string run_block(const LaunchConfig& c, const std::function<void()>& body) {
  const unsigned n = c.block.x * c.block.y * c.block.z;
  Block b;
  b.threads.resize(n);
  b.warps.resize((n + 31) / 32);
  b.live = static_cast<int>(n);
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.index = uint3{i % c.block.x, (i / c.block.x) % c.block.y, i / (c.block.x * c.block.y)};
    t.warp = static_cast<int>(i / 32);
    t.lane = static_cast<int>(i % 32);
    b.warps[t.warp].members |= 1u << t.lane;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack(), [&b, &t, &body](ctx::fiber&& back) {
      t.back = std::move(back);
      body();
      if (b.ended_badly.empty()) b.ended_badly = unwaited_copies(t.copies);
      t.state = State::done;
      --b.live;
      return std::move(t.back);
    });
  }
  b.schedule = static_cast<Schedule>(schedule_rng()() % 3);
  b.warp_order.resize(b.warps.size());
  for (size_t w = 0; w < b.warp_order.size(); ++w) b.warp_order[w] = static_cast<int>(w);
  std::shuffle(b.warp_order.begin(), b.warp_order.end(), schedule_rng());
  g_block = &b;
  std::vector<Thread*> ready;
  while (b.live > 0) {
    ready.clear();
    for (Thread& t : b.threads)
      if (t.state == State::ready) ready.push_back(&t);
    if (ready.empty()) {
      b.error = "deadlock: no thread can run (a barrier some threads never reach)";
      break;
    }
    std::shuffle(ready.begin(), ready.end(), schedule_rng());
    // Unless in lock step, some warps stay where they are while the chosen warps' collectives,
    // released at the round's end, let them go on: warps progress unevenly between barriers, as
    // on a GPU, and a warp that reads what another writes without a barrier between them reads
    // it before or after the write depending on the schedule.
    choose_threads(b, ready);
    for (Thread* t : ready) {
      threadIdx = t->index;
      g_thread = t;
      t->fiber = std::move(t->fiber).resume();
    }
    b.error = b.ended_badly.empty() ? release_barriers(b) : b.ended_badly;
    if (!b.error.empty()) break;
  }
  g_block = nullptr;
  g_thread = nullptr;
  return b.error;  // fibers still suspended unwind as `b` goes
}

void poison_static_shared() {
  if (__start_subdp_emu_shared != nullptr && __stop_subdp_emu_shared > __start_subdp_emu_shared)
    std::memset(__start_subdp_emu_shared, 0xff, __stop_subdp_emu_shared - __start_subdp_emu_shared);
}

void run_grid(const LaunchConfig& c, const std::function<void()>& body) {
  const uint64_t blocks = uint64_t{c.grid.x} * c.grid.y * c.grid.z;
  std::vector<uint64_t> order(blocks);
  for (uint64_t i = 0; i < blocks; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), schedule_rng());  // blocks run in no fixed order on a GPU
  gridDim = c.grid;
  blockDim = c.block;
  std::vector<unsigned char> dynamic_shared(c.shared_bytes);
  for (uint64_t i : order) {
    blockIdx = uint3{static_cast<unsigned>(i % c.grid.x), static_cast<unsigned>((i / c.grid.x) % c.grid.y),
                     static_cast<unsigned>(i / (uint64_t{c.grid.x} * c.grid.y))};
    poison_static_shared();
    std::fill(dynamic_shared.begin(), dynamic_shared.end(), 0xff);
    const std::string error = run_block(c, body);
    if (!error.empty()) {
      set_error(cudaErrorLaunchFailure,
                std::string("kernel ") + c.kernel + " block (" + std::to_string(blockIdx.x) + "," +
                    std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + "): " + error,
                true);
      return;
    }
  }
}

std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

AsyncCopies& thread_async_copies() {
  if (g_thread == nullptr) fail_outside_kernel("cp.async");
  return g_thread->copies;
}

bool in_shared_memory(const void* p, size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  return __start_subdp_emu_shared != nullptr && c >= __start_subdp_emu_shared && c + bytes <= __stop_subdp_emu_shared;
}

bool shared_operand_ok(const void* p, size_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    set_error(cudaErrorMisalignedAddress,
              std::string(what) + ": an address not " + std::to_string(bytes) + "-byte aligned", true);
    return false;
  }
  if (!in_shared_memory(p, bytes)) {
    set_error(cudaErrorIllegalAddress, std::string(what) + ": an address outside shared memory", true);
    return false;
  }
  return true;
}

int block_barrier(int predicate) {
  if (g_block == nullptr) fail_outside_kernel("__syncthreads");
  g_thread->state = State::at_block_barrier;
  g_block->or_pending |= predicate;
  ++g_block->at_barrier;
  yield();
  return g_block->or_result;
}

void warp_gather(unsigned mask, uint64_t value, uint64_t (&all)[32], const char* what) {
  if (g_block == nullptr) fail_outside_kernel(what);
  Thread* t = g_thread;
  Warp& w = g_block->warps[t->warp];
  // Two rendezvous: every lane posts its value, then every lane has read before any lane
  // may post the next collective's.
  w.value[t->lane] = value;
  w.mask[t->lane] = mask;
  w.what[t->lane] = what;
  w.arrived |= 1u << t->lane;
  t->state = State::at_warp_barrier;
  yield();
  for (int l = 0; l < 32; ++l) all[l] = w.members >> l & 1u ? w.value[l] : 0;
  w.arrived |= 1u << t->lane;
  t->state = State::at_warp_barrier;
  yield();
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int source, const char* what) {
  uint64_t all[32];
  warp_gather(mask, value, all, what);
  if (g_block == nullptr) return value;
  const unsigned members = g_block->warps[g_thread->warp].members;
  return source >= 0 && source < 32 && (members >> source & 1u) ? all[source] : value;
}

bool check_launch(const LaunchConfig& c) {
  if (sticky_error() != cudaSuccess) return false;
  const unsigned threads = c.block.x * c.block.y * c.block.z;
  std::string why;
  cudaError_t code = cudaErrorInvalidConfiguration;
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.block.x == 0 || c.block.y == 0 || c.block.z == 0)
    why = "a zero grid or block dimension";
  else if (c.block.x > kMaxBlockDim[0] || c.block.y > kMaxBlockDim[1] || c.block.z > kMaxBlockDim[2] ||
           uint64_t{c.block.x} * c.block.y * c.block.z > kMaxThreadsPerBlock)
    why = "block " + dims(c.block) + " exceeds sm_90's 1024 threads per block (1024, 1024, 64 per dimension)";
  else if (const unsigned bound = launch_bound_of(c.kernel); bound != 0 && threads > bound) {
    code = cudaErrorLaunchOutOfResources;
    why = std::to_string(threads) + " threads per block, more than the kernel's __launch_bounds__(" +
          std::to_string(bound) + ")";
  } else if (c.grid.x > kMaxGridDim[0] || c.grid.y > kMaxGridDim[1] || c.grid.z > kMaxGridDim[2])
    why = "grid " + dims(c.grid) + " exceeds sm_90's grid limits (2^31-1, 65535, 65535)";
  else if (c.shared_bytes > kStaticSharedBytes) {
    code = cudaErrorInvalidValue;
    why = std::to_string(c.shared_bytes) +
          " bytes of dynamic shared memory: more than 48 KiB needs "
          "cudaFuncSetAttribute (sm_90 allows at most 227 KiB), which this kernel did not get";
  } else if (stream_of(c.stream) == nullptr) {
    code = cudaErrorInvalidResourceHandle;
    why = "the stream was destroyed";
  }
  if (why.empty()) return true;
  set_error(code,
            std::string("launch of ") + c.kernel + " grid " + dims(c.grid) + " block " + dims(c.block) + ": " + why);
  return false;
}

bool check_pointer_argument(const LaunchConfig& c, int index, const void* p) {
  const Region r = region_of(p, 0);
  if (r == Region::null || r == Region::device) return true;
  set_error(cudaErrorIllegalAddress,
            std::string("kernel ") + c.kernel + " argument " + std::to_string(index) + " points to " +
                describe_region(p, 0) + ", not device memory",
            true);
  return false;
}

namespace {

/// The process's kernel launches, in all and by kernel (its source text, e.g.
/// "adamw_chunks_kernel"), printed at exit with SUBDP_EMU_LAUNCHES=1.
void count_launch(const char* kernel) {
  static ExitCount launches("SUBDP_EMU_LAUNCHES", "kernel launches");
  launches.add(kernel);
}

}  // namespace

void enqueue_grid(const LaunchConfig& c, std::function<void()> thread) {
  count_launch(c.kernel);
  LaunchConfig config = c;
  enqueue(stream_of(c.stream), std::string("kernel ") + c.kernel,
          [config, thread = std::move(thread)] { run_grid(config, thread); });
}

}  // namespace subdp::emu
