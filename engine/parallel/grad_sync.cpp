// Holder-group buckets and their all-reduces.
#include "engine/parallel/grad_sync.h"

#include <algorithm>
#include <map>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/memory.h"

namespace subdp {

std::vector<int> Layout::ranks_of(const std::vector<int>& subnets) const {
  std::vector<int> out;
  for (int w = 0; w < world; ++w)
    if (std::find(subnets.begin(), subnets.end(), w % S) != subnets.end()) out.push_back(w);
  return out;
}

ParamLayout param_layout_of(Sharding sharding) {
  return sharding == Sharding::gradients    ? ParamLayout::shared_block_grads
         : sharding == Sharding::parameters ? ParamLayout::shared_block_params
                                            : ParamLayout::per_param;
}

GradientSync::GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan,
                           std::vector<Param*> params, double bucket_mb, Sharding sharding, int blocks)
    : world_(world), layout_(layout), plan_(plan), params_(std::move(params)), sharding_(sharding),
      simulated_(world.kind() == CommKind::simulated) {
  if (shards_blocks()) blocks_ = blocks;
  for (const Param* p : params_) SUBDP_ASSERT(p->block < blocks_ || !shards_blocks());
  next_block_ = blocks_ - 1;
  std::vector<int> everyone(layout.world);
  for (int w = 0; w < layout.world; ++w) everyone[w] = w;
  std::vector<Bucket> per_group{{-1, -1, everyone, &world_, {}, 0}};
  // One communicator per distinct holder group, created in group order on every rank.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    Bucket b;
    b.group = static_cast<int>(g);
    b.ranks = layout.ranks_of(plan.groups[g]);
    if (static_cast<int>(plan.groups[g].size()) == plan.S) {
      b.comm = nullptr;  // a group of every subnetwork is the world: its runs go to bucket 0
    } else {
      group_comms_.push_back(world_.subgroup(b.ranks));
      b.comm = group_comms_.back().get();
    }
    per_group.push_back(b);
  }
  // The same groups once per phase (ZeRO-2: each block, descending; then the rest).
  for (int phase = blocks_ - 1; phase >= -1; --phase)
    for (Bucket b : per_group) {
      b.phase = phase;
      buckets_.push_back(b);
    }
  for (Param* p : params_) add_param(*p);
  int64_t largest = 0;
  for (auto& b : buckets_) largest = std::max(largest, b.elems);
  // Clamped before the cast: a huge bucket_mb means "one message per bucket", not overflow.
  const double elems = std::min(bucket_mb * (1 << 20) / sizeof(float), 1e15);
  bucket_elems_ = std::max<int64_t>(1, static_cast<int64_t>(elems));
  // Sharded: a chunk of fewer floats than holders would give its every float to the last
  // holder (segments floor(n*i/k)), piling the state of a tiny bucket_mb on one rank.
  if (sharded()) bucket_elems_ = std::max<int64_t>(bucket_elems_, layout.world);
  if (owner_broadcasts()) {
    // Every rank holds every value under backward masking, so the groups' sizes, and with
    // them the broadcast chunks, agree across ranks.
    int64_t most = 0;
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      value_runs_.push_back(unit_value_runs(static_cast<int>(g)));
      if (static_cast<int>(plan.groups[g].size()) == plan.S) continue;  // held by everyone: no broadcast
      int64_t n = 0;
      for (auto& r : value_runs_.back()) n += r.len;
      most = std::max(most, n);
    }
    broadcast_chunk_ = std::min(most, bucket_elems_);
  }
  // ZeRO-2 and FSDP on one rank still move each block through the buffer, into its shard.
  if (layout.world > 1 || shards_blocks())
    comm_buffer_ = Tensor::empty({std::max(std::min(largest, bucket_elems_), broadcast_chunk_)}, MemCategory::comm);
  if (sharded()) collect_shard_pieces();
}

size_t GradientSync::bucket_index(int phase, int group) const {
  const size_t slot = phase < 0 ? blocks_ : blocks_ - 1 - phase;
  return slot * (plan_.groups.size() + 1) + static_cast<size_t>(group + 1);
}

int64_t GradientSync::chunk_cap(const Bucket&) const {
  // Chunks agree across the holders, whose buffers may differ in size: every buffer holds
  // at least min(its largest bucket, bucket_elems_) and at most bucket_elems_ floats, so a
  // bucket of at most bucket_elems_ goes out whole everywhere and a larger one is cut at
  // bucket_elems_ everywhere.
  return comm_buffer_.defined() ? std::min(comm_buffer_.numel(), bucket_elems_) : bucket_elems_;
}

