// Owner broadcasts of backward masking.
#include "engine/parallel/owner_broadcast.h"

#include <algorithm>

namespace subdp {

OwnerBroadcast::OwnerBroadcast(BucketSet& set) : set_(set) {
  const SubnetworkPlan& plan = set_.plan();
  int64_t most = 0;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    value_runs_.push_back(unit_value_runs(static_cast<int>(g)));
    if (static_cast<int>(plan.groups[g].size()) == plan.S) continue;  // held by everyone: no broadcast
    int64_t n = 0;
    for (auto& r : value_runs_.back()) n += r.len;
    most = std::max(most, n);
  }
  chunk_ = std::min(most, set_.bucket_elems());
}

bool OwnerBroadcast::needed(const SubnetworkPlan& plan, const Layout& layout) {
  return plan.regime == Regime::backward && layout.world > 1;
}

std::vector<BucketRun> OwnerBroadcast::unit_value_runs(int g) const {
  // The group's unit values in canonical (global unit) order, on every rank.
  const SubnetworkPlan& plan = set_.plan();
  std::vector<BucketRun> runs;
  for (Param* p : set_.params()) {
    float* v = p->value.f32();
    if (plan.granularity == Granularity::block) {
      if (p->block >= 0 && plan.block_group.at(p->block) == g) runs.push_back({v, p->value.numel()});
      continue;
    }
    if (p->unit.layer < 0) continue;
    const LayerMask& m = *p->mask;
    std::vector<int> pos_of(m.units());
    for (int i = 0; i < m.units(); ++i) pos_of[m.order[i]] = i;
    const int64_t outer = p->outer(), inner = p->inner(), ext = p->value_extent(), us = p->unit.unit_size;
    // One run per unit, its rows ext * inner floats apart (canonical order: unit, then row).
    for (int u = 0; u < m.units(); ++u) {
      if (plan.unit_group[p->unit.layer][u] != g) continue;
      runs.push_back({v + pos_of[u] * us * inner, outer * us * inner, nullptr, nullptr, outer, ext * inner, 0});
    }
  }
  return runs;
}

void OwnerBroadcast::broadcast() {
  const SubnetworkPlan& plan = set_.plan();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    if (static_cast<int>(plan.groups[g].size()) == plan.S) continue;
    const int owner = set_.owner_of_group(static_cast<int>(g));
    // Scale 1: the non-owners receive the owner's bits.
    set_.through_buffer(value_runs_[g], chunk_, 1.f, [&](float* buf, int64_t n) {
      set_.world().broadcast(buf, n * static_cast<int64_t>(sizeof(float)), owner);
      bytes_ += n * static_cast<int64_t>(sizeof(float));
    });
  }
}

}  // namespace subdp
