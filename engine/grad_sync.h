// Gradient averaging for DP and SDP (design brief, step 3-5): dense gradients are averaged
// over the world; each unit's gradient over its holder group, packed into one contiguous
// bucket per distinct holder group, divided by the holder count (never by W). BatchNorm
// running statistics ride in the same buckets (averaged over their holders). Under
// backward masking, the owner of each group sends the updated unit values to everyone.
#pragma once
#include <memory>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/param.h"
#include "engine/plan.h"

namespace subdp {

/// World W = S subnetworks x R replicas; rank w trains subnetwork w % S.
struct Layout {
  int world = 1, S = 1, rank = 0;
  int subnet() const { return rank % S; }
  int replicas() const { return world / S; }
  /// World ranks whose subnetwork is in `subnets` (sorted).
  std::vector<int> ranks_of(const std::vector<int>& subnets) const;
};

/// One contiguous run of a bucket: `len` floats at `offset` of a tensor.
struct BucketRun {
  float* data;
  int64_t len;
};

/// Everything averaged over one communicator.
struct Bucket {
  int group = -1;                  // plan group id, -1 = world
  std::vector<int> ranks;          // world ranks holding it
  Communicator* comm = nullptr;    // nullptr when this rank is not a member
  std::vector<BucketRun> runs;     // this rank's pieces (members only)
  int64_t elems = 0;
};

class GradientSync {
 public:
  /// Creates one communicator per distinct holder group (collective over world: every
  /// rank must construct it with the same plan). bucket_mb (MiB) bounds one message and the
  /// communication buffer.
  GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan,
               std::vector<Param*> params, double bucket_mb);
  /// Averages gradients and running statistics over their holders.
  void average();
  /// Backward masking: owners broadcast updated unit values (one collective per group, or
  /// per bucket_mb of it), through the all-reduce buffer, which is free once average() ends.
  void broadcast_unit_values();
  /// Payload bytes this rank all-reduced (every communicator) since the last call.
  int64_t take_bytes() {
    const int64_t b = bytes_;
    bytes_ = 0;
    return b;
  }
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
  Communicator& world_;
  Layout layout_;
  const SubnetworkPlan& plan_;
  std::vector<Param*> params_;
  std::vector<std::unique_ptr<Communicator>> group_comms_;
  std::vector<Bucket> buckets_;  // index 0: world; then group g at index g + 1
  // Packs the gradient all-reduces and, after the optimizer step, the owner broadcasts:
  // min(bucket_mb, largest bucket or broadcast group) floats, one buffer for both.
  Tensor comm_buffer_;
  std::vector<std::vector<BucketRun>> value_runs_;  // per group: its unit values (backward masking)
  int64_t bucket_elems_;
  int64_t broadcast_chunk_ = 0;  // floats per broadcast message, the same on every rank
  int64_t bytes_ = 0;
};

}  // namespace subdp
