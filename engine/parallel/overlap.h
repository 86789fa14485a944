// Holder all-reduces overlapped with the backward pass (parallel.overlap): the chunks that
// HolderAllReduce sends after the backward pass, cut the same way (the same pieces and
// counts, so the same sums bit for bit), sent instead by a communication thread as soon as
// every block whose gradients a chunk holds has finished its backward (PyTorch DDP's
// gradient-ready buckets; Li et al. 2020, "PyTorch Distributed", section 3.2.3). A chunk with
// parameters outside the blocks (embeddings, head, norms) or running statistics waits for
// the end of the backward pass and goes out on the calling thread.
//
// Order: every rank sends its chunks sorted by (ready block descending, bucket, chunk), a
// total order on which the holders of any two communicators agree (a chunk's ready block is
// a property of the units it holds, the same on every holder), so blocking collectives on
// several communicators cannot cross. The main thread makes no MPI call between begin_step()
// and wait() (the trainer's forward and backward make none without ZeRO-2 / FSDP, which the
// config refuses with overlap), so MPI needs MPI_THREAD_SERIALIZED only.
//
// SUBDP_OVERLAP_LOCKSTEP=1 (tests): each block hook waits until the thread has sent every
// chunk the block made startable, a fixed interleaving in which a chunk sent before its
// gradients are final reads them unfinished (with real timing such a bug can go unseen).
#pragma once
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/parallel/buckets.h"

namespace subdp {

class OverlappedAllReduce {
 public:
  /// blocks: the model's residual blocks. Cuts every bucket this rank reduces into the chunks
  /// HolderAllReduce would send and orders them; starts the communication thread.
  OverlappedAllReduce(BucketSet& set, int blocks);
  /// Stops and joins the thread.
  ~OverlappedAllReduce();
  OverlappedAllReduce(const OverlappedAllReduce&) = delete;
  OverlappedAllReduce& operator=(const OverlappedAllReduce&) = delete;

  /// Chunks that can go out before the backward pass ends (0: nothing overlaps; a smaller
  /// parallel.bucket_mb cuts the blocks' gradients into chunks of their own).
  int early_chunks() const;
  /// Chunks in all.
  int chunks() const { return static_cast<int>(chunks_.size()); }
  /// Before a step's forward pass: the next backward pass's block hooks start chunks.
  void begin_step();
  /// After block b's backward (the model's hook): chunks whose gradients are final may go.
  void block_done(int b);
  /// After the backward pass: waits until the thread has sent every chunk that could start,
  /// then stops taking hooks (a later backward, e.g. the alignment probe's, starts nothing).
  /// Rethrows the thread's error.
  void wait();
  /// The remaining chunks, on the calling thread, in order; false (nothing done) when no step
  /// is in flight since begin_step().
  bool finish();

 private:
  struct Chunk {
    size_t bucket;
    std::vector<BucketRun> pieces;
    int64_t filled;
    int ready;  // lowest block of its pieces (final after that block's backward); -1: after the pass
  };
  /// True when chunk i may go out now (mutex_ held).
  bool startable(size_t i) const;
  void send(const Chunk& c);
  void loop();
  BucketSet& set_;
  int blocks_;
  std::vector<Chunk> chunks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  size_t next_ = 0;   // the next chunk to send
  int finished_ = 0;  // the lowest block whose backward has finished in this step (blocks_: none)
  bool armed_ = false, in_flight_ = false, stop_ = false;
  bool lockstep_ = false;  // SUBDP_OVERLAP_LOCKSTEP
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace subdp
