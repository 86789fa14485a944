// The chunk schedule every overlapped holder all-reduce shares (see overlap.h).
#include "engine/parallel/overlap.h"

#include <algorithm>
#include <climits>

#include "engine/core/error.h"

namespace subdp {

namespace {

/// The lowest block among the pieces' parameters; -1 when one lies outside every block.
int ready_block(const std::vector<BucketRun>& pieces) {
  int lowest = INT_MAX;
  for (const BucketRun& r : pieces) {
    if (!r.param || r.param->block < 0) return -1;  // running statistics, dense parameters outside blocks
    lowest = std::min(lowest, r.param->block);
  }
  return lowest;
}

}  // namespace

std::unique_ptr<OverlappedAllReduce> OverlappedAllReduce::make(BucketSet& set, int blocks, OverlapMode mode) {
  SUBDP_ASSERT(mode != OverlapMode::off);
  if (mode == OverlapMode::streams) return std::make_unique<StreamOverlap>(set, blocks);
  return std::make_unique<ThreadedOverlap>(set, blocks);
}

OverlappedAllReduce::OverlappedAllReduce(BucketSet& set, int blocks) : set_(set), blocks_(blocks) {
  const auto& buckets = set_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!set_.reduces(buckets[i])) continue;
    BucketSet::for_each_chunk(buckets[i].runs, set_.chunk_cap(),
                              [&](const std::vector<BucketRun>& pieces, int64_t filled) {
                                chunks_.push_back({i, pieces, filled, ready_block(pieces)});
                              });
  }
  // Ready block descending, then the blocking order (bucket, chunk): stable sort. The early
  // chunks (ready >= 0) come first.
  std::stable_sort(chunks_.begin(), chunks_.end(), [](const Chunk& a, const Chunk& b) { return a.ready > b.ready; });
}

int OverlappedAllReduce::early_chunks() const {
  return static_cast<int>(std::count_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c.ready >= 0; }));
}

bool OverlappedAllReduce::finish() {
  if (!in_flight_) return false;
  in_flight_ = false;
  for (; next_ < chunks_.size(); ++next_) send(chunks_[next_]);  // wait() disarmed the hooks
  return true;
}

void OverlappedAllReduce::send(const Chunk& c) {
  float* buf = set_.buffer();
  BucketSet::pack(c.pieces, buf);
  set_.comm_of(set_.buckets()[c.bucket]).allreduce_sum(buf, c.filled);
  unpack(c, buf);
}

void OverlappedAllReduce::unpack(const Chunk& c, const float* buf) {
  set_.count_bytes(c.filled * static_cast<int64_t>(sizeof(float)));
  BucketSet::unpack(c.pieces, buf, 1.f / static_cast<float>(set_.buckets()[c.bucket].ranks.size()));
}

}  // namespace subdp
