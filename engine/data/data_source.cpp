// Batch shapes of a config, shared by the data sources and the memory planner.
#include "engine/data/data_source.h"

namespace subdp {

Batch allocate_batch(const Config& c) {
  const int64_t B = c.train.batch_size;
  if (is_language_model(c.model.name))
    return Batch::allocate({B, c.model.context}, DType::i32, {B, c.model.context}, DType::i32);
  return Batch::allocate({B, c.model.in_channels, c.model.image_size, c.model.image_size}, DType::f32, {B}, DType::i32);
}

}  // namespace subdp
