// Batch shapes of a config, shared by the data sources and the memory planner; the CRC32 the
// sources fingerprint their contents with.
#include "engine/data/data_source.h"

#include <zlib.h>

#include <algorithm>

namespace subdp {

Batch allocate_batch(const Config& c) {
  const int64_t B = c.train.batch_size;
  if (is_language_model(c.model.name))
    return Batch::allocate({B, c.model.context}, DType::i32, {B, c.model.context}, DType::i32);
  return Batch::allocate({B, c.model.in_channels, c.model.image_size, c.model.image_size}, DType::f32, {B}, DType::i32);
}

uint32_t crc32_bytes(uint32_t crc, const void* p, size_t n) {
  const auto* bytes = static_cast<const Bytef*>(p);
  uLong c = crc;
  for (size_t done = 0; done < n;) {  // zlib takes uInt lengths
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    c = crc32(c, bytes + done, static_cast<uInt>(chunk));
    done += chunk;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace subdp
