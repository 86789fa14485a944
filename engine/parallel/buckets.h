// The bucket core every gradient-sync algorithm shares: each parameter's held runs packed
// into one bucket per (phase, holder group), a communicator per distinct holder group, and
// the chunking of a bucket through one communication buffer (at most parallel.bucket_mb per
// message), cut the same way on every holder.
#pragma once
#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
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

/// Everything averaged over one communicator.
struct Bucket {
  int group = -1;                // plan group id, -1 = world
  int phase = -1;                // ZeRO-2: the block whose gradients it holds; -1 = after the backward pass
  std::vector<int> ranks;        // world ranks holding it
  Communicator* comm = nullptr;  // nullptr when this rank is not a member
  std::vector<BucketRun> runs;   // this rank's pieces (members only)
  int64_t elems = 0;
  size_t first_piece = 0;  // sharded: index of its first piece in the shard pieces
};

/// The model layout a sharding needs.
ParamLayout param_layout_of(Sharding sharding);

class BucketSet {
 public:
  /// Creates one communicator per distinct holder group (collective over world: every rank
  /// must construct it with the same plan) and fills the buckets with the held runs of
  /// `params`. `blocks` > 0 (ZeRO-2, FSDP): one phase per residual block, descending, before
  /// the phase after the backward pass, and trained block parameters go to their block's
  /// phase. `contiguous`: gradient runs stay contiguous (sharded buckets); otherwise a unit
  /// inside rows is one strided run. bucket_mb (MiB) bounds one message.
  BucketSet(Communicator& world, const Layout& layout, const SubnetworkPlan& plan, std::vector<Param*> params,
            double bucket_mb, bool contiguous, int blocks);
  /// Allocates the communication buffer (category comm): min(largest bucket, bucket_mb) floats,
  /// or `at_least` if more (the owner broadcasts' chunk). None on one rank unless `single_rank_too`.
  void allocate_buffer(int64_t at_least, bool single_rank_too);

  /// Index in buckets() of (phase, group): phases in reduction order (blocks descending, then
  /// -1), each with the world then groups by id.
  size_t bucket_index(int phase, int group) const;
  /// True when this rank averages bucket b: the world's, or a group's it holds, non-empty.
  bool reduces(const Bucket& b) const { return (b.group < 0 || b.comm != nullptr) && b.elems > 0; }
  /// The communicator of bucket b (the world's for group -1).
  Communicator& comm_of(const Bucket& b) { return b.group < 0 ? world_ : *b.comm; }
  /// Group of a run of parameter p at local unit position pos (-1 = world).
  int group_of(const Param& p, int pos) const;
  /// World group owner (lowest world rank) of each unit group.
  int owner_of_group(int group) const;
  /// Floats per chunk of a bucket (the same on every holder).
  int64_t chunk_cap() const;
  /// Floats per message at most (parallel.bucket_mb).
  int64_t bucket_elems() const { return bucket_elems_; }

  /// Calls fn(pieces, filled) for each chunk of at most cap floats of runs, in order: pieces
  /// are the sub-runs the chunk holds, filled their total. The same cut on every holder.
  template <class Fn>
  static void for_each_chunk(const std::vector<BucketRun>& runs, int64_t cap, Fn&& fn);
  /// Calls fn(run, from, to, at) for the part [from, to) of each chunk piece (offsets within
  /// the run; `at` its start in the chunk) that falls in this rank's segment of the chunk.
  template <class Fn>
  void for_each_in_segment(const Bucket& b, const std::vector<BucketRun>& pieces, int64_t filled, Fn&& fn) const;
  /// Packs each chunk of runs into the buffer, runs collective(buffer, floats) on it and
  /// unpacks it times `scale`.
  template <class Collective>
  void through_buffer(const std::vector<BucketRun>& runs, int64_t cap, float scale, Collective collective);
  /// Copies the chunk pieces' data (or their values), one after another, to buf.
  static void pack(const std::vector<BucketRun>& pieces, float* buf, bool values = false);
  /// The inverse of pack(pieces, buf) times `scale`: each piece's data from buf.
  static void unpack(const std::vector<BucketRun>& pieces, const float* buf, float scale);
  /// Segment counts of a chunk of `filled` floats over k holders (as my_segment cuts it).
  static std::vector<int64_t> segment_counts(int64_t filled, int64_t k);

  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  float* buffer() { return buffer_.f32(); }
  Communicator& world() { return world_; }
  const Layout& layout() const { return layout_; }
  const SubnetworkPlan& plan() const { return plan_; }
  const std::vector<Param*>& params() const { return params_; }
  int blocks() const { return blocks_; }
  /// Adds payload bytes this rank moved (read by take_bytes); any thread.
  void count_bytes(int64_t bytes) { bytes_ += bytes; }
  /// Payload bytes counted since the last call.
  int64_t take_bytes() { return bytes_.exchange(0); }

