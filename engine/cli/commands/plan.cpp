// run_plan: prints the subnetwork plan and the predicted per-rank bytes by category for the
// configured regime next to plain DP, and with a budget, what fits per regime; with --json
// the same content as one JSON object (docs/outputs.md).
#include <algorithm>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/backend.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/train/footprint.h"
#include "engine/train/trainer_util.h"
#include "models/model.h"

#include <unistd.h>

namespace subdp {

namespace {

/// One row of the memory table: its label, its predicted bytes, and which row it is.
struct PlanRow {
  std::string label;
  std::string kind;  // "subnetwork", "baseline" (DP with ZeRO / recompute), "dp"
  int subnetwork = -1;
  MemStats bytes;
};

/// A combination (regime + memory baseline) that fits the budget.
struct Option {
  std::string name;
  int64_t bytes;
};

/// What fits the budget for one masking regime and granularity.
struct RegimeAnswer {
  MaskRegime regime;
  Granularity granularity;
  bool available = true;    // the granularity exists for this model
  double largest_keep = 0;  // 0: no keep ratio fits
  int largest_batch = -1;   // -1: not available
};

/// The answers of --budget.
struct BudgetAnswer {
  double budget = 0;
  int dp_batch = 0;
  bool combinations_listed = true;  // S <= kMaxCombinationS
  int64_t dp_bytes = 0;
  std::vector<Option> fits;  // smallest first
  std::vector<RegimeAnswer> regimes;
};

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
  for (int s = 0; s < (c.mask.regime == MaskRegime::none ? 1 : S); ++s)
    worst = std::max(worst, predict_rank_memory(c, world, s).total_peak);
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

/// The regime bases of the combinations: DP, and with S > 1 forward / backward masking at block
/// and neuron level at the configured keep.
std::vector<std::pair<std::string, Config>> combination_bases(const Config& config) {
  std::vector<std::pair<std::string, Config>> bases = {{"dp", as_dp(config)}};
  const int S = config.parallel.subnetworks;
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
  return bases;
}

/// Every regime with every memory baseline (ZeRO-1, ZeRO-2 or FSDP, block recompute) at the
/// configured batch: the combinations that fit the budget, smallest first.
void answer_combinations(const Config& config, int world, BudgetAnswer& answer) {
  if (config.parallel.subnetworks > kMaxCombinationS) {  // each combination plans S subnetworks: minutes beyond this
    answer.combinations_listed = false;
    return;
  }
  answer.dp_bytes = worst_rank(as_dp(config), world);
  for (const auto& [base, c0] : combination_bases(config))
    for (const Sharding shard : {Sharding::none, Sharding::optimizer, Sharding::gradients, Sharding::parameters})
      for (const bool recompute : {false, true}) {
        Config c = c0;
        // Refused by the config check: FSDP with backward masking, alignment with ZeRO-2 / FSDP.
        if (c.mask.regime == MaskRegime::backward && shard == Sharding::parameters) continue;
        if (c.log.alignment_every > 0 && shards_blocks(shard)) continue;
        c.parallel.shard = shard;
        c.train.recompute = recompute ? Recompute::blocks : Recompute::none;
        const std::string name = base + shard_suffix(shard) + (recompute ? "+recompute" : "");
        try {
          const int64_t bytes = worst_rank(c, world);
          if (bytes <= answer.budget) answer.fits.push_back({name, bytes});
        } catch (const Error&) {  // not available for this model (no blocks, no neuron units)
        }
      }
  std::sort(answer.fits.begin(), answer.fits.end(), [](const Option& a, const Option& b) { return a.bytes < b.bytes; });
}

/// For one regime and granularity: the largest keep ratio k/S that fits, and the largest batch
/// at the configured keep.
RegimeAnswer answer_regime(const Config& config, int world, double budget, MaskRegime regime, Granularity gran) {
  RegimeAnswer r{regime, gran};
  Config c = config;
  c.mask.regime = regime;
  c.mask.granularity = gran;
  const int S = config.parallel.subnetworks;
  for (int k = S; k >= 1; --k) {  // keep = k/S, from the least masking down
    c.mask.keep = static_cast<double>(k) / S;
    try {
      if (worst_rank(c, world) <= budget) {
        r.largest_keep = c.mask.keep;
        break;
      }
    } catch (const Error&) {
      r.available = false;
      break;
    }
  }
  c.mask.keep = config.mask.keep;
  try {
    r.largest_batch = largest_batch(c, world, budget);
  } catch (const Error&) {
  }
  return r;
}

BudgetAnswer answer_budget(const Config& config, int world, double budget) {
  BudgetAnswer answer;
  answer.budget = budget;
  answer.dp_batch = largest_batch(as_dp(config), world, budget);
  answer_combinations(config, world, answer);
  if (config.parallel.subnetworks == 1) return answer;
  for (const MaskRegime regime : {MaskRegime::forward, MaskRegime::backward})
    for (const Granularity gran : {Granularity::block, Granularity::neuron})
      answer.regimes.push_back(answer_regime(config, world, budget, regime, gran));
  return answer;
}

std::string batch_text(int batch) {
  if (batch == 0) return "none (not even a batch of 1 per rank)";
  return batch >= kMaxBatchSearched ? fmt::format("{} or more (the search's limit)", batch) : std::to_string(batch);
}

void print_combinations(const Config& config, const BudgetAnswer& answer) {
  if (!answer.combinations_listed) {
    std::printf(
        "  combinations with ZeRO-1 / ZeRO-2 / FSDP / recompute: not listed for S > %d (each needs S dry runs); "
        "plan one with --set parallel.shard=gradients --set train.recompute=blocks\n",
        kMaxCombinationS);
    return;
  }
  std::printf(
      "  combinations that fit at batch/rank %d (regime + ZeRO-1 / ZeRO-2 / FSDP / recompute, smallest first):\n",
      config.train.batch_size);
  if (answer.fits.empty()) std::printf("    none\n");
  for (const Option& o : answer.fits)
    std::printf("    %-32s %12lld bytes  (%.2fx DP)\n", o.name.c_str(), static_cast<long long>(o.bytes),
                static_cast<double>(o.bytes) / std::max<int64_t>(1, answer.dp_bytes));
  if (!answer.fits.empty()) std::printf("  smallest footprint: %s\n", answer.fits.front().name.c_str());
}

void print_budget(const Config& config, int world, const BudgetAnswer& answer) {
  std::printf("\nbudget %.0f bytes per rank (world W=%d, S=%d):\n", answer.budget, world, config.parallel.subnetworks);
  std::printf("  %-24s largest batch/rank that fits: %s\n", "plain DP", batch_text(answer.dp_batch).c_str());
  print_combinations(config, answer);
  for (const RegimeAnswer& r : answer.regimes) {
    const std::string fitting = !r.available         ? "n/a (granularity not available for this model)"
                                : r.largest_keep > 0 ? fmt::format("{:.4g}", r.largest_keep)
                                                     : "none";
    const std::string batch = r.largest_batch < 0 ? "-" : batch_text(r.largest_batch);
    std::printf("  %-8s %-7s largest keep ratio that fits: %-10s largest batch/rank at keep %.4g: %s\n",
                name_of(r.regime), name_of(r.granularity), fitting.c_str(), config.mask.keep, batch.c_str());
  }
}

/// The memory rows the table shows: each subnetwork's (masked), or the configured DP baseline's
/// (ZeRO / recompute), then plain DP's, last.
std::vector<PlanRow> memory_rows(const Config& config, const SubnetworkPlan& plan, int world) {
  std::vector<PlanRow> rows;
  const int S = config.parallel.subnetworks;
  if (plan.masked())
    for (int s = 0; s < S; ++s)
      rows.push_back({fmt::format("subnetwork {} (ranks {}::{})", s, s, S), "subnetwork", s,
                      predict_rank_memory(config, world, s)});
  else if (config.train.recompute != Recompute::none || config.parallel.shard != Sharding::none)
    rows.push_back({fmt::format("dp{}{} (rank 0)", shard_suffix(config.parallel.shard),
                                config.train.recompute != Recompute::none ? "+recompute" : ""),
                    "baseline", -1, predict_rank_memory(config, world, 0)});
  rows.push_back({fmt::format("plain DP (W={})", world), "dp", -1, predict_rank_memory(as_dp(config), world, 0)});
  return rows;
}

double ratio(int64_t bytes, int64_t dp) { return static_cast<double>(bytes) / std::max<int64_t>(1, dp); }

nlohmann::json plan_json(const SubnetworkPlan& plan, const ModelUnits& units) {
  nlohmann::json j = {{"regime", name_of(plan.regime)},
                      {"granularity", name_of(plan.granularity)},
                      {"S", plan.S},
                      {"coverage", plan.c},
                      {"keep", plan.keep()},
                      {"groups", plan.groups},
                      {"subnetworks", nlohmann::json::array()}};
  if (!plan.masked()) return j;
  for (int s = 0; s < plan.S; ++s) {
    nlohmann::json sub = {{"subnetwork", s}, {"kept_params", plan.kept_params(units, s)}};
    if (plan.granularity == Granularity::block) {
      for (size_t b = 0; b < plan.block_group.size(); ++b)
        sub["blocks"].push_back({{"name", units.blocks[b].name},
                                 {"state", plan.block_group[b] < 0  ? "dense"
                                           : plan.keeps_block(s, b) ? "kept"
                                                                    : "dropped"}});
    } else {
      for (size_t l = 0; l < plan.unit_group.size(); ++l) {
        int kept = 0;
        for (size_t u = 0; u < plan.unit_group[l].size(); ++u) kept += plan.keeps_unit(s, l, u);
        sub["layers"].push_back({{"name", units.layers[l].name}, {"kept", kept}, {"units", units.layers[l].units}});
      }
    }
    j["subnetworks"].push_back(sub);
  }
  return j;
}

nlohmann::json budget_json(const Config& config, const BudgetAnswer& answer) {
  auto batch = [](int b) { return nlohmann::json{{"batch", b}, {"at_search_limit", b >= kMaxBatchSearched}}; };
  nlohmann::json j = {
      {"bytes", static_cast<int64_t>(answer.budget)}, {"dp_largest_batch", batch(answer.dp_batch)},
      {"batch_size", config.train.batch_size},        {"combinations_listed", answer.combinations_listed},
      {"combinations", nlohmann::json::array()},      {"regimes", nlohmann::json::array()}};
  for (const Option& o : answer.fits)
    j["combinations"].push_back(
        {{"name", o.name}, {"bytes", o.bytes}, {"ratio_to_dp", ratio(o.bytes, answer.dp_bytes)}});
  j["smallest"] = answer.fits.empty() ? nlohmann::json(nullptr) : nlohmann::json(answer.fits.front().name);
  for (const RegimeAnswer& r : answer.regimes)
    j["regimes"].push_back(
        {{"regime", name_of(r.regime)},
         {"granularity", name_of(r.granularity)},
         {"available", r.available},
         {"keep", config.mask.keep},
         {"largest_keep", r.largest_keep > 0 ? nlohmann::json(r.largest_keep) : nlohmann::json(nullptr)},
         {"largest_batch", r.largest_batch < 0 ? nlohmann::json(nullptr) : batch(r.largest_batch)}});
  return j;
}

void print_json(const Config& config, const SubnetworkPlan& plan, const ModelUnits& units, int world, int threads,
                const std::vector<PlanRow>& rows, const BudgetAnswer* budget, const PlanOptions& options) {
  nlohmann::json j = {{"world", world}, {"threads_per_rank", threads}, {"plan", plan_json(plan, units)}};
  // The plan's regime is the masking it deals ("none" under stochastic depth); this is the config's.
  j["mask_regime"] = fmt::format("{}", config.mask.regime);
  if (config.mask.regime == MaskRegime::stochastic) j["drop_probability"] = 1.0 - config.mask.keep;
  if (options.deal > 0) j["deal"] = {{"deal", options.deal}, {"plan_seed", config.mask.seed}};
  const int64_t dp = rows.back().bytes.total_peak;
  for (const PlanRow& r : rows) {
    nlohmann::json row = {{"label", r.label},
                          {"kind", r.kind},
                          {"bytes", memory_json(r.bytes.peak)},
                          {"total", r.bytes.total_peak},
                          {"ratio_to_dp", ratio(r.bytes.total_peak, dp)}};
    if (r.subnetwork >= 0) row["subnetwork"] = r.subnetwork;
    (r.kind == "dp" ? j["dp"] : j["rows"].emplace_back()) = row;
  }
  if (!j.contains("rows")) j["rows"] = nlohmann::json::array();
  if (budget) j["budget"] = budget_json(config, *budget);
  std::printf("%s\n", j.dump(2).c_str());
}

}  // namespace

int run_plan(const Config& config, int world, const PlanOptions& options) {
  const int S = config.parallel.subnetworks;
  if (world <= 0) world = S;
  SUBDP_CHECK(world % S == 0, "--world {} is not a multiple of parallel.subnetworks = {}", world, S);
  const ModelUnits units = model_units(config.model);
  const SubnetworkPlan plan = make_plan(units, config.mask, S);
  // Workspace scales with threads: predict for W ranks sharing this host's cores.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int threads =
      config.train.threads > 0 ? config.train.threads : std::max<int>(1, static_cast<int>(cores / world));
  // device.type decides the workspaces, precision the language models' logits (bf16: 2 bytes).
  set_backend(make_planning_backend(config.device.type));
  backend().configure(threads, winograd_tile_side(config.train), config.device.precision);
  const std::vector<PlanRow> rows = memory_rows(config, plan, world);
  BudgetAnswer budget;
  if (options.budget_bytes > 0) budget = answer_budget(config, world, options.budget_bytes);
  if (options.json) {
    print_json(config, plan, units, world, threads, rows, options.budget_bytes > 0 ? &budget : nullptr, options);
    return 0;
  }
  if (options.deal > 0)
    std::printf("deal %lld (mask.redeal_every): plan seed %llu\n", options.deal,
                static_cast<unsigned long long>(config.mask.seed));
  std::printf("%s", plan.describe(units).c_str());
  if (config.mask.regime == MaskRegime::stochastic)  // the plan is DP's: say what the run does with it
    std::printf(
        "mask.regime = stochastic: the whole model on every rank (DP's plan and bytes); each rank drops "
        "each block with probability 1 - keep = %g at every step\n",
        1.0 - config.mask.keep);
  std::printf("threads per rank: %d\n", threads);
  print_header();
  for (const PlanRow& r : rows) print_row(r.label, r.bytes, r.kind == "dp" ? 0 : rows.back().bytes.total_peak);
  if (options.budget_bytes > 0) print_budget(config, world, budget);
  return 0;
}

}  // namespace subdp
