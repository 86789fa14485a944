// Gradient averaging for DP and SDP (design brief, step 3-5): dense gradients are averaged
// over the world; each unit's gradient over its holder group, packed into one contiguous
// bucket per distinct holder group, divided by the holder count (never by W). BatchNorm
// running statistics ride in the same buckets (averaged over their holders). Under
// backward masking, the owner of each group sends the updated unit values to everyone.
//
// GradientSync composes the responsibilities over one bucket core (buckets.h): the holder
// all-reduce (holder_allreduce.h), sharded optimizer state (ZeRO-1/2, sharded_state.h),
// sharded parameters (FSDP, sharded_params.h), the owner broadcasts (owner_broadcast.h) and
// the all-reduce overlapped with the backward pass (overlap.h), and owns the block hooks that
// ZeRO-2, FSDP and overlap run inside the forward and backward passes.
#pragma once
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/parallel/buckets.h"
#include "engine/parallel/holder_allreduce.h"
#include "engine/parallel/overlap.h"
#include "engine/parallel/owner_broadcast.h"
#include "engine/parallel/sharded_params.h"
#include "engine/parallel/sharded_state.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"

namespace subdp {

class GradientSync {
 public:
  /// Creates one communicator per distinct holder group (collective over world: every
  /// rank must construct it with the same plan). bucket_mb (MiB) bounds one message and the
  /// communication buffer.
  /// Sharded (ZeRO-1 / ZeRO-2, Rajbhandari et al. 2020): every bucket is split evenly over
  /// its holders, chunk by chunk of at most bucket_mb; gradients are reduce-scattered instead
  /// of all-reduced, and gather_values() all-gathers the values the holders updated on their
  /// shards. Sharding::gradients keeps one bucket per (block, holder group), reduced by
  /// reduce_block(b) during the backward pass for each of the model's `blocks` residual
  /// blocks (held or not); it needs the model's gradients laid out with
  /// ParamLayout::shared_block_grads and allocates the shard-gradient tensor (category grads).
  /// overlap (parallel.overlap, not sharded): the holder all-reduces start during the
  /// backward pass from the block hooks, on a communication thread or as deferred collectives
  /// on a device (overlap.h; the latter allocates a buffer per early chunk, category comm);
  /// needs the model's `blocks`. A no-op on one rank.
  GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan, std::vector<Param*> params,
               double bucket_mb, Sharding sharding = Sharding::none, int blocks = 0,
               OverlapMode overlap = OverlapMode::off);
  /// Averages gradients and running statistics over their holders (ZeRO-2: what no block's
  /// reduce_block took: parameters outside blocks, running statistics). Sharded: only this
  /// rank's shard of each bucket is averaged (the rest of its gradients are stale).
  void average();
  /// ZeRO-2, after block b's backward, b descending on every rank: reduce-scatters block b's
  /// gradients over their holder groups into this rank's shard pieces. The block's gradient
  /// buffer may be reused once it returns. No-op otherwise.
  void reduce_block(int b);
  /// FSDP, before block b's forward and before its backward, on every rank: all-gathers
  /// block b's values from the holders' shards into the buffer the blocks share. No-op
  /// otherwise. A collective: every rank must run the same forwards.
  void gather_block(int b);
  /// FSDP: fills every block parameter's shard with its initial values (init_value, `seed`
  /// as the model's ParamSet; the model leaves values in the shared buffer uninitialised).
  void initialise_shard_values(uint64_t seed);
  /// Sharded only, after the optimizer step: every holder receives every shard's updated
  /// values (one all-gather per chunk, in the all-reduces' order).
  void gather_values();
  /// Backward masking: owners broadcast updated unit values (one collective per group, or
  /// per bucket_mb of it), through the all-reduce buffer, which is free once average() ends.
  void broadcast_unit_values();

  /// ZeRO-2, FSDP and overlap: the calls the model makes around each block
  /// (Model::set_block_hooks). After block b's backward: its gradients' non-finite elements
  /// are counted into the backend's StepCounters (read with the step's counters; no host
  /// wait here), then ZeRO-2 / FSDP reduce-scatter them
  /// (reduce_block) and zero them for the next block, which shares their buffer, and overlap
  /// lets the chunks they complete go out; FSDP: gather_block before each block's forward and
  /// backward. Empty hooks otherwise. Call begin_step() before each step's forward.
  BlockHooks block_hooks();
  /// Resets the step's hook figures and the byte counters.
  void begin_step();
  /// Overlap, after the backward pass: waits for the chunks the block hooks started (before
  /// any other collective); its seconds count in hook_seconds(). No-op otherwise.
  void wait_overlapped();
  /// Overlap: {messages that start during the backward pass, all messages} of this rank's
  /// all-reduce; {0, 0} without overlap.
  std::pair<int, int> overlapped_messages() const {
    return overlap_ ? std::pair<int, int>{overlap_->early_chunks(), overlap_->chunks()} : std::pair<int, int>{0, 0};
  }
  /// True when the block hooks check the blocks' gradients (ZeRO-2, FSDP, overlap): the
  /// caller checks only the rest.
  bool checks_block_gradients() const { return shards_blocks() || overlap_ != nullptr; }
  /// Seconds this step's collectives took inside the forward and backward passes (hooks).
  double hook_seconds() const { return hook_s_; }

  /// Sharded: this rank's shard pieces of trainable gradients (the optimizer updates these
  /// only), in bucket order. Empty when not sharded.
  const std::vector<ShardPiece>& shard_pieces() const;
  bool sharded() const { return sharding_ != Sharding::none; }
  /// ZeRO-2 or FSDP: one bucket per (block, holder group), reduced during the backward pass.
  bool shards_blocks() const { return subdp::shards_blocks(sharding_); }
  /// Payload bytes this rank all-reduced (every communicator) since the last call.
  int64_t take_bytes() { return set_.take_bytes(); }
  /// Payload bytes of the owner broadcasts (backward masking) since the last call: every
  /// rank counts each message once, the owner that sends it and every rank that receives it.
  int64_t take_broadcast_bytes() { return broadcast_ ? broadcast_->take_bytes() : 0; }
  /// Float32 values this rank all-reduces per step (the analytical count of issue 3).
  int64_t elements_per_step() const;
  /// World group owner (lowest world rank) of each unit group; used by assembly.
  int owner_of_group(int group) const { return set_.owner_of_group(group); }
  /// Group of a run of parameter p at local unit position pos (-1 = world).
  int group_of(const Param& p, int pos) const { return set_.group_of(p, pos); }

 private:
  void reduce_bucket(Bucket& b);
  /// ZeRO-2 / FSDP / overlap hook after block b's backward (block_hooks).
  void block_backward_done(int b);
  Sharding sharding_;
  BucketSet set_;
  std::unique_ptr<OwnerBroadcast> broadcast_;  // backward masking on several ranks
  std::unique_ptr<ShardedState> state_;        // ZeRO-1/2 and FSDP
  std::unique_ptr<ShardedParams> params_;      // FSDP
  HolderAllReduce allreduce_;
  std::unique_ptr<OverlappedAllReduce> overlap_;   // parallel.overlap on several ranks
  int next_block_ = -1;                            // ZeRO-2: the block reduce_block expects next (checks the order)
  std::vector<std::vector<Param*>> block_params_;  // ZeRO-2, FSDP: block b's trained parameters
  double hook_s_ = 0;
};

}  // namespace subdp