 private:
  void add_param(Param& p);
  /// Adds a run of p at unit position pos (-1 = none) to its bucket; a contiguous run that
  /// follows the bucket's last one in both the gradient and the values extends it.
  void add_run(Param& p, const BucketRun& run, int pos);
  /// This rank's segment [begin, end) of a chunk of `filled` floats of bucket b.
  std::pair<int64_t, int64_t> my_segment(const Bucket& b, int64_t filled) const;
  /// Floats [off, off + n) of run r, in its order, appended to out as runs: a strided run's
  /// whole rows as one strided run, a row cut by the chunk as a contiguous one.
  static void append_slice(const BucketRun& r, int64_t off, int64_t n, std::vector<BucketRun>& out);

  Communicator& world_;
  Layout layout_;
  const SubnetworkPlan& plan_;
  std::vector<Param*> params_;
  std::vector<std::unique_ptr<Communicator>> group_comms_;
  std::vector<Bucket> buckets_;  // by bucket_index: per phase, the world's, then group g's at g + 1
  int blocks_ = 0;               // phases before the last: blocks 0 .. blocks_ - 1
  bool contiguous_ = false;
  Tensor buffer_;  // packs every collective's chunk
  int64_t bucket_elems_ = 1;
  std::atomic<int64_t> bytes_{0};  // counted by the overlap's communication thread too
};

template <class Fn>
void BucketSet::for_each_chunk(const std::vector<BucketRun>& runs, int64_t cap, Fn&& fn) {
  size_t run = 0;
  int64_t run_off = 0;
  std::vector<BucketRun> pieces;
  cap = std::max<int64_t>(cap, 1);  // a zero cap would never consume a run
  while (run < runs.size()) {
    pieces.clear();
    int64_t filled = 0;
    while (run < runs.size() && filled < cap) {
      const BucketRun& r = runs[run];
      const int64_t take = std::min(cap - filled, r.len - run_off);
      append_slice(r, run_off, take, pieces);
      filled += take;
      run_off += take;
      if (run_off == r.len) {
        ++run;
        run_off = 0;
      }
    }
    if (filled > 0) fn(pieces, filled);  // empty runs only: every participant has the same ones
  }
}

template <class Fn>
void BucketSet::for_each_in_segment(const Bucket& b, const std::vector<BucketRun>& pieces, int64_t filled,
                                    Fn&& fn) const {
  const auto [lo, hi] = my_segment(b, filled);
  int64_t at = 0;
  for (const BucketRun& r : pieces) {
    SUBDP_ASSERT(r.rows == 1);  // sharded buckets hold contiguous runs
    const int64_t from = std::max(lo, at) - at, to = std::min(hi, at + r.len) - at;
    if (from < to) fn(r, from, to, at);
    at += r.len;
  }
}

template <class Collective>
void BucketSet::through_buffer(const std::vector<BucketRun>& runs, int64_t cap, float scale, Collective collective) {
  float* buf = buffer();
  for_each_chunk(runs, cap, [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    // Pack the chunk, run the collective on it, unpack times `scale`.
    pack(pieces, buf);
    collective(buf, filled);
    unpack(pieces, buf, scale);
  });
}

}  // namespace subdp
