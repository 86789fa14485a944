// DP and SDP without sharding (design brief, step 3-5): each bucket is all-reduced over its
// holder group and divided by the holder count (never by W).
#pragma once
#include "engine/parallel/buckets.h"

namespace subdp {

class HolderAllReduce {
 public:
  explicit HolderAllReduce(BucketSet& set) : set_(set) {}
  /// All-reduces bucket b over its holders (chunk by chunk through the buffer) and writes the
  /// mean back into its runs: gradients, or running statistics by value. No-op where this
  /// rank does not reduce b.
  void reduce(Bucket& b);

 private:
  BucketSet& set_;
};

}  // namespace subdp
