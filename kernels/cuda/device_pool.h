// Device memory: one cudaMalloc'd arena per rank (one GPU per process), carved by a
// first-fit free list at 256-byte granularity with neighbours coalesced on release. Every
// allocation is reported to subdp::MemoryTracker::global() under its MemCategory (requested
// bytes, as host Storage reports), so the GPU footprint per category is measured by the same
// tracker as the CPU one; device_memory_used_bytes() gives the device-wide figure
// (cudaMemGetInfo) that the design's "device memory in use" asks for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "engine/core/memory.h"

namespace subdp::cuda {

/// Free-list bookkeeping of one arena of `capacity` bytes: offsets only, no device calls
/// (so it is testable anywhere). First fit over free blocks sorted by offset.
class ArenaAllocator {
 public:
  static constexpr size_t kAlignment = 256;
  explicit ArenaAllocator(size_t capacity);
  /// Offset of a new block of at least `bytes` (rounded up to kAlignment; 0 bytes takes one
  /// unit). Throws subdp::Error naming the request, free bytes and largest free block when
  /// nothing fits.
  size_t allocate(size_t bytes);
  /// Frees the block at `offset` (from allocate). Throws on an unknown offset.
  void release(size_t offset);
  /// Size of the live block at `offset` (rounded bytes); throws on an unknown offset.
  size_t block_size(size_t offset) const;
  size_t capacity() const { return capacity_; }
  /// Rounded bytes in live blocks.
  size_t used() const { return used_; }
  /// Bytes of the largest free block (what one allocation can still get).
  size_t largest_free() const;
  size_t live_blocks() const { return live_.size(); }
  size_t free_blocks() const { return free_.size(); }

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<size_t, size_t> free_;            // offset -> bytes, sorted for coalescing
  std::unordered_map<size_t, size_t> live_;  // offset -> bytes
};

/// The rank's device arena. Not thread-safe (allocation happens on the training thread).
class DevicePool {
 public:
  /// Selects `device` (cudaSetDevice) and reserves `bytes` there with one cudaMalloc.
  /// Throws (CUDA_CHECK, naming the call) when either fails, e.g. too little device memory.
  DevicePool(int device, size_t bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  /// 256-byte aligned device pointer to `bytes` bytes, reported to the tracker under
  /// `category` (unless the tracker is paused). Throws subdp::Error when the pool is full.
  void* allocate(size_t bytes, MemCategory category);
  /// Returns a pointer from allocate (null is ignored); reports the free to the tracker.
  void release(void* ptr);

  int device() const { return device_; }
  size_t capacity() const { return arena_.capacity(); }
  /// Bytes in live blocks, each rounded up to 256 (the tracker counts the requested bytes).
  size_t used() const { return arena_.used(); }
  const ArenaAllocator& arena() const { return arena_; }

  /// The process-wide pool (one per rank): created by init_global, gone after shutdown_global.
  /// init_global throws when a pool exists already; global() throws before init_global.
  static void init_global(int device, size_t bytes);
  static DevicePool& global();
  static bool has_global();
  static void shutdown_global();

 private:
  struct Block {
    size_t requested;
    MemCategory category;
    bool tracked;
  };
  int device_;
  char* base_ = nullptr;
  ArenaAllocator arena_;
  std::unordered_map<size_t, Block> blocks_;  // offset -> what the tracker was told
};

/// A device allocation from a pool, released when destroyed (movable, not copyable).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DevicePool& pool, size_t bytes, MemCategory category)
      : pool_(&pool), ptr_(pool.allocate(bytes, category)), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : pool_(o.pool_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void reset();
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  DevicePool* pool_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Bytes in use on the current device (cudaMemGetInfo: total - free), every process and
/// context included.
int64_t device_memory_used_bytes();

/// Number of usable CUDA devices. 0 when there is none or no driver; then `reason` (if not
/// null) receives cudaGetErrorString of the failure, or "no CUDA device".
int device_count(std::string* reason = nullptr);

}  // namespace subdp::cuda
