// Tensor: a typed, contiguous view (shape, dtype, device) into tracked storage.
// Storage is allocated once through the MemoryTracker under a category and
// shared between views; freeing the last view releases the bytes.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/memory.h"

namespace subdp {

enum class DType { f32, bf16, i32, u8 };
enum class Device { cpu, cuda };

/// Size of one element of dtype in bytes.
size_t dtype_size(DType t);

using Shape = std::vector<int64_t>;
/// Product of the dimensions (1 for a scalar shape).
int64_t shape_numel(const Shape& s);
/// "(2, 3, 4)" for messages and shape comments.
std::string shape_str(const Shape& s);
/// The row-major index of flat element `offset` of a tensor of `shape`, as "(i, j, ...)".
std::string element_str(const Shape& shape, int64_t offset);

/// A tracked, 64-byte aligned host (or device) allocation.
class Storage {
 public:
  Storage(size_t bytes, MemCategory category, Device device = Device::cpu);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemCategory category_;
  Device device_;
  bool tracked_ = true;
};

/// Contiguous row-major tensor view. Default-constructed tensors are
/// "undefined" (no storage), used for absent gradients.
class Tensor {
 public:
  Tensor() = default;
  /// Allocates uninitialised storage of shape under category (tracked).
  static Tensor empty(const Shape& shape, MemCategory category, DType dtype = DType::f32);
  /// Allocates and zero-fills.
  static Tensor zeros(const Shape& shape, MemCategory category, DType dtype = DType::f32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + static_cast<int>(shape_.size()) : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return numel() * dtype_size(dtype_); }
  MemCategory category() const;

  float* f32() const;
  int32_t* i32() const;
  void* raw() const;

  /// Same storage, new shape with the same number of elements. Throws on mismatch.
  Tensor view(const Shape& shape) const;
  /// Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice0(int64_t begin, int64_t end) const;
  void zero_() const;
  void copy_from(const Tensor& other) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace subdp
