// ZeRO-1 / ZeRO-2 (Rajbhandari et al. 2020): every bucket is split evenly over its holders,
// chunk by chunk; gradients are reduce-scattered, each holder updates its shard (the
// optimizer keeps state for the shard only), and the updated values are all-gathered.
#pragma once
#include <vector>

#include "engine/parallel/buckets.h"

namespace subdp {

/// A piece of this rank's optimizer shard (parallel.shard other than "none"):
/// `len` values of `param` at `value_off` of its value, at `grad_off` of its gradient
/// layout. Its averaged gradient is at `grad` once reduced: inside the parameter's gradient
/// under ZeRO-1 and, under ZeRO-2, for parameters outside blocks; in the shard-gradient
/// tensor for a block's parameters under ZeRO-2 (their gradient buffer is the next block's by
/// then).
struct ShardPiece {
  Param* param;
  int64_t grad_off, value_off, len;
  float* grad = nullptr;
  float* value = nullptr;  // where the optimizer updates it: in the value, or (FSDP, a block's) in Param::shard_value
};

class ShardedState {
 public:
  /// Cuts every bucket this rank reduces into the same chunks and segments as the
  /// reduce-scatter will, keeping this rank's segments of trainable runs as shard pieces.
  /// Blocks sharded (set.blocks() > 0, ZeRO-2): allocates the shard-gradient tensor
  /// (category grads) for the pieces inside blocks. `simulated` (--simulate-rank): the
  /// other ranks' segments never arrive.
  ShardedState(BucketSet& set, bool simulated);
  /// Reduce-scatters bucket b: this rank's segment of every chunk, averaged, into its shard
  /// pieces (running statistics: back into their values).
  void reduce_scatter(Bucket& b);
  /// All-gathers bucket b's values: this rank's updated shard into its segment, every
  /// segment back into the values (FSDP: the buffer the blocks share).
  void gather_values(Bucket& b);
  std::vector<ShardPiece>& pieces() { return pieces_; }
  const std::vector<ShardPiece>& pieces() const { return pieces_; }

 private:
  BucketSet& set_;
  bool simulated_;
  std::vector<ShardPiece> pieces_;
  Tensor shard_grads_;  // ZeRO-2: the averaged gradient of every shard piece inside a block, in order
};

}  // namespace subdp
