// Mask re-dealing (mask.redeal_every = K): every K steps the subnetwork plan is redrawn and
// each slice, with its optimizer state, moves to its new holders (IST / ResIST re-partition
// this way). The owners' elements wait in host memory while the old model is freed and the
// new one built, then move in windows of parallel.bucket_mb: the device never holds two
// models, so the re-deal's device peak stays within the training peak.
#include <chrono>
#include <cstdio>
#include <string>

#include "engine/error.h"
#include "engine/memory.h"
#include "engine/trainer.h"

namespace subdp {

namespace {

// Collective: the sum over ranks of each rank's OwnedSlices::checksum (exact, mod 2^64).
uint64_t world_checksum_of(Communicator& world, const OwnedSlices& owned) {
  uint64_t sum = 0;
  for (const std::string& s : world.allgather(fmt::format("{:016x}", owned.checksum())))
    sum += std::stoull(s, nullptr, 16);
  return sum;
}

}  // namespace

SubnetworkPlan Trainer::plan_of_deal(int64_t deal) const {
  MaskConfig mask = config_.mask;
  mask.seed = config_.mask.seed + static_cast<uint64_t>(deal);
  return make_plan(units_, mask, layout_.S);
}

void Trainer::redeal(int64_t deal) {
  const auto t0 = std::chrono::steady_clock::now();
  SubnetworkPlan next = plan_of_deal(deal);
  const bool unchanged = next.hash() == plan_.hash();
  const int64_t training_peak = MemoryTracker::global().stats().total_peak;
  const OwnedSlices owned = copy_owned_slices(*model_, optimizer_.get(), *sync_, *world_, specs_);
  const int64_t steps_taken = optimizer_->steps_taken();
  const int64_t window = std::max<int64_t>(1, static_cast<int64_t>(config_.parallel.bucket_mb * 1048576.0 / 4));
  int64_t moved = 0;
  const int64_t peak = MemoryTracker::global().peak_during([&] {
    optimizer_.reset();  // free the old model before the new one is allocated
    sync_.reset();
    model_.reset();
    plan_ = std::move(next);
    build_local_model();
    optimizer_->set_steps_taken(steps_taken);
    moved = scatter_owned_slices(*model_, optimizer_.get(), *world_, specs_, owned, window);
  });
  // Every element and moment must have arrived: the new owners' checksum equals the old ones'.
  const uint64_t before = world_checksum_of(*world_, owned), after = world_checksum_of(
      *world_, copy_owned_slices(*model_, optimizer_.get(), *sync_, *world_, specs_));
  SUBDP_CHECK(before == after || world_->backend() == "simulated",
              "internal error: the re-deal at step {} changed the model or optimizer state (checksum {:016x} before, "
              "{:016x} after)", step_, before, after);
  deal_ = deal;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pending_redeal_ = {{"deal", deal},         {"plan_seed", config_.mask.seed + static_cast<uint64_t>(deal)},
                     {"plan_hash", fmt::format("{:016x}", plan_.hash())}, {"unchanged", unchanged},
                     {"seconds", seconds},   {"bytes_moved", moved},
                     {"host_staged_bytes", owned.bytes()}, {"peak_bytes", peak},
                     {"checksum_before", fmt::format("{:016x}", before)}, {"checksum_after", fmt::format("{:016x}", after)},
                     {"training_peak_bytes", training_peak}};
  if (prints_)
    std::printf("step %lld: masks re-dealt (deal %lld, plan seed %llu%s): %.1f MiB moved per rank in %.2fs, "
                "device peak %.1f MiB (training peak %.1f MiB)\n",
                static_cast<long long>(step_), static_cast<long long>(deal),
                static_cast<unsigned long long>(config_.mask.seed + deal), unchanged ? ", plan unchanged" : "",
                moved / 1048576.0, seconds, peak / 1048576.0, training_peak / 1048576.0);
}

}  // namespace subdp
