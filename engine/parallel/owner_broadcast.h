// Backward masking (design brief, step 5): every rank runs the full forward but only the
// holders of a unit group update it, so after the optimizer step the group's owner (its
// lowest world rank) broadcasts the updated unit values to every rank.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/parallel/buckets.h"

namespace subdp {

class OwnerBroadcast {
 public:
  /// Collects each group's unit values in canonical (global unit) order, the same on every
  /// rank (every rank holds every value under backward masking).
  explicit OwnerBroadcast(BucketSet& set);
  /// True for backward masking on more than one rank.
  static bool needed(const SubnetworkPlan& plan, const Layout& layout);
  /// Floats per broadcast message: min(largest broadcast group, bucket_mb), the same on every rank.
  int64_t chunk() const { return chunk_; }
  /// Collective over the world: each group's owner sends its values (one broadcast per group,
  /// or per chunk of it), through the communication buffer.
  void broadcast();
  /// Payload bytes since the last call: every rank counts each message once.
  int64_t take_bytes() { return std::exchange(bytes_, 0); }

 private:
  std::vector<BucketRun> unit_value_runs(int group) const;
  BucketSet& set_;
  std::vector<std::vector<BucketRun>> value_runs_;  // per group: its unit values
  int64_t chunk_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace subdp
