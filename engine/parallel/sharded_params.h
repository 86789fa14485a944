// FSDP (ZeRO-3): on top of ZeRO-2, each trained block parameter's value is kept between
// steps only as this rank's shard (Param::shard_value, its pieces one after another), and a
// block's values are all-gathered into the buffer the blocks share before its forward and
// before its backward.
#pragma once
#include <cstdint>

#include "engine/parallel/sharded_state.h"

namespace subdp {

class ShardedParams {
 public:
  /// Allocates each trained block parameter's Param::shard_value (category params; empty
  /// where this rank's segments miss it) and points its shard pieces into it.
  ShardedParams(BucketSet& set, ShardedState& state);
  /// Fills every shard with the parameter's initial values (init_value with the model's
  /// `seed`; the model leaves the shared buffer uninitialised). No-op in a dry run.
  void initialise(uint64_t seed);
  /// Collective over every rank: all-gathers block b's values from the holders' shards.
  void gather_block(int b);

 private:
  BucketSet& set_;
  ShardedState& state_;
};

}  // namespace subdp
