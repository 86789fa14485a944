// The fenced device's memory: one reserved address range, mapped PROT_NONE except while it is
// open (a backend operation or a collective runs), so any host read or write of a device
// tensor outside those faults at its line. Blocks are whole pages, handed out first-fit;
// freed pages stay committed for reuse.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "engine/core/device_memory.h"

namespace subdp::fenced {

class Pool final : public DeviceMemory {
 public:
  /// Reserves `capacity` bytes of address space (no memory is committed until touched) and
  /// installs the SIGSEGV handler that names a fault inside the pool. Throws Error if the
  /// reservation fails.
  explicit Pool(size_t capacity);
  ~Pool() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  bool host_accessible() const override { return false; }

  /// Opens the pool to host code (read and write); nests: the pool closes again when every
  /// open has been closed.
  void open();
  void close();
  /// True when `address` lies inside the reserved range.
  bool contains(const void* address) const;
  /// Bytes from the start of the pool to `address`, for fault messages.
  size_t offset_of(const void* address) const;

 private:
  void protect(char* begin, size_t bytes, bool open) const;
  /// The range open() and close() flip: [base_, base_ + span()), top_ in whole huge pages.
  size_t span() const;
  char* mapping_ = nullptr;  // the reservation (base_ rounded up to 2 MiB inside it)
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t top_ = 0;                 // bytes handed out so far from the start (high-water mark)
  std::map<size_t, size_t> free_;  // offset -> bytes, coalesced
  int depth_ = 0;
};

/// Opens the pool for one backend operation (RAII).
class OpenScope {
 public:
  explicit OpenScope(Pool& pool) : pool_(pool) { pool_.open(); }
  ~OpenScope() { pool_.close(); }
  OpenScope(const OpenScope&) = delete;
  OpenScope& operator=(const OpenScope&) = delete;

 private:
  Pool& pool_;
};

}  // namespace subdp::fenced
