// Tensor and Storage implementation: storage comes from a DeviceMemory (the run's backend's,
// or the host's for staging); host-side operations dispatch on where the bytes are.
#include "engine/core/tensor.h"

#include <algorithm>
#include <cstring>

#include "engine/core/backend.h"
#include "engine/core/error.h"

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

Storage::Storage(size_t bytes, MemCategory category, std::shared_ptr<DeviceMemory> memory)
    : bytes_(bytes), category_(category), memory_(std::move(memory)) {
  on_host_ = memory_->host_accessible();
  tracked_ = !MemoryTracker::global().paused();
  if (MemoryTracker::global().dry_run()) {  // counted, not allocated
    if (tracked_) MemoryTracker::global().on_alloc(category_, static_cast<int64_t>(bytes_));
    return;
  }
  try {
    data_ = memory_->allocate(bytes_);
  } catch (const Error& e) {
    throw Error(fmt::format("{} (for {})", e.what(), category_name(category)));
  }
  if (tracked_) MemoryTracker::global().on_alloc(category_, static_cast<int64_t>(bytes_));
}

Storage::~Storage() {
  if (tracked_) MemoryTracker::global().on_free(category_, static_cast<int64_t>(bytes_));
  if (data_ != nullptr) memory_->deallocate(data_, bytes_);
}

Tensor Tensor::allocate(const Shape& shape, MemCategory category, DType dtype, std::shared_ptr<DeviceMemory> memory) {
  for (int64_t d : shape) SUBDP_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(shape_numel(shape) * dtype_size(dtype), category, std::move(memory));
  return t;
}

Tensor Tensor::empty(const Shape& shape, MemCategory category, DType dtype) {
  return allocate(shape, category, dtype, backend().memory());
}

Tensor Tensor::host_empty(const Shape& shape, MemCategory category, DType dtype) {
  return allocate(shape, category, dtype, backend().staging_memory());
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

bool Tensor::on_host() const { return !defined() || storage_->on_host(); }

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
  SUBDP_CHECK(shape_numel(shape) == numel(), "cannot view {} as {}", shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  SUBDP_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "slice [{}, {}) out of range for {}",
              begin, end, shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_ += begin * row;
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::zero_() const {
  if (!defined() || !storage_->data()) return;
  if (on_host())
    std::memset(raw(), 0, nbytes());
  else
    backend().zero(raw(), nbytes());
}

void Tensor::copy_from(const Tensor& other) const {
  SUBDP_CHECK(other.numel() == numel() && other.dtype_ == dtype_, "copy from {} into {}", shape_str(other.shape_),
              shape_str(shape_));
  if (!storage_->data() || !other.storage_->data()) return;  // dry run
  if (on_host() && other.on_host())
    std::memcpy(raw(), other.raw(), nbytes());
  else if (on_host())
    backend().to_host(raw(), other.raw(), nbytes());
  else if (other.on_host())
    backend().to_device(raw(), other.raw(), nbytes());
  else
    backend().copy_bytes(raw(), other.raw(), nbytes());
}

void Tensor::copy_from_staging(const Tensor& staging) const {
  if (on_host() || !staging.on_host()) return copy_from(staging);
  SUBDP_CHECK(staging.numel() == numel() && staging.dtype_ == dtype_, "copy from {} into {}", shape_str(staging.shape_),
              shape_str(shape_));
  if (!storage_->data() || !staging.storage_->data()) return;  // dry run
  backend().to_device_async(raw(), staging.raw(), nbytes());
}

HostCopy::HostCopy(const Tensor& t, bool load) : tensor_(t) {
  if (!t.defined() || t.on_host()) {
    data_ = t.defined() ? t.raw() : nullptr;
    return;
  }
  buffer_.resize(t.nbytes());
  data_ = buffer_.data();
  if (load) backend().to_host(data_, t.raw(), t.nbytes());
}

float* HostCopy::f32() const {
  SUBDP_ASSERT(tensor_.dtype() == DType::f32);
  return static_cast<float*>(data_);
}

int32_t* HostCopy::i32() const {
  SUBDP_ASSERT(tensor_.dtype() == DType::i32);
  return static_cast<int32_t*>(data_);
}

void HostCopy::store() const {
  if (!buffer_.empty()) backend().to_device(tensor_.raw(), data_, tensor_.nbytes());
}

std::vector<float> host_values(const Tensor& t) {
  std::vector<float> out(t.numel());
  const HostCopy host(t);
  std::copy(host.f32(), host.f32() + t.numel(), out.begin());
  return out;
}

void set_values(const Tensor& t, const std::vector<float>& values) {
  SUBDP_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "{} values for a tensor of shape {}", values.size(),
              shape_str(t.shape()));
  const HostCopy host(t, /*load=*/false);
  std::copy(values.begin(), values.end(), host.f32());
  host.store();
}

}  // namespace subdp
