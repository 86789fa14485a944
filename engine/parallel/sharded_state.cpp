// ZeRO-1 / ZeRO-2: shard pieces, reduce-scatter, value all-gather.
#include "engine/parallel/sharded_state.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

ShardedState::ShardedState(BucketSet& set, bool simulated) : set_(set), simulated_(simulated) {
  // The same chunks and segments as reduce_scatter: this rank's part of every bucket it
  // holds, as pieces of parameters (trainable ones; buffers are averaged, not updated).
  for (auto& b : set_.buckets()) {
    if (!set_.reduces(b)) continue;
    b.first_piece = pieces_.size();
    BucketSet::for_each_chunk(b.runs, set_.chunk_cap(), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
      set_.for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t) {
        if (r.param && r.param->trainable)
          pieces_.push_back({r.param, r.data + from - r.param->grad.f32(), r.value + from - r.param->value.f32(),
                             to - from, r.data + from, r.value + from});
      });
    });
  }
  // ZeRO-1, and ZeRO-2 outside blocks (gradients held for the whole step): averaged in place.
  // ZeRO-2 inside blocks: into the shard-gradient tensor, as the next block reuses the buffer.
  auto in_block = [&](const ShardPiece& piece) { return set_.blocks() > 0 && piece.param->block >= 0; };
  int64_t n = 0;
  for (const ShardPiece& piece : pieces_) n += in_block(piece) ? piece.len : 0;
  if (n > 0) shard_grads_ = Tensor::zeros({n}, MemCategory::grads);
  n = 0;
  for (ShardPiece& piece : pieces_) {
    if (!in_block(piece)) continue;
    piece.grad = shard_grads_.f32() + n;
    n += piece.len;
  }
}

void ShardedState::reduce_scatter(Bucket& b) {
  Communicator& comm = set_.comm_of(b);
  float* buf = set_.buffer();
  const float scale = 1.f / static_cast<float>(b.ranks.size());
  // This bucket's shard pieces, in the constructor's order: where each averaged segment goes.
  auto piece = pieces_.begin() + static_cast<std::ptrdiff_t>(b.first_piece);
  BucketSet::for_each_chunk(b.runs, set_.chunk_cap(), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    BucketSet::pack(pieces, buf);
    comm.reduce_scatter_sum(buf, BucketSet::segment_counts(filled, static_cast<int64_t>(b.ranks.size())));
    // Half an all-reduce's payload (2 bytes a float, exact): with one all-gather, the
    // all-reduce's; with FSDP's two, 1.5x.
    if (set_.layout().world > 1) set_.count_bytes(filled * static_cast<int64_t>(sizeof(float)) / 2);
    // Only this rank's segment is averaged: gradients into their shard pieces, running
    // statistics back into their values.
    set_.for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t at) {
      const bool gradient = r.param && r.param->trainable;
      SUBDP_ASSERT(!gradient || (piece != pieces_.end() && piece->len == to - from));
      backend().scale_copy(buf + at + from, scale, gradient ? (piece++)->grad : r.data + from, to - from);
    });
  });
}

void ShardedState::gather_values(Bucket& b) {
  Communicator& comm = set_.comm_of(b);
  float* buf = set_.buffer();
  auto piece = pieces_.begin() + static_cast<std::ptrdiff_t>(b.first_piece);
  BucketSet::for_each_chunk(b.runs, set_.chunk_cap(), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    // --simulate-rank: the other ranks' segments never arrive; they keep the values in hand
    // (not the buffer's stale contents, which may be anything, non-finite included).
    if (simulated_) BucketSet::pack(pieces, buf, /*values=*/true);
    // This rank's updated values (its shard pieces; running statistics: in place) into its
    // segment; every segment back into the values (FSDP: the buffer the blocks share).
    set_.for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t at) {
      const bool trained = r.param && r.param->trainable;
      backend().copy(trained ? (piece++)->value : r.value + from, buf + at + from, to - from);
    });
    comm.allgather_segments(buf, BucketSet::segment_counts(filled, static_cast<int64_t>(b.ranks.size())));
    if (set_.layout().world > 1)
      set_.count_bytes(filled * static_cast<int64_t>(sizeof(float)) / 2);  // as the reduce-scatter
    int64_t at = 0;
    for (const BucketRun& r : pieces) {
      backend().copy(buf + at, r.value, r.len);
      at += r.len;
    }
  });
}

}  // namespace subdp
