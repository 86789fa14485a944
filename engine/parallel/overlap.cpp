// The communication thread of the overlapped holder all-reduce (see overlap.h).
#include "engine/parallel/overlap.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>

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

OverlappedAllReduce::OverlappedAllReduce(BucketSet& set, int blocks) : set_(set), blocks_(blocks) {
  const char* lockstep = std::getenv("SUBDP_OVERLAP_LOCKSTEP");
  lockstep_ = lockstep && std::string(lockstep) == "1";
  const auto& buckets = set_.buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!set_.reduces(buckets[i])) continue;
    BucketSet::for_each_chunk(buckets[i].runs, set_.chunk_cap(),
                              [&](const std::vector<BucketRun>& pieces, int64_t filled) {
                                chunks_.push_back({i, pieces, filled, ready_block(pieces)});
                              });
  }
  // Ready block descending, then the blocking order (bucket, chunk): stable sort.
  std::stable_sort(chunks_.begin(), chunks_.end(), [](const Chunk& a, const Chunk& b) { return a.ready > b.ready; });
  thread_ = std::thread([this] { loop(); });
}

OverlappedAllReduce::~OverlappedAllReduce() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int OverlappedAllReduce::early_chunks() const {
  return static_cast<int>(std::count_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c.ready >= 0; }));
}

void OverlappedAllReduce::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  next_ = 0;
  finished_ = blocks_;
  armed_ = in_flight_ = true;
}

void OverlappedAllReduce::block_done(int b) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_) return;
  finished_ = std::min(finished_, b);
  cv_.notify_all();
  if (lockstep_) cv_.wait(lock, [&] { return !startable(next_); });
}

bool OverlappedAllReduce::startable(size_t i) const {
  return armed_ && i < chunks_.size() && chunks_[i].ready >= 0 && chunks_[i].ready >= finished_ && !error_;
}

void OverlappedAllReduce::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !startable(next_); });
  armed_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool OverlappedAllReduce::finish() {
  if (!in_flight_) return false;
  in_flight_ = false;
  for (; next_ < chunks_.size(); ++next_) send(chunks_[next_]);  // the thread is idle: disarmed
  return true;
}

void OverlappedAllReduce::send(const Chunk& c) {
  Bucket& b = set_.buckets()[c.bucket];
  float* buf = set_.buffer();
  BucketSet::pack(c.pieces, buf);
  set_.comm_of(b).allreduce_sum(buf, c.filled);
  set_.count_bytes(c.filled * static_cast<int64_t>(sizeof(float)));
  BucketSet::unpack(c.pieces, buf, 1.f / static_cast<float>(b.ranks.size()));
}

void OverlappedAllReduce::loop() {
  // The packing and unpacking run on this thread alone: a new thread's OpenMP teams take the
  // process's initial thread count (the cores), not the rank's, and their idle workers spin
  // on the cores the backward pass computes on.
  omp_set_num_threads(1);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || startable(next_); });
    if (stop_) return;
    const Chunk& c = chunks_[next_];
    lock.unlock();
    try {
      send(c);
    } catch (...) {
      lock.lock();
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    lock.lock();
    ++next_;
    cv_.notify_all();
  }
}

}  // namespace subdp
