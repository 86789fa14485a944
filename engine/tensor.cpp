// Tensor and Storage implementation (host memory; device memory lives in the CUDA backend).
#include "engine/tensor.h"

#include <cstdlib>
#include <cstring>

#include "engine/error.h"

namespace subdp {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  return 4;
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

std::string element_str(const Shape& shape, int64_t offset) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = offset % shape[d];
    offset /= shape[d];
  }
  return shape_str(idx);
}

Storage::Storage(size_t bytes, MemCategory category, Device device)
    : bytes_(bytes), category_(category), device_(device) {
  SUBDP_CHECK(device == Device::cpu, "host Storage cannot hold device memory");
  tracked_ = !MemoryTracker::global().paused();
  if (tracked_) MemoryTracker::global().on_alloc(category_, static_cast<int64_t>(bytes_));
  if (MemoryTracker::global().dry_run()) return;  // counted, not allocated
  size_t rounded = ((bytes + 63) / 64) * 64;
  data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (data_ == nullptr) {
    if (tracked_) MemoryTracker::global().on_free(category_, static_cast<int64_t>(bytes_));
    throw Error(fmt::format("out of host memory allocating {} bytes for {}", bytes, category_name(category)));
  }
}

Storage::~Storage() {
  if (tracked_) MemoryTracker::global().on_free(category_, static_cast<int64_t>(bytes_));
  std::free(data_);
}

Tensor Tensor::empty(const Shape& shape, MemCategory category, DType dtype) {
  for (int64_t d : shape) SUBDP_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, MemCategory category, DType dtype) {
  Tensor t = empty(shape, category, dtype);
  t.zero_();
  return t;
}

MemCategory Tensor::category() const {
  SUBDP_ASSERT(defined());
  return storage_->category();
}

void* Tensor::raw() const {
  SUBDP_ASSERT(defined());
  return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}

float* Tensor::f32() const {
  SUBDP_ASSERT(dtype_ == DType::f32);
  return static_cast<float*>(raw());
}

int32_t* Tensor::i32() const {
  SUBDP_ASSERT(dtype_ == DType::i32);
  return static_cast<int32_t*>(raw());
}

Tensor Tensor::view(const Shape& shape) const {
  SUBDP_CHECK(shape_numel(shape) == numel(), "cannot view {} as {}", shape_str(shape_),
              shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  SUBDP_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
              "slice [{}, {}) out of range for {}", begin, end, shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ += begin * row;
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() const {
  if (defined() && storage_->data()) std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& other) const {
  SUBDP_CHECK(other.numel() == numel() && other.dtype_ == dtype_, "copy from {} into {}",
              shape_str(other.shape_), shape_str(shape_));
  std::memcpy(raw(), other.raw(), nbytes());
}

}  // namespace subdp
