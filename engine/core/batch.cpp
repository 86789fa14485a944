// Batch allocation with host staging, and its upload.
#include "engine/core/batch.h"

#include <utility>

namespace subdp {

Batch Batch::allocate(const Shape& x_shape, DType x_dtype, const Shape& y_shape, DType y_dtype) {
  Batch b;
  b.x = Tensor::empty(x_shape, MemCategory::activations, x_dtype);
  b.y = Tensor::empty(y_shape, MemCategory::activations, y_dtype);
  b.x_host = b.x.on_host() ? b.x : Tensor::host_empty(x_shape, MemCategory::activations, x_dtype);
  b.y_host = b.y.on_host() ? b.y : Tensor::host_empty(y_shape, MemCategory::activations, y_dtype);
  return b;
}

void Batch::upload() const {
  // Queued without a host wait on a device: the staging is written again only for the next
  // batch, after this one's forward pass has read its loss back (a synchronisation).
  for (auto [device, host] : {std::pair{x, x_host}, std::pair{y, y_host}}) {
    if (!host.defined() || host.raw() == device.raw() || n == 0) continue;
    device.slice0(0, n).copy_from_staging(host.slice0(0, n));
  }
}

}  // namespace subdp