std::pair<int64_t, int64_t> GradientSync::my_segment(const Bucket& b, int64_t filled) const {
  const int64_t k = static_cast<int64_t>(b.ranks.size());
  const int64_t i = std::find(b.ranks.begin(), b.ranks.end(), layout_.rank) - b.ranks.begin();
  return {filled * i / k, filled * (i + 1) / k};
}

template <class Fn>
void GradientSync::for_each_in_segment(const Bucket& b, const std::vector<BucketRun>& pieces, int64_t filled,
                                       Fn&& fn) const {
  const auto [lo, hi] = my_segment(b, filled);
  int64_t at = 0;
  for (const BucketRun& r : pieces) {
    SUBDP_ASSERT(r.rows == 1);  // sharded buckets hold contiguous runs
    const int64_t from = std::max(lo, at) - at, to = std::min(hi, at + r.len) - at;
    if (from < to) fn(r, from, to, at);
    at += r.len;
  }
}

void GradientSync::pack(const std::vector<BucketRun>& pieces, float* buf, bool values) {
  for (const BucketRun& r : pieces) {
    const float* from = values ? r.value : r.data;
    if (r.rows == 1)
      backend().copy(from, buf, r.len);
    else
      backend().scale_copy_rows(from, values ? r.value_ld : r.data_ld, 1.f, buf, r.width(), r.rows, r.width());
    buf += r.len;
  }
}

void GradientSync::append_slice(const BucketRun& r, int64_t off, int64_t n, std::vector<BucketRun>& out) {
  const int64_t w = r.width();
  while (n > 0) {
    const int64_t row = r.rows == 1 ? 0 : off / w, col = off - row * w;
    float* data = r.data + row * r.data_ld + col;
    float* value = r.value ? r.value + row * r.value_ld + col : nullptr;
    // Whole rows of a strided run stay one strided run; a cut row (or a contiguous run) is contiguous.
    const int64_t rows = r.rows > 1 && col == 0 ? n / w : 0;
    if (rows > 1) {
      out.push_back({data, rows * w, value, r.param, rows, r.data_ld, r.value_ld});
    } else {
      const int64_t take = std::min(n, r.rows == 1 ? n : w - col);
      out.push_back({data, take, value, r.param});
    }
    off += out.back().len;
    n -= out.back().len;
  }
}

void GradientSync::collect_shard_pieces() {
  // The same chunks and segments as reduce_scatter_bucket: this rank's part of every bucket
  // it holds, as pieces of parameters (trainable ones; buffers are averaged, not updated).
  for (auto& b : buckets_) {
    if (!reduces(b)) continue;
    b.first_piece = shard_pieces_.size();
    for_each_chunk(b.runs, chunk_cap(b), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
      for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t) {
        if (r.param && r.param->trainable)
          shard_pieces_.push_back({r.param, r.data + from - r.param->grad.f32(), r.value + from - r.param->value.f32(),
                                   to - from, r.data + from, r.value + from});
      });
    });
  }
  // ZeRO-1, and ZeRO-2 outside blocks (gradients held for the whole step): averaged in place.
  // ZeRO-2 inside blocks: into the shard-gradient tensor, as the next block reuses the buffer.
  auto in_block = [&](const ShardPiece& piece) { return shards_blocks() && piece.param->block >= 0; };
  int64_t n = 0;
  for (const ShardPiece& piece : shard_pieces_) n += in_block(piece) ? piece.len : 0;
  if (n > 0) shard_grads_ = Tensor::zeros({n}, MemCategory::grads);
  n = 0;
  for (ShardPiece& piece : shard_pieces_) {
    if (!in_block(piece)) continue;
    piece.grad = shard_grads_.f32() + n;
    n += piece.len;
  }
  if (sharding_ == Sharding::parameters) collect_shard_values();
}

void GradientSync::collect_shard_values() {
  // FSDP: each block parameter's shard of its value, its pieces one after another (the
  // layout of sharded optimizer state), is the only copy kept between steps.
  // Every trained block parameter gets one, empty where this rank's segments miss it: its
  // value is then nowhere else on this rank.
  std::map<Param*, int64_t> len;
  for (Param* p : params_)
    if (p->trainable && p->grad.defined() && p->block >= 0) len[p] = 0;
  for (const ShardPiece& piece : shard_pieces_)
    if (piece.param->block >= 0) len[piece.param] += piece.len;
  for (auto& [p, n] : len) {
    p->shard_value = Tensor::empty({n}, MemCategory::params);
    p->shard_runs.clear();
  }
  for (ShardPiece& piece : shard_pieces_) {
    Param& p = *piece.param;
    if (p.block < 0) continue;
    const int64_t at = p.shard_runs.empty() ? 0 : p.shard_runs.back().state_off + p.shard_runs.back().len;
    p.shard_runs.push_back({piece.value_off, piece.grad_off, at, piece.len});
    piece.value = p.shard_value.f32() + at;
  }
}

