// Holder all-reduces overlapped with the backward pass (parallel.overlap): the chunks that
// HolderAllReduce sends after the backward pass, cut the same way (the same pieces and
// counts, so the same sums bit for bit), started instead as soon as every block whose
// gradients a chunk holds has finished its backward (PyTorch DDP's gradient-ready buckets;
// Li et al. 2020, "PyTorch Distributed", section 3.2.3). A chunk with parameters outside the
// blocks (embeddings, head, norms) or running statistics waits for the end of the backward
// pass and goes out blocking, through the bucket set's buffer.
//
// Order: every rank starts its chunks sorted by (ready block descending, bucket, chunk), a
// total order on which the holders of any two communicators agree (a chunk's ready block is
// a property of the units it holds, the same on every holder), so collectives on several
// communicators cannot cross.
//
// Two ways to start a chunk early:
// - ThreadedOverlap (the CPU backend over MPI): a communication thread packs, all-reduces and
//   unpacks each chunk. The main thread makes no MPI call between begin_step() and wait()
//   (the trainer's forward and backward make none without ZeRO-2 / FSDP, which the config
//   refuses with overlap), so MPI needs MPI_THREAD_SERIALIZED only.
// - StreamOverlap (a CUDA device): no thread. The block hook packs each chunk, on the compute
//   stream, into a buffer of its own and issues a deferred all-reduce
//   (Communicator::allreduce_sum_deferred: on NCCL, queued on the communicator's stream after
//   the pack, the backward pass's later kernels not waiting for it). wait() joins the
//   communicators and unpacks every chunk, on the compute stream after the joins; no host
//   wait. The buffers cost the early chunks' floats (category comm, which the planner counts).
#pragma once
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/parallel/buckets.h"

namespace subdp {

/// parallel.overlap as run: off, a communication thread (CPU backend) or deferred collectives
/// ordered by the streams (CUDA).
enum class OverlapMode { off, thread, streams };

class OverlappedAllReduce {
 public:
  /// blocks: the model's residual blocks. mode: thread (ThreadedOverlap) or streams
  /// (StreamOverlap); not off.
  static std::unique_ptr<OverlappedAllReduce> make(BucketSet& set, int blocks, OverlapMode mode);
  virtual ~OverlappedAllReduce() = default;
  OverlappedAllReduce(const OverlappedAllReduce&) = delete;
  OverlappedAllReduce& operator=(const OverlappedAllReduce&) = delete;

  /// Chunks that can go out before the backward pass ends (0: nothing overlaps; a smaller
  /// parallel.bucket_mb cuts the blocks' gradients into chunks of their own).
  int early_chunks() const;
  /// Chunks in all.
  int chunks() const { return static_cast<int>(chunks_.size()); }
  /// Before a step's forward pass: the next backward pass's block hooks start chunks.
  virtual void begin_step() = 0;
  /// After block b's backward (the model's hook): chunks whose gradients are final may go.
  virtual void block_done(int b) = 0;
  /// After the backward pass: every chunk that could start has been all-reduced and unpacked
  /// (in stream order on a device); later hooks (e.g. the alignment probe's backward) start
  /// nothing. Rethrows the communication thread's error.
  virtual void wait() = 0;
  /// The remaining chunks, blocking, on the calling thread, in order; false (nothing done)
  /// when no step is in flight since begin_step().
  bool finish();

 protected:
  /// Cuts every bucket this rank reduces into the chunks HolderAllReduce would send and
  /// orders them.
  OverlappedAllReduce(BucketSet& set, int blocks);
  struct Chunk {
    size_t bucket;
    std::vector<BucketRun> pieces;
    int64_t filled;
    int ready;  // lowest block of its pieces (final after that block's backward); -1: after the pass
  };
  /// True when chunk i may start once the blocks from `finished` down have done their backward.
  bool ready_after(size_t i, int finished) const {
    return i < chunks_.size() && chunks_[i].ready >= 0 && chunks_[i].ready >= finished;
  }
  /// Packs chunk c into the bucket set's buffer, all-reduces and unpacks it (blocking).
  void send(const Chunk& c);
  /// Unpacks chunk c's sums from buf (divided by its holders) and counts its bytes.
  void unpack(const Chunk& c, const float* buf);

  BucketSet& set_;
  int blocks_;
  std::vector<Chunk> chunks_;
  size_t next_ = 0;  // the next chunk to start
  bool in_flight_ = false;
};

/// The CPU backend's overlap: a communication thread sends the chunks (see the file comment).
/// SUBDP_OVERLAP_LOCKSTEP=1 (tests): each block hook waits until the thread has sent every
/// chunk the block made startable, a fixed interleaving in which a chunk sent before its
/// gradients are final reads them unfinished (with real timing such a bug can go unseen).
class ThreadedOverlap final : public OverlappedAllReduce {
 public:
  /// Starts the communication thread.
  ThreadedOverlap(BucketSet& set, int blocks);
  /// Stops and joins the thread.
  ~ThreadedOverlap() override;
  void begin_step() override;
  void block_done(int b) override;
  void wait() override;

 private:
  /// True when chunk i may go out now (mutex_ held).
  bool startable(size_t i) const;
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  int finished_ = 0;  // the lowest block whose backward has finished in this step (blocks_: none)
  bool armed_ = false, stop_ = false;
  bool lockstep_ = false;  // SUBDP_OVERLAP_LOCKSTEP
  std::exception_ptr error_;
  std::thread thread_;
};

/// A CUDA device's overlap: deferred collectives ordered by the streams (see the file comment).
class StreamOverlap final : public OverlappedAllReduce {
 public:
  /// Allocates one buffer slice per early chunk (category comm).
  StreamOverlap(BucketSet& set, int blocks);
  void begin_step() override;
  void block_done(int b) override;
  void wait() override;

 private:
  Tensor buffers_;                   // the early chunks' buffers, one after another
  std::vector<int64_t> offset_;      // chunk i's buffer: buffers_ + offset_[i] (early chunks)
  std::vector<Communicator*> used_;  // communicators with deferred collectives this step
  int finished_ = 0;
  bool armed_ = false;
};

}  // namespace subdp
