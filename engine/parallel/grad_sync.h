// Gradient averaging for DP and SDP (design brief, step 3-5): dense gradients are averaged
// over the world; each unit's gradient over its holder group, packed into one contiguous
// bucket per distinct holder group, divided by the holder count (never by W). BatchNorm
// running statistics ride in the same buckets (averaged over their holders). Under
// backward masking, the owner of each group sends the updated unit values to everyone.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"

namespace subdp {

/// World W = S subnetworks x R replicas; rank w trains subnetwork w % S.
struct Layout {
  int world = 1, S = 1, rank = 0;
  int subnet() const { return rank % S; }
  int replicas() const { return world / S; }
  /// World ranks whose subnetwork is in `subnets` (sorted).
  std::vector<int> ranks_of(const std::vector<int>& subnets) const;
};

/// One run of a bucket: `len` floats at `data`, contiguous, or (rows > 1) `rows` rows of
/// len / rows floats, row r at data + r * data_ld, packed row after row. A strided run is one
/// unit's slice across a weight's outer rows (a neuron of an MLP down-projection is one float
/// per row): one copy per unit instead of one per row. For a gradient run, `value` is the same
/// run of the parameter's values (where the optimizer writes; its rows value_ld apart); for a
/// buffer run (running statistics, averaged by value) value == data. Sharded buckets hold
/// contiguous runs only (their shard pieces are contiguous).
struct BucketRun {
  float* data;
  int64_t len;
  float* value = nullptr;
  Param* param = nullptr;  // owner of the run (gradient runs), nullptr for value-only runs
  int64_t rows = 1;
  int64_t data_ld = 0, value_ld = 0;  // floats between rows (rows > 1)
  int64_t width() const { return len / rows; }
};

/// A piece of this rank's optimizer shard (parallel.shard other than "none"):
/// `len` values of `param` at `value_off` of its value, at `grad_off` of its gradient
/// layout. Its averaged gradient is at `grad` once reduced: inside the parameter's gradient
/// under ZeRO-1 and, under ZeRO-2, for parameters outside blocks; in GradientSync's
/// shard-gradient tensor for a block's parameters under ZeRO-2 (their gradient buffer is
/// the next block's by then).
struct ShardPiece {
  Param* param;
  int64_t grad_off, value_off, len;
  float* grad = nullptr;
  float* value = nullptr;  // where the optimizer updates it: in the value, or (FSDP, a block's) in Param::shard_value
};

/// The model layout a sharding needs.
ParamLayout param_layout_of(Sharding sharding);

/// Everything averaged over one communicator.
struct Bucket {
  int group = -1;                  // plan group id, -1 = world
  int phase = -1;                  // ZeRO-2: the block whose gradients it holds; -1 = after the backward pass
  std::vector<int> ranks;          // world ranks holding it
  Communicator* comm = nullptr;    // nullptr when this rank is not a member
  std::vector<BucketRun> runs;     // this rank's pieces (members only)
  int64_t elems = 0;
  size_t first_piece = 0;          // sharded: index of its first piece in the shard pieces
};

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
  GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan,
               std::vector<Param*> params, double bucket_mb, Sharding sharding = Sharding::none, int blocks = 0);
  /// Averages gradients and running statistics over their holders (ZeRO-2: what no block's
  /// reduce_block took: parameters outside blocks, running statistics). Sharded: only this
  /// rank's shard of each bucket is averaged (the rest of its gradients are stale).
  void average();
  /// ZeRO-2, after block b's backward (Model::set_block_backward_hook), b descending on every
  /// rank: reduce-scatters block b's gradients over their holder groups into this rank's
  /// shard pieces. The block's gradient buffer may be reused once it returns. No-op otherwise.
  void reduce_block(int b);
  /// FSDP, before block b's forward and before its backward (Model::set_block_hooks), on every
  /// rank: all-gathers block b's values from the holders' shards into the buffer the blocks
  /// share. No-op otherwise. A collective: every rank must run the same forwards.
  void gather_block(int b);
  /// FSDP: fills every block parameter's shard with its initial values (init_value, `seed`
  /// as the model's ParamSet; the model leaves values in the shared buffer uninitialised).
  void initialise_shard_values(uint64_t seed);
  /// Sharded only, after the optimizer step: every holder receives every shard's updated
  /// values (one all-gather per chunk, in the all-reduces' order).
  void gather_values();
  /// Sharded: this rank's shard pieces of trainable gradients (the optimizer updates these
  /// only), in bucket order. Empty when not sharded.
  const std::vector<ShardPiece>& shard_pieces() const { return shard_pieces_; }
  bool sharded() const { return sharding_ != Sharding::none; }
  /// ZeRO-2 or FSDP: one bucket per (block, holder group), reduced during the backward pass.
  bool shards_blocks() const { return sharding_ == Sharding::gradients || sharding_ == Sharding::parameters; }
  /// Backward masking: owners broadcast updated unit values (one collective per group, or
  /// per bucket_mb of it), through the all-reduce buffer, which is free once average() ends.
  void broadcast_unit_values();
  /// Payload bytes this rank all-reduced (every communicator) since the last call.
  int64_t take_bytes() { return std::exchange(bytes_, 0); }
  /// Payload bytes of the owner broadcasts (backward masking) since the last call: every
  /// rank counts each message once, the owner that sends it and every rank that receives it.
  int64_t take_broadcast_bytes() { return std::exchange(broadcast_bytes_, 0); }
  /// Float32 values this rank all-reduces per step (the analytical count of issue 3).
  int64_t elements_per_step() const;
  /// World group owner (lowest world rank) of each unit group; used by assembly.
  int owner_of_group(int group) const;
  /// Group of a run of parameter p at local unit position pos (-1 = world).
  int group_of(const Param& p, int pos) const;

 private:
  void add_param(Param& p);
  std::vector<BucketRun> unit_value_runs(int group) const;
  bool owner_broadcasts() const;
  void reduce_bucket(Bucket& b);
  template <class Collective>
  void through_buffer(const std::vector<BucketRun>& runs, int64_t cap, float scale, Collective collective);
  /// Calls fn(pieces, filled) for each chunk of at most cap floats of runs, in order: pieces
  /// are the sub-runs the chunk holds, filled their total. The same cut on every holder.
  template <class Fn>
  static void for_each_chunk(const std::vector<BucketRun>& runs, int64_t cap, Fn&& fn);
  /// Floats per chunk of bucket b (the same on every holder).
  int64_t chunk_cap(const Bucket& b) const;
  /// This rank's segment [begin, end) of a chunk of `filled` floats of bucket b.
  std::pair<int64_t, int64_t> my_segment(const Bucket& b, int64_t filled) const;
  /// Calls fn(run, from, to, at) for the part [from, to) of each chunk piece (offsets within
  /// the run; `at` its start in the chunk) that falls in this rank's segment of the chunk.
  template <class Fn>
  void for_each_in_segment(const Bucket& b, const std::vector<BucketRun>& pieces, int64_t filled, Fn&& fn) const;
  /// Copies the chunk pieces' data (or their values), one after another, to buf.
  static void pack(const std::vector<BucketRun>& pieces, float* buf, bool values = false);
  /// Floats [off, off + n) of run r, in its order, appended to out as runs: a strided run's
  /// whole rows as one strided run, a row cut by the chunk as a contiguous one.
  static void append_slice(const BucketRun& r, int64_t off, int64_t n, std::vector<BucketRun>& out);
  /// Adds a run of p at unit position pos (-1 = none) to its bucket; a contiguous run that
  /// follows the bucket's last one in both the gradient and the values extends it.
  void add_run(Param& p, const BucketRun& run, int pos);
  /// True when this rank averages bucket b: the world's, or a group's it holds, non-empty.
  bool reduces(const Bucket& b) const { return (b.group < 0 || b.comm != nullptr) && b.elems > 0; }
  void collect_shard_pieces();
  /// FSDP: allocates each block parameter's Param::shard_value and points the pieces into it.
  void collect_shard_values();
  /// Index in buckets_ of (phase, group): phases in reduction order (ZeRO-2: blocks
  /// descending, then -1; otherwise -1 alone), each with the world then groups by id.
  size_t bucket_index(int phase, int group) const;
  void reduce_scatter_bucket(Bucket& b);
  void gather_bucket_values(Bucket& b);
  Communicator& world_;
  Layout layout_;
  const SubnetworkPlan& plan_;
  std::vector<Param*> params_;
  std::vector<std::unique_ptr<Communicator>> group_comms_;
  std::vector<Bucket> buckets_;  // by bucket_index: per phase, the world's, then group g's at g + 1
  int blocks_ = 0;               // phases before the last: blocks 0 .. blocks_ - 1 (ZeRO-2)
  // Packs the gradient all-reduces and, after the optimizer step, the owner broadcasts:
  // min(bucket_mb, largest bucket or broadcast group) floats, one buffer for both.
  Tensor comm_buffer_;
  std::vector<std::vector<BucketRun>> value_runs_;  // per group: its unit values (backward masking)
  int64_t bucket_elems_;
  int64_t broadcast_chunk_ = 0;  // floats per broadcast message, the same on every rank
  int64_t bytes_ = 0;
  int64_t broadcast_bytes_ = 0;
  Sharding sharding_ = Sharding::none;
  bool simulated_ = false;  // --simulate-rank: gathers never receive the other ranks' segments
  std::vector<ShardPiece> shard_pieces_;
  Tensor shard_grads_;  // ZeRO-2: the averaged gradient of every shard piece inside a block, in order
  int next_block_ = -1;  // ZeRO-2: the block reduce_block expects next (checks the order)
};

}  // namespace subdp