void GradientSync::initialise_shard_values(uint64_t seed) {
  if (MemoryTracker::global().dry_run()) return;
  for (Param* p : params_) {
    if (!p->shard_value.defined()) continue;
    HostCopy host(p->shard_value, /*load=*/false);
    for (const StateRun& r : p->shard_runs)
      for (int64_t t = 0; t < r.len; ++t)
        host.f32()[r.state_off + t] = init_value(seed, p->name, full_offset_of_grad(*p, r.grad_off + t), p->init);
    host.store();
  }
}

int GradientSync::group_of(const Param& p, int pos) const {
  int g = -1;
  if (p.unit.layer >= 0 && pos >= 0 && plan_.granularity == Granularity::neuron && plan_.masked())
    g = plan_.unit_group.at(p.unit.layer).at(p.mask->order.at(pos));
  else if (p.block >= 0 && plan_.granularity == Granularity::block && plan_.masked())
    g = plan_.block_group.at(p.block);
  if (g >= 0 && static_cast<int>(plan_.groups[g].size()) == plan_.S) g = -1;
  return g;
}

void GradientSync::add_run(Param& p, const BucketRun& run, int pos) {
  // ZeRO-2: a block's gradients in its own phase; running statistics after the backward.
  const int phase = shards_blocks() && p.trainable ? p.block : -1;
  Bucket& b = buckets_[bucket_index(phase, group_of(p, pos))];
  SUBDP_ASSERT(b.comm != nullptr || b.group >= 0);
  BucketRun* last = b.runs.empty() ? nullptr : &b.runs.back();
  // Strided runs never merge: the order of a merged pair's floats would depend on this
  // rank's unit positions, which differ between the holders.
  if (last && last->param == &p && last->rows == 1 && run.rows == 1 && last->data + last->len == run.data &&
      last->value + last->len == run.value)
    last->len += run.len;
  else
    b.runs.push_back(run);
  b.elems += run.len;
}

void GradientSync::add_param(Param& p) {
  // Trainable: the held gradient runs. Buffers: the same runs, over values.
  if (p.trainable) {
    if (!p.grad.defined()) return;
    float* g = p.grad.f32();
    float* v = p.value.f32();
    const int64_t outer = p.outer(), inner = p.inner(), us = p.unit.unit_size;
    // Contiguous runs where a whole parameter shares one group (DP, block level: they merge
    // into one) or units are whole rows.
    const bool units_in_rows = p.unit.layer >= 0 && outer > 1 && plan_.granularity == Granularity::neuron && plan_.masked();
    if (!units_in_rows || sharded()) {
      for_each_grad_run(p, [&](int64_t vo, int64_t go, int64_t len, int pos) { add_run(p, {g + go, len, v + vo, &p}, pos); });
      return;
    }
    // Unsharded, units inside rows: each kept unit's slice across the rows is one strided run
    // (unit by unit, in the order of their positions, which all holders share).
    const int64_t gld = p.grad_extent() * inner, vld = p.value_extent() * inner;
    for (int64_t a = 0; a < p.grad_extent(); a += us)
      add_run(p, {g + a * inner, outer * us * inner, v + a * inner, &p, outer, gld, vld}, static_cast<int>(a / us));
    return;
  }
  // Buffer held where its block is kept; unit-sliced buffers over the kept prefix.
  if (p.block >= 0 && plan_.granularity == Granularity::block && !plan_.keeps_block(layout_.subnet(), p.block)) return;
  float* v = p.value.f32();
  if (p.unit.layer < 0) {
    add_run(p, {v, p.value.numel(), v, &p}, -1);
    return;
  }
  const int64_t outer = p.outer(), inner = p.inner(), ext = p.value_extent(), us = p.unit.unit_size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < static_cast<int64_t>(p.mask->kept) * us; a += us) {
      float* at = v + (o * ext + a) * inner;
      add_run(p, {at, us * inner, at, &p}, static_cast<int>(a / us));
    }
}

