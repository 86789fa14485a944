// FSDP: value shards and block gathers.
#include "engine/parallel/sharded_params.h"

#include <map>

#include "engine/core/memory.h"

namespace subdp {

ShardedParams::ShardedParams(BucketSet& set, ShardedState& state) : set_(set), state_(state) {
  // Each block parameter's shard of its value, its pieces one after another (the layout of
  // sharded optimizer state), is the only copy kept between steps. Every trained block
  // parameter gets one, empty where this rank's segments miss it: its value is then nowhere
  // else on this rank.
  std::map<Param*, int64_t> len;
  for (Param* p : set_.params())
    if (p->trainable && p->grad.defined() && p->block >= 0) len[p] = 0;
  for (const ShardPiece& piece : state_.pieces())
    if (piece.param->block >= 0) len[piece.param] += piece.len;
  for (auto& [p, n] : len) {
    p->shard_value = Tensor::empty({n}, MemCategory::params);
    p->shard_runs.clear();
  }
  for (ShardPiece& piece : state_.pieces()) {
    Param& p = *piece.param;
    if (p.block < 0) continue;
    const int64_t at = p.shard_runs.empty() ? 0 : p.shard_runs.back().state_off + p.shard_runs.back().len;
    p.shard_runs.push_back({piece.value_off, piece.grad_off, at, piece.len});
    piece.value = p.shard_value.f32() + at;
  }
}

void ShardedParams::initialise(uint64_t seed) {
  if (MemoryTracker::global().dry_run()) return;
  for (Param* p : set_.params()) {
    if (!p->shard_value.defined()) continue;
    HostCopy host(p->shard_value, /*load=*/false);
    for (const StateRun& r : p->shard_runs)
      for (int64_t t = 0; t < r.len; ++t)
        host.f32()[r.state_off + t] = init_value(seed, p->name, full_offset_of_grad(*p, r.grad_off + t), p->init);
    host.store();
  }
}

void ShardedParams::gather_block(int block) {
  for (size_t i = set_.bucket_index(block, -1); i < set_.bucket_index(block - 1, -1); ++i)
    if (set_.reduces(set_.buckets()[i])) state_.gather_values(set_.buckets()[i]);
}

}  // namespace subdp
