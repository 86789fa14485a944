// A CUDA device's overlapped holder all-reduce: deferred collectives ordered by the streams
// (see overlap.h).
#include <algorithm>

#include "engine/parallel/overlap.h"

namespace subdp {

StreamOverlap::StreamOverlap(BucketSet& set, int blocks) : OverlappedAllReduce(set, blocks) {
  int64_t floats = 0;
  for (int i = 0; i < early_chunks(); ++i) {
    offset_.push_back(floats);
    floats += chunks_[i].filled;
  }
  if (floats > 0) buffers_ = Tensor::empty({floats}, MemCategory::comm);
}

void StreamOverlap::begin_step() {
  next_ = 0;
  finished_ = blocks_;
  armed_ = in_flight_ = true;
  used_.clear();
}

void StreamOverlap::block_done(int b) {
  if (!armed_) return;
  finished_ = std::min(finished_, b);
  for (; ready_after(next_, finished_); ++next_) {
    const Chunk& c = chunks_[next_];
    float* buf = buffers_.f32() + offset_[next_];
    BucketSet::pack(c.pieces, buf);  // on the compute stream, after the block's backward
    Communicator& comm = set_.comm_of(set_.buckets()[c.bucket]);
    comm.allreduce_sum_deferred(buf, c.filled);
    if (std::find(used_.begin(), used_.end(), &comm) == used_.end()) used_.push_back(&comm);
  }
}

void StreamOverlap::wait() {
  if (!armed_) return;
  armed_ = false;
  for (Communicator* comm : used_) comm->join();
  for (size_t i = 0; i < next_; ++i) unpack(chunks_[i], buffers_.f32() + offset_[i]);
}

}  // namespace subdp
