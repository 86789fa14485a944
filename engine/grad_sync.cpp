// Holder-group buckets and their all-reduces.
#include "engine/grad_sync.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace subdp {

std::vector<int> Layout::ranks_of(const std::vector<int>& subnets) const {
  std::vector<int> out;
  for (int w = 0; w < world; ++w)
    if (std::find(subnets.begin(), subnets.end(), w % S) != subnets.end()) out.push_back(w);
  return out;
}

GradientSync::GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan,
                           std::vector<Param*> params, double bucket_mb)
    : world_(world), layout_(layout), plan_(plan), params_(std::move(params)) {
  std::vector<int> everyone(layout.world);
  for (int w = 0; w < layout.world; ++w) everyone[w] = w;
  buckets_.push_back({-1, everyone, &world_, {}, 0});
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
    buckets_.push_back(b);
  }
  for (Param* p : params_) add_param(*p);
  int64_t largest = 0;
  for (auto& b : buckets_) largest = std::max(largest, b.elems);
  // Clamped before the cast: a huge bucket_mb means "one message per bucket", not overflow.
  const double elems = std::min(bucket_mb * (1 << 20) / sizeof(float), 1e15);
  bucket_elems_ = std::max<int64_t>(1, static_cast<int64_t>(elems));
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
  if (layout.world > 1)
    comm_buffer_ = Tensor::empty({std::max(std::min(largest, bucket_elems_), broadcast_chunk_)}, MemCategory::comm);
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

void GradientSync::add_param(Param& p) {
  // Trainable: the held gradient runs. Buffers: the same runs, over values.
  auto add_run = [&](float* base, int64_t offset, int64_t len, int pos) {
    Bucket& b = buckets_[group_of(p, pos) + 1];
    SUBDP_ASSERT(b.comm != nullptr || b.group >= 0);
    if (!b.runs.empty() && b.runs.back().data + b.runs.back().len == base + offset)
      b.runs.back().len += len;  // merge adjacent runs
    else
      b.runs.push_back({base + offset, len});
    b.elems += len;
  };
  if (p.trainable) {
    float* g = p.grad.defined() ? p.grad.f32() : nullptr;
    for_each_grad_run(p, [&](int64_t, int64_t go, int64_t len, int pos) { add_run(g, go, len, pos); });
    return;
  }
  // Buffer held where its block is kept; unit-sliced buffers over the kept prefix.
  if (p.block >= 0 && plan_.granularity == Granularity::block && !plan_.keeps_block(layout_.subnet(), p.block)) return;
  float* v = p.value.f32();
  if (p.unit.layer < 0) {
    add_run(v, 0, p.value.numel(), -1);
    return;
  }
  const int64_t outer = p.outer(), inner = p.inner(), ext = p.value_extent(), us = p.unit.unit_size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < static_cast<int64_t>(p.mask->kept) * us; a += us)
      add_run(v, (o * ext + a) * inner, us * inner, static_cast<int>(a / us));
}

template <class Collective>
void GradientSync::through_buffer(const std::vector<BucketRun>& runs, int64_t cap, float scale, Collective collective) {
  float* buf = comm_buffer_.f32();
  size_t run = 0;
  int64_t run_off = 0;
  std::vector<BucketRun> pieces;
  cap = std::max<int64_t>(cap, 1);  // a zero cap would never consume a run
  while (run < runs.size()) {
    // Pack up to `cap` floats, run the collective on them, unpack times `scale`.
    pieces.clear();
    int64_t filled = 0;
    while (run < runs.size() && filled < cap) {
      const int64_t take = std::min(cap - filled, runs[run].len - run_off);
      std::memcpy(buf + filled, runs[run].data + run_off, sizeof(float) * take);
      pieces.push_back({runs[run].data + run_off, take});
      filled += take;
      run_off += take;
      if (run_off == runs[run].len) {
        ++run;
        run_off = 0;
      }
    }
    if (filled == 0) continue;  // only empty runs were left: every participant has the same ones
    collective(buf, filled);
    int64_t at = 0;
    for (auto& [dst, len] : pieces) {
      for (int64_t i = 0; i < len; ++i) dst[i] = buf[at + i] * scale;
      at += len;
    }
  }
}

void GradientSync::reduce_bucket(Bucket& b) {
  Communicator* comm = b.group < 0 ? &world_ : b.comm;
  if (comm == nullptr || b.elems == 0) return;
  // Chunks agree across the holders, whose buffers may differ in size: every buffer holds
  // at least min(its largest bucket, bucket_elems_) and at most bucket_elems_ floats, so a
  // bucket of at most bucket_elems_ goes out whole everywhere and a larger one is cut at
  // bucket_elems_ everywhere.
  const int64_t cap = std::min(comm_buffer_.numel(), bucket_elems_);
  through_buffer(b.runs, cap, 1.f / static_cast<float>(b.ranks.size()), [&](float* buf, int64_t n) {
    comm->allreduce_sum(buf, n);
    bytes_ += n * static_cast<int64_t>(sizeof(float));
  });
}

void GradientSync::average() {
  if (layout_.world == 1) return;
  for (auto& b : buckets_) reduce_bucket(b);  // fixed global order: world, then groups by id
}

int64_t GradientSync::elements_per_step() const {
  int64_t n = 0;
  for (const auto& b : buckets_)
    if ((b.group < 0 || b.comm) && layout_.world > 1) n += b.elems;
  return n;
}

int GradientSync::owner_of_group(int group) const {
  return group < 0 ? 0 : buckets_.at(group + 1).ranks.front();
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
    for (int u = 0; u < m.units(); ++u) {
      if (plan_.unit_group[p->unit.layer][u] != g) continue;
      for (int64_t o = 0; o < outer; ++o) runs.push_back({v + (o * ext + pos_of[u] * us) * inner, us * inner});
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
    });
  }
}

}  // namespace subdp
