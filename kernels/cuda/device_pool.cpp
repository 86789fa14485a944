// Device arena and its free list (see device_pool.h).
#include "kernels/cuda/device_pool.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "engine/core/error.h"
#include "kernels/cuda/check.h"

namespace subdp::cuda {

namespace {

size_t round_up(size_t bytes) {
  const size_t a = ArenaAllocator::kAlignment;
  return std::max<size_t>(a, (bytes + a - 1) / a * a);
}

std::unique_ptr<DevicePool>& global_pool() {
  static std::unique_ptr<DevicePool> pool;
  return pool;
}

}  // namespace

ArenaAllocator::ArenaAllocator(size_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

size_t ArenaAllocator::allocate(size_t bytes) {
  const size_t need = round_up(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t offset = it->first, rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + need, rest);
    live_.emplace(offset, need);
    used_ += need;
    return offset;
  }
  throw Error(
      fmt::format("device pool out of memory: {} bytes requested, {} of {} bytes free, "
                  "largest free block {} bytes (raise the pool size or lower batch_size)",
                  bytes, capacity_ - used_, capacity_, largest_free()));
}

void ArenaAllocator::release(size_t offset) {
  auto it = live_.find(offset);
  SUBDP_CHECK(it != live_.end(), "device pool: release of unknown block at offset {}", offset);
  size_t start = offset, size = it->second;
  used_ -= size;
  live_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {  // merge with the following block
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the preceding block
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

size_t ArenaAllocator::block_size(size_t offset) const {
  auto it = live_.find(offset);
  SUBDP_CHECK(it != live_.end(), "device pool: unknown block at offset {}", offset);
  return it->second;
}

size_t ArenaAllocator::largest_free() const {
  size_t best = 0;
  for (const auto& kv : free_) best = std::max(best, kv.second);
  return best;
}

DevicePool::DevicePool(int device, size_t bytes) : device_(device), arena_(bytes) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max(arena_.capacity(), ArenaAllocator::kAlignment)));
  base_ = static_cast<char*>(p);
}

DevicePool::~DevicePool() {
  // Blocks still live are the owners' leak; their tracker counts are left as they are.
  if (base_) cudaFree(base_);
}

void* DevicePool::allocate(size_t bytes, MemCategory category) {
  const size_t offset = arena_.allocate(bytes);
  const bool tracked = !MemoryTracker::global().paused();
  if (tracked) MemoryTracker::global().on_alloc(category, static_cast<int64_t>(bytes));
  blocks_[offset] = Block{bytes, category, tracked};
  return base_ + offset;
}

void DevicePool::release(void* ptr) {
  if (ptr == nullptr) return;
  const char* p = static_cast<const char*>(ptr);
  SUBDP_CHECK(p >= base_ && p < base_ + arena_.capacity(),
              "device pool: release of a pointer outside the pool of device {}", device_);
  const size_t offset = static_cast<size_t>(p - base_);
  auto it = blocks_.find(offset);
  SUBDP_CHECK(it != blocks_.end(), "device pool: release of unknown block at offset {}", offset);
  arena_.release(offset);
  if (it->second.tracked)
    MemoryTracker::global().on_free(it->second.category, static_cast<int64_t>(it->second.requested));
  blocks_.erase(it);
}

void DevicePool::init_global(int device, size_t bytes) {
  SUBDP_CHECK(!global_pool(), "device pool already initialised (device {})", global_pool()->device());
  global_pool() = std::make_unique<DevicePool>(device, bytes);
}

DevicePool& DevicePool::global() {
  SUBDP_CHECK(global_pool() != nullptr, "device pool used before DevicePool::init_global");
  return *global_pool();
}

bool DevicePool::has_global() { return global_pool() != nullptr; }

void DevicePool::shutdown_global() { global_pool().reset(); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (pool_ && ptr_) pool_->release(ptr_);
  ptr_ = nullptr;
}

int64_t device_memory_used_bytes() {
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return static_cast<int64_t>(total - free_bytes);
}

int device_count(std::string* reason) {
  int n = 0;
  const cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (reason) *reason = cudaGetErrorString(st);
    return 0;
  }
  if (n == 0 && reason) *reason = "no CUDA device";
  return n;
}

}  // namespace subdp::cuda
