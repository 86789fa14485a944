// run_plan: prints the subnetwork plan and the predicted per-rank bytes by category for the
// configured regime next to plain DP, and with a budget, what fits per regime.
#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/core/backend.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/train/footprint.h"
#include "models/model.h"

#include <unistd.h>

namespace subdp {

namespace {

void print_header() {
  std::printf("%-34s", "predicted bytes per rank");
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12s", category_name(static_cast<MemCategory>(c)));
  std::printf(" %12s\n", "total");
}

void print_row(const std::string& label, const MemStats& m, int64_t dp_total) {
  std::printf("  %-32s", label.c_str());
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(m.peak[c]));
  std::printf(" %12lld", static_cast<long long>(m.total_peak));
  if (dp_total > 0) std::printf("  (%.2fx DP)", static_cast<double>(m.total_peak) / dp_total);
  std::printf("\n");
}

/// The combination-name suffix of parallel.shard (as benchmarks/compare.py spells modifiers).
std::string shard_suffix(Sharding shard) {
  constexpr const char* suffix[] = {"", "+zero1", "+zero2", "+fsdp"};
  return suffix[static_cast<int>(shard)];
}

/// Plain DP: no masking and no memory baseline (activation recompute) either.
Config as_dp(Config c) {
  c.parallel.subnetworks = 1;
  c.mask.regime = MaskRegime::none;
  c.mask.keep = 1.0;
  c.train.recompute = Recompute::none;
  c.parallel.shard = Sharding::none;
  return c;
}

// Largest per-rank peak over the ranks of one subnetwork each (replicas are identical).
int64_t worst_rank(const Config& c, int world) {
  int64_t worst = 0;
  const int S = c.parallel.subnetworks;
  for (int s = 0; s < (c.mask.regime == MaskRegime::none ? 1 : S); ++s) worst = std::max(worst, predict_rank_memory(c, world, s).total_peak);
  return worst;
}

constexpr int kMaxBatchSearched = 1 << 17;

// Largest per-rank batch (powers of two and the steps between) whose worst rank fits, up to
// kMaxBatchSearched.
int largest_batch(Config c, int world, double budget) {
  int lo = 0, hi = 1;
  auto fits = [&](int b) {
    c.train.batch_size = b;
    return worst_rank(c, world) <= budget;
  };
  while (hi <= kMaxBatchSearched && fits(hi)) lo = hi, hi *= 2;
  if (lo == kMaxBatchSearched) return lo;  // the search's limit: at least this
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

constexpr int kMaxCombinationS = 64;

/// Every regime (DP, and with S > 1 forward / backward masking at block and neuron level at the
/// configured keep) with every memory baseline (ZeRO-1, ZeRO-2 or FSDP, block recompute) at the configured
/// batch: the combinations that fit the budget, smallest first, and the smallest of all.
void answer_combinations(const Config& config, int world, double budget) {
  struct Option {
    std::string name;
    int64_t bytes;
  };
  std::vector<Option> fits;
  const int S = config.parallel.subnetworks;
  if (S > kMaxCombinationS) {  // each combination plans S subnetworks: minutes beyond this
    std::printf("  combinations with ZeRO-1 / ZeRO-2 / FSDP / recompute: not listed for S > %d (each needs S dry runs); "
                "plan one with --set parallel.shard=gradients --set train.recompute=blocks\n", kMaxCombinationS);
    return;
  }
  const int64_t dp = worst_rank(as_dp(config), world);
  std::vector<std::pair<std::string, Config>> bases = {{"dp", as_dp(config)}};
  for (const MaskRegime regime : {MaskRegime::forward, MaskRegime::backward})
    for (const Granularity gran : {Granularity::block, Granularity::neuron}) {
      if (S == 1) break;
      Config c = as_dp(config);
      c.parallel.subnetworks = S;
      c.mask = config.mask;
      c.mask.regime = regime;
      c.mask.granularity = gran;
      bases.push_back({std::string(regime == MaskRegime::forward ? "fwd-" : "bwd-") + name_of(gran), c});
    }
  for (const auto& [base, c0] : bases)
    for (const Sharding shard : {Sharding::none, Sharding::optimizer, Sharding::gradients, Sharding::parameters})
      for (const bool recompute : {false, true}) {
        Config c = c0;
        // Refused by the config check: FSDP with backward masking, alignment with ZeRO-2 / FSDP.
        if (c.mask.regime == MaskRegime::backward && shard == Sharding::parameters) continue;
        if (c.log.alignment_every > 0 && (shard == Sharding::gradients || shard == Sharding::parameters)) continue;
        c.parallel.shard = shard;
        c.train.recompute = recompute ? Recompute::blocks : Recompute::none;
        const std::string name = base + shard_suffix(shard) + (recompute ? "+recompute" : "");
        try {
          const int64_t bytes = worst_rank(c, world);
          if (bytes <= budget) fits.push_back({name, bytes});
        } catch (const Error&) {  // not available for this model (no blocks, no neuron units)
        }
      }
  std::sort(fits.begin(), fits.end(), [](const Option& a, const Option& b) { return a.bytes < b.bytes; });
  std::printf("  combinations that fit at batch/rank %d (regime + ZeRO-1 / ZeRO-2 / FSDP / recompute, smallest first):\n",
              config.train.batch_size);
  if (fits.empty()) std::printf("    none\n");
  for (const Option& o : fits)
    std::printf("    %-32s %12lld bytes  (%.2fx DP)\n", o.name.c_str(), static_cast<long long>(o.bytes),
                static_cast<double>(o.bytes) / std::max<int64_t>(1, dp));
  if (!fits.empty()) std::printf("  smallest footprint: %s\n", fits.front().name.c_str());
}

std::string batch_text(int batch) {
  return batch >= kMaxBatchSearched ? fmt::format("{} or more (the search's limit)", batch) : std::to_string(batch);
}

void answer_budget(const Config& config, int world, double budget) {
  const int S = config.parallel.subnetworks;
  std::printf("\nbudget %.0f bytes per rank (world W=%d, S=%d):\n", budget, world, S);
  std::printf("  %-24s largest batch/rank that fits: %s\n", "plain DP", batch_text(largest_batch(as_dp(config), world, budget)).c_str());
  answer_combinations(config, world, budget);
  if (S == 1) return;
  for (const MaskRegime regime : {MaskRegime::forward, MaskRegime::backward})
    for (const Granularity gran : {Granularity::block, Granularity::neuron}) {
      Config c = config;
      c.mask.regime = regime;
      c.mask.granularity = gran;
      std::string fitting = "none";
      for (int k = S; k >= 1; --k) {  // keep = k/S, from the least masking down
        c.mask.keep = static_cast<double>(k) / S;
        try {
          if (worst_rank(c, world) <= budget) {
            fitting = fmt::format("{:.4g}", c.mask.keep);
            break;
          }
        } catch (const Error&) {
          fitting = "n/a (granularity not available for this model)";
          break;
        }
      }
      c.mask.keep = config.mask.keep;
      std::string batch = "-";
      try {
        batch = batch_text(largest_batch(c, world, budget));
      } catch (const Error&) {
      }
      std::printf("  %-8s %-7s largest keep ratio that fits: %-10s largest batch/rank at keep %.4g: %s\n",
                  name_of(regime), name_of(gran), fitting.c_str(), config.mask.keep, batch.c_str());
    }
}

}  // namespace

int run_plan(const Config& config, int world, double budget_bytes) {
  const int S = config.parallel.subnetworks;
  if (world <= 0) world = S;
  SUBDP_CHECK(world % S == 0, "--world {} is not a multiple of parallel.subnetworks = {}", world, S);
  const ModelUnits units = model_units(config.model);
  const SubnetworkPlan plan = make_plan(units, config.mask, S);
  // Workspace scales with threads: predict for W ranks sharing this host's cores.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads = config.train.threads > 0 ? config.train.threads : std::max<int>(1, static_cast<int>(cores / world));
  set_backend(make_planning_backend(config.device.type));  // device.type decides the workspaces
  backend().configure(threads, winograd_tile_side(config.train));
  std::printf("%s", plan.describe(units).c_str());
  std::printf("threads per rank: %d\n", threads);
  const MemStats dp = predict_rank_memory(as_dp(config), world, 0);
  print_header();
  if (plan.masked())
    for (int s = 0; s < S; ++s)
      print_row(fmt::format("subnetwork {} (ranks {}::{})", s, s, S), predict_rank_memory(config, world, s), dp.total_peak);
  else if (config.train.recompute != Recompute::none || config.parallel.shard != Sharding::none)
    print_row(fmt::format("dp{}{} (rank 0)", shard_suffix(config.parallel.shard),
                          config.train.recompute != Recompute::none ? "+recompute" : ""),
              predict_rank_memory(config, world, 0), dp.total_peak);
  print_row(fmt::format("plain DP (W={})", world), dp, 0);
  if (budget_bytes > 0) answer_budget(config, world, budget_bytes);
  return 0;
}

}  // namespace subdp
