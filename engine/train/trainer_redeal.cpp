// Mask re-dealing (mask.redeal_every = K): every K steps the subnetwork plan is redrawn and
// each slice, with its optimizer state, moves to its new holders (IST / ResIST re-partition
// this way). The owners' elements wait in host memory while the old model is freed and the
// new one built, then move in windows of parallel.bucket_mb: the device never holds two
// models, so the re-deal's device peak stays within the training peak of the largest
// subnetwork (of each rank's own when the subnetworks are the same size).
#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/train/trainer.h"

namespace subdp {

namespace {

// Collective: the sum over ranks of each rank's checksum of its owned elements (exact, mod 2^64).
uint64_t world_checksum_of(Communicator& world, uint64_t mine) {
  uint64_t sum = 0;
  for (const std::string& s : world.allgather(fmt::format("{:016x}", mine))) sum += std::stoull(s, nullptr, 16);
  return sum;
}

}  // namespace

void Trainer::replace_plan(SubnetworkPlan plan) {
  optimizer_.reset();  // free the old model before the new one is allocated
  sync_.reset();       // (it refers to plan_, which changes below)
  model_.reset();
  plan_ = std::move(plan);
  build_local_model();
}

SubnetworkPlan Trainer::plan_of_deal(int64_t deal) const {
  MaskConfig mask = config_.mask;
  mask.seed = deal_seed(config_.mask.seed, deal);
  return make_plan(units_, mask, layout_.S);
}

void Trainer::redeal(int64_t deal) {
  settle_updates();  // the optimizer that wrote the last update is replaced
  const auto t0 = Clock::now();
  const uint64_t seed = deal_seed(config_.mask.seed, deal);
  SubnetworkPlan next = plan_of_deal(deal);
  const bool unchanged = next.hash() == plan_.hash();
  const int64_t training_peak = MemoryTracker::global().stats().total_peak;
  int64_t moved = 0, staged = 0, peak = MemoryTracker::global().stats().total_current;
  uint64_t before = 0, after = 0;
  if (!unchanged) {  // the same plan again: every slice already sits with its holders
    const OwnedSlices owned = copy_owned_slices(*model_, optimizer_.get(), *sync_, *world_, specs_);
    staged = owned.bytes();
    before = world_checksum_of(*world_, owned.checksum());
    const int64_t steps_taken = optimizer_->steps_taken();
    // Clamped before the cast, as the gradient buckets: a huge bucket_mb is one window per tensor.
    const double window = std::min(config_.parallel.bucket_mb * 1048576.0 / sizeof(float), 1e15);
    peak = MemoryTracker::global().peak_during([&] {
      replace_plan(std::move(next));
      optimizer_->set_steps_taken(steps_taken);
      moved = scatter_owned_slices(*model_, optimizer_.get(), *world_, specs_, owned,
                                   std::max<int64_t>(1, static_cast<int64_t>(window)));
    });
    // Every element and moment must have arrived: the new owners' checksum equals the old ones'
    // (not under --simulate-rank, where the other ranks' elements never arrive).
    after = world_checksum_of(*world_, owned_checksum(*model_, optimizer_.get(), *sync_, *world_, specs_));
    SUBDP_CHECK(before == after || world_->simulated(),
                "internal error: the re-deal before step {} changed the model or optimizer state (checksum {:016x} "
                "before, {:016x} after)",
                step_ + 1, before, after);
  }
  deal_ = deal;
  const double seconds = seconds_since(t0);
  nlohmann::json record = {{"deal", deal},
                           {"plan_seed", seed},
                           {"plan_hash", fmt::format("{:016x}", plan_.hash())},
                           {"unchanged", unchanged},
                           {"seconds", seconds},
                           {"bytes_moved", moved},
                           {"host_staged_bytes", staged},
                           {"peak_bytes", peak},
                           {"training_peak_bytes", training_peak},
                           {"checksum_before", fmt::format("{:016x}", before)},
                           {"checksum_after", fmt::format("{:016x}", after)}};
  if (!pending_redeal_.is_null()) {  // the step after the last re-deal was skipped (train.nonfinite)
    nlohmann::json earlier = pending_redeal_.value("earlier", nlohmann::json::array());
    pending_redeal_.erase("earlier");
    earlier.push_back(pending_redeal_);
    record["earlier"] = earlier;
  }
  pending_redeal_ = record;
  double largest[3] = {static_cast<double>(peak), static_cast<double>(training_peak), seconds};
  world_->allreduce_max(largest, 3);
  if (prints_)
    std::printf(
        "before step %lld: masks re-dealt (deal %lld, plan seed %llu%s): %.1f MiB moved per rank in %.2fs "
        "(slowest rank); device peak %.1f MiB, training peak %.1f MiB (largest ranks)\n",
        static_cast<long long>(step_ + 1), static_cast<long long>(deal), static_cast<unsigned long long>(seed),
        unchanged ? ", plan unchanged: nothing moved" : "", moved / 1048576.0, largest[2], largest[0] / 1048576.0,
        largest[1] / 1048576.0);
}

}  // namespace subdp
