// The CPU backend's overlapped holder all-reduce: a communication thread (see overlap.h).
#include <omp.h>

#include <cstdlib>
#include <utility>
#include <string>

#include "engine/parallel/overlap.h"

namespace subdp {

ThreadedOverlap::ThreadedOverlap(BucketSet& set, int blocks) : OverlappedAllReduce(set, blocks) {
  const char* lockstep = std::getenv("SUBDP_OVERLAP_LOCKSTEP");
  lockstep_ = lockstep && std::string(lockstep) == "1";
  thread_ = std::thread([this] { loop(); });
}

ThreadedOverlap::~ThreadedOverlap() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ThreadedOverlap::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  next_ = 0;
  finished_ = blocks_;
  armed_ = in_flight_ = true;
}

void ThreadedOverlap::block_done(int b) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_) return;
  finished_ = std::min(finished_, b);
  cv_.notify_all();
  if (lockstep_) cv_.wait(lock, [&] { return !startable(next_); });
}

bool ThreadedOverlap::startable(size_t i) const { return armed_ && !error_ && ready_after(i, finished_); }

void ThreadedOverlap::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !startable(next_); });
  armed_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadedOverlap::loop() {
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