template <class Fn>
void GradientSync::for_each_chunk(const std::vector<BucketRun>& runs, int64_t cap, Fn&& fn) {
  size_t run = 0;
  int64_t run_off = 0;
  std::vector<BucketRun> pieces;
  cap = std::max<int64_t>(cap, 1);  // a zero cap would never consume a run
  while (run < runs.size()) {
    pieces.clear();
    int64_t filled = 0;
    while (run < runs.size() && filled < cap) {
      const BucketRun& r = runs[run];
      const int64_t take = std::min(cap - filled, r.len - run_off);
      append_slice(r, run_off, take, pieces);
      filled += take;
      run_off += take;
      if (run_off == r.len) {
        ++run;
        run_off = 0;
      }
    }
    if (filled > 0) fn(pieces, filled);  // empty runs only: every participant has the same ones
  }
}

template <class Collective>
void GradientSync::through_buffer(const std::vector<BucketRun>& runs, int64_t cap, float scale, Collective collective) {
  float* buf = comm_buffer_.f32();
  for_each_chunk(runs, cap, [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    // Pack the chunk, run the collective on it, unpack times `scale`.
    pack(pieces, buf);
    collective(buf, filled);
    int64_t at = 0;
    for (const BucketRun& r : pieces) {
      if (r.rows == 1)
        backend().scale_copy(buf + at, scale, r.data, r.len);
      else
        backend().scale_copy_rows(buf + at, r.width(), scale, r.data, r.data_ld, r.rows, r.width());
      at += r.len;
    }
  });
}

/// Segment counts of a chunk of `filled` floats over k holders (as my_segment cuts it).
static std::vector<int64_t> segment_counts(int64_t filled, int64_t k) {
  std::vector<int64_t> counts(k);
  for (int64_t i = 0; i < k; ++i) counts[i] = filled * (i + 1) / k - filled * i / k;
  return counts;
}

void GradientSync::reduce_scatter_bucket(Bucket& b) {
  Communicator* comm = b.group < 0 ? &world_ : b.comm;
  float* buf = comm_buffer_.f32();
  const float scale = 1.f / static_cast<float>(b.ranks.size());
  // This bucket's shard pieces, in collect_shard_pieces' order: where each averaged segment goes.
  auto piece = shard_pieces_.begin() + static_cast<std::ptrdiff_t>(b.first_piece);
  for_each_chunk(b.runs, chunk_cap(b), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    pack(pieces, buf);
    comm->reduce_scatter_sum(buf, segment_counts(filled, static_cast<int64_t>(b.ranks.size())));
    // Half an all-reduce's payload (2 bytes a float, exact): with one all-gather, the
    // all-reduce's; with FSDP's two, 1.5x.
    if (layout_.world > 1) bytes_ += filled * static_cast<int64_t>(sizeof(float)) / 2;
    // Only this rank's segment is averaged: gradients into their shard pieces, running
    // statistics back into their values.
    for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t at) {
      const bool gradient = r.param && r.param->trainable;
      SUBDP_ASSERT(!gradient || (piece != shard_pieces_.end() && piece->len == to - from));
      backend().scale_copy(buf + at + from, scale, gradient ? (piece++)->grad : r.data + from, to - from);
    });
  });
}

void GradientSync::gather_bucket_values(Bucket& b) {
  Communicator* comm = b.group < 0 ? &world_ : b.comm;
  float* buf = comm_buffer_.f32();
  auto piece = shard_pieces_.begin() + static_cast<std::ptrdiff_t>(b.first_piece);
  for_each_chunk(b.runs, chunk_cap(b), [&](const std::vector<BucketRun>& pieces, int64_t filled) {
    // --simulate-rank: the other ranks' segments never arrive; they keep the values in hand
    // (not the buffer's stale contents, which may be anything, non-finite included).
    if (simulated_) pack(pieces, buf, /*values=*/true);
    // This rank's updated values (its shard pieces; running statistics: in place) into its
    // segment; every segment back into the values (FSDP: the buffer the blocks share).
    for_each_in_segment(b, pieces, filled, [&](const BucketRun& r, int64_t from, int64_t to, int64_t at) {
      const bool trained = r.param && r.param->trainable;
      backend().copy(trained ? (piece++)->value : r.value + from, buf + at + from, to - from);
    });
    comm->allgather_segments(buf, segment_counts(filled, static_cast<int64_t>(b.ranks.size())));
    if (layout_.world > 1) bytes_ += filled * static_cast<int64_t>(sizeof(float)) / 2;  // as the reduce-scatter
    int64_t at = 0;
    for (const BucketRun& r : pieces) {
      backend().copy(buf + at, r.value, r.len);
      at += r.len;
    }
  });
}

