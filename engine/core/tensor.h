// Tensor: a typed, contiguous view (shape, dtype) into tracked storage.
// Storage is allocated once through the MemoryTracker under a category and
// shared between views; freeing the last view releases the bytes. A tensor lives in the
// run's backend memory (Tensor::empty) or on the host (Tensor::host_empty: staging buffers);
// host code reads or writes backend memory only through copy_from and HostCopy.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device_memory.h"
#include "engine/core/memory.h"

namespace subdp {

enum class DType { f32, bf16, i32, u8 };

/// Size of one element of dtype in bytes.
size_t dtype_size(DType t);

using Shape = std::vector<int64_t>;
/// Product of the dimensions (1 for a scalar shape).
int64_t shape_numel(const Shape& s);
/// "(2, 3, 4)" for messages and shape comments.
std::string shape_str(const Shape& s);
/// The row-major index of flat element `offset` of a tensor of `shape`, as "(i, j, ...)".
std::string element_str(const Shape& shape, int64_t offset);

/// A tracked, 64-byte aligned allocation from `memory` (host or a backend's device).
class Storage {
 public:
  Storage(size_t bytes, MemCategory category, std::shared_ptr<DeviceMemory> memory);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }
  /// True when host code may touch the bytes (see DeviceMemory::host_accessible).
  bool on_host() const { return on_host_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemCategory category_;
  std::shared_ptr<DeviceMemory> memory_;
  bool on_host_ = true;
  bool tracked_ = true;
};

/// Contiguous row-major tensor view. Default-constructed tensors are
/// "undefined" (no storage), used for absent gradients.
class Tensor {
 public:
  Tensor() = default;
  /// Allocates uninitialised storage of shape under category (tracked) in the run's backend
  /// memory (backend().memory()).
  static Tensor empty(const Shape& shape, MemCategory category, DType dtype = DType::f32);
  /// Allocates and zero-fills (in backend memory).
  static Tensor zeros(const Shape& shape, MemCategory category, DType dtype = DType::f32);
  /// Allocates uninitialised host memory (tracked; the backend's staging memory, page-locked on
  /// CUDA): staging buffers for batches.
  static Tensor host_empty(const Shape& shape, MemCategory category, DType dtype = DType::f32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + static_cast<int>(shape_.size()) : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return numel() * dtype_size(dtype_); }
  MemCategory category() const;
  /// True when host code may read and write the elements directly (host memory, or a
  /// backend whose memory is the host's); otherwise go through copy_from or HostCopy.
  bool on_host() const;

  /// Pointers into the tensor's memory, numel() elements: host pointers only where on_host();
  /// otherwise device pointers for Backend operations and collectives (never dereference them
  /// on the host). An internal error (a bug, not bad input) for an undefined tensor or, from
  /// f32() / i32(), another dtype.
  float* f32() const;
  int32_t* i32() const;
  void* raw() const;

  /// Same storage, new shape with the same number of elements. Throws on mismatch.
  Tensor view(const Shape& shape) const;
  /// Rows [begin, end) of the first dimension, sharing storage. Throws when the range is not
  /// within [0, dim(0)] or the tensor has no dimension.
  Tensor slice0(int64_t begin, int64_t end) const;
  /// Zero-fills (memset on the host, Backend::zero on a device).
  void zero_() const;
  /// Copies other's elements (same numel and dtype) in whichever direction the two memories
  /// need: host to host, host to device, device to host or device to device.
  void copy_from(const Tensor& other) const;
  /// copy_from for a batch's host staging into backend memory, queued without a host wait
  /// (Backend::to_device_async: `staging` must not change until the backend next
  /// synchronises).
  void copy_from_staging(const Tensor& staging) const;

 private:
  static Tensor allocate(const Shape& shape, MemCategory category, DType dtype, std::shared_ptr<DeviceMemory> memory);
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
};

/// The elements of a tensor where host code can read and write them: the tensor's own memory
/// when it is on the host (no copy), else a host copy (loaded from the device on construction
/// when `load`). Call store() to write host changes back; without it they stay on the host.
class HostCopy {
 public:
  explicit HostCopy(const Tensor& t, bool load = true);
  float* f32() const;
  int32_t* i32() const;
  /// Writes the host copy back into the tensor (nothing to do when it is the tensor's memory).
  void store() const;

 private:
  Tensor tensor_;
  std::vector<char> buffer_;
  void* data_ = nullptr;
};

/// The float32 elements of t, copied to the host (a transfer where t is device memory).
std::vector<float> host_values(const Tensor& t);
/// Writes `values` (exactly t.numel() floats) into float32 tensor t, wherever t lives.
void set_values(const Tensor& t, const std::vector<float>& values);

}  // namespace subdp
