// The bucket core: holder-group communicators, buckets per (phase, group), chunking.
#include "engine/parallel/buckets.h"

#include <algorithm>

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

BucketSet::BucketSet(Communicator& world, const Layout& layout, const SubnetworkPlan& plan, std::vector<Param*> params,
                     double bucket_mb, bool contiguous, int blocks)
    : world_(world),
      layout_(layout),
      plan_(plan),
      params_(std::move(params)),
      blocks_(blocks),
      contiguous_(contiguous) {
  for (const Param* p : params_) SUBDP_ASSERT(p->block < blocks_ || blocks_ == 0);
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
  // Clamped before the cast: a huge bucket_mb means "one message per bucket", not overflow.
  const double elems = std::min(bucket_mb * (1 << 20) / sizeof(float), 1e15);
  bucket_elems_ = std::max<int64_t>(1, static_cast<int64_t>(elems));
  // Sharded: a chunk of fewer floats than holders would give its every float to the last
  // holder (segments floor(n*i/k)), piling the state of a tiny bucket_mb on one rank.
  if (contiguous_) bucket_elems_ = std::max<int64_t>(bucket_elems_, layout.world);
}

void BucketSet::allocate_buffer(int64_t at_least, bool single_rank_too) {
  int64_t largest = 0;
  for (auto& b : buckets_) largest = std::max(largest, b.elems);
  if (layout_.world > 1 || single_rank_too)
    buffer_ = Tensor::empty({std::max(std::min(largest, bucket_elems_), at_least)}, MemCategory::comm);
}

size_t BucketSet::bucket_index(int phase, int group) const {
  const size_t slot = phase < 0 ? blocks_ : blocks_ - 1 - phase;
  return slot * (plan_.groups.size() + 1) + static_cast<size_t>(group + 1);
}

int64_t BucketSet::chunk_cap() const {
  // Chunks agree across the holders, whose buffers may differ in size: every buffer holds
  // at least min(its largest bucket, bucket_elems_) and at most bucket_elems_ floats, so a
  // bucket of at most bucket_elems_ goes out whole everywhere and a larger one is cut at
  // bucket_elems_ everywhere.
  return buffer_.defined() ? std::min(buffer_.numel(), bucket_elems_) : bucket_elems_;
}

std::pair<int64_t, int64_t> BucketSet::my_segment(const Bucket& b, int64_t filled) const {
  const int64_t k = static_cast<int64_t>(b.ranks.size());
  const int64_t i = std::find(b.ranks.begin(), b.ranks.end(), layout_.rank) - b.ranks.begin();
  return {filled * i / k, filled * (i + 1) / k};
}

std::vector<int64_t> BucketSet::segment_counts(int64_t filled, int64_t k) {
  std::vector<int64_t> counts(k);
  for (int64_t i = 0; i < k; ++i) counts[i] = filled * (i + 1) / k - filled * i / k;
  return counts;
}

void BucketSet::pack(const std::vector<BucketRun>& pieces, float* buf, bool values) {
  for (const BucketRun& r : pieces) {
    const float* from = values ? r.value : r.data;
    if (r.rows == 1)
      backend().copy(from, buf, r.len);
    else
      backend().scale_copy_rows(from, values ? r.value_ld : r.data_ld, 1.f, buf, r.width(), r.rows, r.width());
    buf += r.len;
  }
}

void BucketSet::unpack(const std::vector<BucketRun>& pieces, const float* buf, float scale) {
  for (const BucketRun& r : pieces) {
    if (r.rows == 1)
      backend().scale_copy(buf, scale, r.data, r.len);
    else
      backend().scale_copy_rows(buf, r.width(), scale, r.data, r.data_ld, r.rows, r.width());
    buf += r.len;
  }
}

void BucketSet::append_slice(const BucketRun& r, int64_t off, int64_t n, std::vector<BucketRun>& out) {
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

int BucketSet::group_of(const Param& p, int pos) const {
  int g = -1;
  if (p.unit.layer >= 0 && pos >= 0 && plan_.granularity == Granularity::neuron && plan_.masked())
    g = plan_.unit_group.at(p.unit.layer).at(p.mask->order.at(pos));
  else if (p.block >= 0 && plan_.granularity == Granularity::block && plan_.masked())
    g = plan_.block_group.at(p.block);
  if (g >= 0 && static_cast<int>(plan_.groups[g].size()) == plan_.S) g = -1;
  return g;
}

int BucketSet::owner_of_group(int group) const {
  return group < 0 ? 0 : buckets_.at(bucket_index(-1, group)).ranks.front();
}

void BucketSet::add_run(Param& p, const BucketRun& run, int pos) {
  // ZeRO-2: a block's gradients in its own phase; running statistics after the backward.
  const int phase = blocks_ > 0 && p.trainable ? p.block : -1;
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

void BucketSet::add_param(Param& p) {
  // Trainable: the held gradient runs. Buffers: the same runs, over values.
  if (p.trainable) {
    if (!p.grad.defined()) return;
    float* g = p.grad.f32();
    float* v = p.value.f32();
    const int64_t outer = p.outer(), inner = p.inner(), us = p.unit.unit_size;
    // Contiguous runs where a whole parameter shares one group (DP, block level: they merge
    // into one) or units are whole rows.
    const bool units_in_rows =
        p.unit.layer >= 0 && outer > 1 && plan_.granularity == Granularity::neuron && plan_.masked();
    if (p.unit.layer < 0 || plan_.granularity != Granularity::neuron || !plan_.masked()) {
      // One group for the whole parameter (group_of does not read the position): its spans,
      // which are the unit runs below merged, without a call per unit and row (a 7B LLaMA's
      // (4096, 11008) weights made `plan --budget` take minutes).
      for_each_grad_span(p, [&](int64_t vo, int64_t go, int64_t len) { add_run(p, {g + go, len, v + vo, &p}, -1); });
      return;
    }
    if (!units_in_rows || contiguous_) {
      // The unit runs of for_each_grad_run, row by row, neighbouring units of one group
      // passed as one run (add_run would merge them: the same runs, a call per group change).
      const int64_t gext = p.grad_extent(), vext = p.value_extent(), units = gext / us;
      std::vector<std::pair<int64_t, int64_t>> segments;  // [first, end) unit positions of one group
      for (int64_t u = 0, end = 0; u < units; u = end) {
        const int group = group_of(p, static_cast<int>(u));
        for (end = u + 1; end < units && group_of(p, static_cast<int>(end)) == group;) ++end;
        segments.emplace_back(u, end);
      }
      for (int64_t o = 0; o < outer; ++o)
        for (const auto& [u, end] : segments)
          add_run(p, {g + (o * gext + u * us) * inner, (end - u) * us * inner, v + (o * vext + u * us) * inner, &p},
                  static_cast<int>(u));
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

}  // namespace subdp
