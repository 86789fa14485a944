// GradientSync: the sync algorithms composed over one bucket core, in a fixed order on
// every rank, and the block hooks of ZeRO-2 and FSDP.
#include "engine/parallel/grad_sync.h"

#include "engine/core/backend.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace subdp {

GradientSync::GradientSync(Communicator& world, const Layout& layout, const SubnetworkPlan& plan,
                           std::vector<Param*> params, double bucket_mb, Sharding sharding, int blocks,
                           OverlapMode overlap)
    : sharding_(sharding),
      set_(world, layout, plan, std::move(params), bucket_mb, sharding != Sharding::none,
           subdp::shards_blocks(sharding) ? blocks : 0),
      allreduce_(set_) {
  next_block_ = set_.blocks() - 1;
  if (OwnerBroadcast::needed(plan, layout)) broadcast_ = std::make_unique<OwnerBroadcast>(set_);
  // ZeRO-2 and FSDP on one rank still move each block through the buffer, into its shard.
  set_.allocate_buffer(broadcast_ ? broadcast_->chunk() : 0, shards_blocks());
  if (sharded()) state_ = std::make_unique<ShardedState>(set_, world.simulated());
  if (sharding == Sharding::parameters) params_ = std::make_unique<ShardedParams>(set_, *state_);
  SUBDP_ASSERT(overlap == OverlapMode::off || sharding == Sharding::none);  // the config rules refuse the rest
  if (overlap != OverlapMode::off && layout.world > 1) overlap_ = OverlappedAllReduce::make(set_, blocks, overlap);
}

const std::vector<ShardPiece>& GradientSync::shard_pieces() const {
  static const std::vector<ShardPiece> none;
  return state_ ? state_->pieces() : none;
}

void GradientSync::initialise_shard_values(uint64_t seed) {
  if (params_) params_->initialise(seed);
}

void GradientSync::reduce_bucket(Bucket& b) {
  if (!set_.reduces(b)) return;
  if (state_) return state_->reduce_scatter(b);
  allreduce_.reduce(b);
}

void GradientSync::average() {
  SUBDP_ASSERT(next_block_ == -1);  // ZeRO-2: every block was reduced in this backward pass
  if (set_.layout().world == 1 && !shards_blocks()) return;
  if (overlap_ && overlap_->finish()) return;  // the rest of this step's chunks, in their order
  // Fixed global order: world, then groups by id (ZeRO-2: the phase after the blocks').
  auto& buckets = set_.buckets();
  for (size_t i = set_.bucket_index(-1, -1); i < buckets.size(); ++i) reduce_bucket(buckets[i]);
}

void GradientSync::reduce_block(int block) {
  if (!shards_blocks()) return;
  if (block == set_.blocks() - 1) next_block_ = block;  // a new backward pass
  SUBDP_CHECK(block == next_block_, "internal error: ZeRO-2 expected block {}'s gradients, got block {}'s", next_block_,
              block);
  --next_block_;
  for (size_t i = set_.bucket_index(block, -1); i < set_.bucket_index(block - 1, -1); ++i)
    reduce_bucket(set_.buckets()[i]);
}

void GradientSync::gather_block(int block) {
  if (params_) params_->gather_block(block);
}

void GradientSync::gather_values() {
  if (!sharded() || set_.layout().world == 1) return;
  // FSDP: the blocks' values stay in their shards until gather_block.
  auto& buckets = set_.buckets();
  const size_t first = sharding_ == Sharding::parameters ? set_.bucket_index(-1, -1) : 0;
  for (size_t i = first; i < buckets.size(); ++i)
    if (set_.reduces(buckets[i])) state_->gather_values(buckets[i]);
}

void GradientSync::broadcast_unit_values() {
  if (broadcast_) broadcast_->broadcast();
}

int64_t GradientSync::elements_per_step() const {
  int64_t n = 0;
  for (const auto& b : set_.buckets())
    if ((b.group < 0 || b.comm) && set_.layout().world > 1) n += b.elems;
  return n;
}

BlockHooks GradientSync::block_hooks() {
  BlockHooks hooks;
  if (!checks_block_gradients()) return hooks;
  block_params_.clear();
  for (Param* p : set_.params()) {
    if (!p->trainable || !p->grad.defined() || p->block < 0) continue;
    if (static_cast<int>(block_params_.size()) <= p->block) block_params_.resize(p->block + 1);
    block_params_[p->block].push_back(p);
  }
  hooks.after_backward = [this](int b) { block_backward_done(b); };
  if (sharding_ == Sharding::parameters)
    hooks.before_forward = hooks.before_backward = [this](int b) {
      const auto t = Clock::now();
      gather_block(b);
      hook_s_ += seconds_since(t);
    };
  return hooks;
}

void GradientSync::block_backward_done(int b) {
  static const std::vector<Param*> none;
  const auto& params = b < static_cast<int>(block_params_.size()) ? block_params_[b] : none;
  // Counted before the collective reads them (stream order), reduced all the same when not
  // finite: every holder takes part in the collective.
  backend().count_nonfinite_spans(grad_spans(params));
  if (overlap_) return overlap_->block_done(b);
  if (!shards_blocks()) return;  // not reached: without overlap the hooks exist for a sharding only
  const auto t = Clock::now();
  reduce_block(b);
  hook_s_ += seconds_since(t);
  for (Param* p : params) p->grad.zero_();
}

void GradientSync::wait_overlapped() {
  if (!overlap_) return;
  const auto t = Clock::now();
  overlap_->wait();
  hook_s_ += seconds_since(t);
}

void GradientSync::begin_step() {
  take_bytes();  // ZeRO-2 and overlap send inside the backward pass: count from here
  take_broadcast_bytes();
  hook_s_ = 0;
  if (overlap_) overlap_->begin_step();
}

}  // namespace subdp