void GradientSync::gather_block(int block) {
  if (sharding_ != Sharding::parameters) return;
  for (size_t i = bucket_index(block, -1); i < bucket_index(block - 1, -1); ++i)
    if (reduces(buckets_[i])) gather_bucket_values(buckets_[i]);
}

void GradientSync::gather_values() {
  if (!sharded() || layout_.world == 1) return;
  // FSDP: the blocks' values stay in their shards until gather_block.
  const size_t first = sharding_ == Sharding::parameters ? bucket_index(-1, -1) : 0;
  for (size_t i = first; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    if (!reduces(b)) continue;
    gather_bucket_values(b);
  }
}

void GradientSync::reduce_bucket(Bucket& b) {
  if (!reduces(b)) return;
  if (sharded()) return reduce_scatter_bucket(b);
  Communicator* comm = b.group < 0 ? &world_ : b.comm;
  through_buffer(b.runs, chunk_cap(b), 1.f / static_cast<float>(b.ranks.size()), [&](float* buf, int64_t n) {
    comm->allreduce_sum(buf, n);
    bytes_ += n * static_cast<int64_t>(sizeof(float));
  });
}

void GradientSync::average() {
  SUBDP_ASSERT(next_block_ == -1);  // ZeRO-2: every block was reduced in this backward pass
  if (layout_.world == 1 && !shards_blocks()) return;
  // Fixed global order: world, then groups by id (ZeRO-2: the phase after the blocks').
  for (size_t i = bucket_index(-1, -1); i < buckets_.size(); ++i) reduce_bucket(buckets_[i]);
}

void GradientSync::reduce_block(int block) {
  if (!shards_blocks()) return;
  if (block == blocks_ - 1) next_block_ = block;  // a new backward pass
  SUBDP_CHECK(block == next_block_, "internal error: ZeRO-2 expected block {}'s gradients, got block {}'s",
              next_block_, block);
  --next_block_;
  for (size_t i = bucket_index(block, -1); i < bucket_index(block - 1, -1); ++i) reduce_bucket(buckets_[i]);
}

int64_t GradientSync::elements_per_step() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if ((b.group < 0 || b.comm) && layout_.world > 1) n += b.elems;
  return n;
}

int GradientSync::owner_of_group(int group) const {
  return group < 0 ? 0 : buckets_.at(bucket_index(-1, group)).ranks.front();
}

std::vector<BucketRun> GradientSync::unit_value_runs(int g) const {
  // The group's unit values in canonical (global unit) order, on every rank.
  std::vector<BucketRun> runs;
  for (Param* p : params_) {
    float* v = p->value.f32();
    if (plan_.granularity == Granularity::block) {
      if (p->block >= 0 && plan_.block_group.at(p->block) == g) runs.push_back({v, p->value.numel()});
      continue;
    }
    if (p->unit.layer < 0) continue;
    const LayerMask& m = *p->mask;
    std::vector<int> pos_of(m.units());
    for (int i = 0; i < m.units(); ++i) pos_of[m.order[i]] = i;
    const int64_t outer = p->outer(), inner = p->inner(), ext = p->value_extent(), us = p->unit.unit_size;
    // One run per unit, its rows ext * inner floats apart (canonical order: unit, then row).
    for (int u = 0; u < m.units(); ++u) {
      if (plan_.unit_group[p->unit.layer][u] != g) continue;
      runs.push_back({v + pos_of[u] * us * inner, outer * us * inner, nullptr, nullptr, outer, ext * inner, 0});
    }
  }
  return runs;
}

bool GradientSync::owner_broadcasts() const {
  return plan_.regime == Regime::backward && layout_.world > 1;
}

void GradientSync::broadcast_unit_values() {
  if (!owner_broadcasts()) return;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (static_cast<int>(plan_.groups[g].size()) == plan_.S) continue;
    const int owner = owner_of_group(static_cast<int>(g));
    // Scale 1: the non-owners receive the owner's bits.
    through_buffer(value_runs_[g], broadcast_chunk_, 1.f, [&](float* buf, int64_t n) {
      world_.broadcast(buf, n * static_cast<int64_t>(sizeof(float)), owner);
      broadcast_bytes_ += n * static_cast<int64_t>(sizeof(float));
    });
  }
}

}  // namespace subdp
