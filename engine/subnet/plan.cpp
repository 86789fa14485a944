// Subnetwork plan construction.
#include "engine/subnet/plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "engine/core/hash.h"
#include "engine/core/error.h"

namespace subdp {

Regime plan_regime(MaskRegime regime) {
  switch (regime) {
    case MaskRegime::forward: return Regime::forward;
    case MaskRegime::backward: return Regime::backward;
    case MaskRegime::none:
    case MaskRegime::stochastic: return Regime::none;
  }
  throw Error("mask.regime: not a regime");
}

namespace {

// Seeded Fisher-Yates permutation of 0..n-1 (platform independent).
std::vector<int> seeded_permutation(int n, uint64_t seed) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = n - 1; i > 0; --i) {
    uint64_t r = mix64(seed ^ mix64(static_cast<uint64_t>(i)));
    int j = static_cast<int>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

// Interns the holder set starting at o into plan.groups and returns its id.
int group_id(SubnetworkPlan& plan, std::map<std::vector<int>, int>& ids, int o) {
  std::vector<int> set;
  for (int k = 0; k < plan.c; ++k) set.push_back((o + k) % plan.S);
  std::sort(set.begin(), set.end());
  auto it = ids.find(set);
  if (it != ids.end()) return it->second;
  int id = static_cast<int>(plan.groups.size());
  plan.groups.push_back(set);
  ids.emplace(set, id);
  return id;
}

// Adds `amount` to each holder of every dealt unit (first holders `first`, coverage c):
// blocks per subnetwork (amount +-1, the stage deals) or kept parameters (unit_params).
template <class T>
void add_deal(std::vector<T>& total, const std::vector<int>& first, int c, int S, T amount) {
  for (int o : first)
    for (int j = 0; j < c; ++j) total[(o + j) % S] += amount;
}

int spread(const std::vector<int>& count) {
  return *std::max_element(count.begin(), count.end()) - *std::min_element(count.begin(), count.end());
}

// Picks one deal per stage minimising the overall spread: every combination when there are
// at most 2^16 of them, otherwise greedily stage by stage. First minimum wins (index 0 = brief).
std::vector<int> choose_rotations(const std::vector<std::vector<std::vector<int>>>& deals, int c, int S) {
  const size_t stages = deals.size();
  double combos = 1;
  for (size_t i = 0; i < stages; ++i) combos *= S;
  std::vector<int> best(stages, 0), cur(stages, 0), count(S, 0);
  if (combos <= 65536) {
    int best_spread = 1 << 30;
    for (;;) {
      std::fill(count.begin(), count.end(), 0);
      for (size_t st = 0; st < stages; ++st) add_deal(count, deals[st][cur[st]], c, S, 1);
      if (spread(count) < best_spread) {
        best_spread = spread(count);
        best = cur;
      }
      size_t st = 0;
      while (st < stages && ++cur[st] == S) cur[st++] = 0;
      if (st == stages) return best;
    }
  }
  for (size_t st = 0; st < stages; ++st) {
    int best_spread = 1 << 30;
    for (int k = 0; k < S; ++k) {
      add_deal(count, deals[st][k], c, S, 1);
      if (spread(count) < best_spread) {
        best_spread = spread(count);
        best[st] = k;
      }
      add_deal(count, deals[st][k], c, S, -1);
    }
    add_deal(count, deals[st][best[st]], c, S, 1);
  }
  return best;
}

int coverage_from(const MaskConfig& mask, int S) {
  const double c = mask.keep * S;
  const int rounded = static_cast<int>(std::lround(c));
  SUBDP_CHECK(std::abs(c - rounded) < 1e-9 && rounded >= 1 && rounded <= S,
              "mask.keep = {} with parallel.subnetworks = {}: coverage c = keep * S = {} must be a "
              "whole number in [1, S]; try keep = k/{} for k in 1..{}",
              mask.keep, S, c, S, S);
  return rounded;
}

}  // namespace

std::vector<int> deal_units(int U, int c, int S, uint64_t seed, int rotation) {
  const int L = S / std::gcd(c, S);
  std::vector<int> perm = seeded_permutation(U, seed);
  std::vector<int> first(U);
  for (int p = 0; p < U; ++p) first[perm[p]] = (p * c + p / L + rotation) % S;
  return first;
}

bool SubnetworkPlan::group_has(int group, int s) const {
  const auto& g = groups.at(group);
  return std::binary_search(g.begin(), g.end(), s);
}

bool SubnetworkPlan::keeps_unit(int s, int layer, int unit) const {
  if (!masked() || granularity != Granularity::neuron) return true;
  return group_has(unit_group.at(layer).at(unit), s);
}

bool SubnetworkPlan::keeps_block(int s, int b) const {
  if (!masked() || granularity != Granularity::block) return true;
  const int g = block_group.at(b);
  return g < 0 || group_has(g, s);
}

int64_t SubnetworkPlan::kept_params(const ModelUnits& units, int s) const {
  int64_t total = 0;
  if (granularity == Granularity::neuron) {
    for (size_t l = 0; l < units.layers.size(); ++l)
      for (int u = 0; u < units.layers[l].units; ++u)
        if (keeps_unit(s, static_cast<int>(l), u)) total += units.layers[l].unit_params;
    return total;
  }
  for (size_t b = 0; b < units.blocks.size(); ++b)
    if (keeps_block(s, static_cast<int>(b))) total += units.blocks[b].branch_params;
  return total;
}

uint64_t SubnetworkPlan::hash() const {
  uint64_t h = mix64(static_cast<uint64_t>(regime) * 31 + static_cast<uint64_t>(granularity));
  auto eat = [&h](int64_t v) { h = mix64(h ^ static_cast<uint64_t>(v)); };
  eat(S);
  eat(c);
  for (const auto& g : groups)
    for (int s : g) eat(s);
  for (const auto& layer : unit_group)
    for (int g : layer) eat(g);
  for (int g : block_group) eat(g);
  return h;
}

uint64_t deal_seed(uint64_t seed, int64_t deal) {
  if (deal == 0) return seed;
  return mix64(mix64(seed ^ 0x6a09e667f3bcc909ULL) + static_cast<uint64_t>(deal)) & ((uint64_t{1} << 53) - 1);
}

bool stochastic_drop(uint64_t seed, int rank, int64_t step, int block, double keep) {
  uint64_t h = mix64(seed ^ 0x5d0c4a57e0b1c3f9ULL);
  for (uint64_t v : {static_cast<uint64_t>(rank), static_cast<uint64_t>(step), static_cast<uint64_t>(block)})
    h = mix64(h ^ mix64(v + 0x9e3779b97f4a7c15ULL));
  const double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  return u >= keep;
}

namespace {

/// Neuron level: every maskable layer dealt with the brief's construction into plan.unit_group.
void deal_neurons(SubnetworkPlan& plan, std::map<std::vector<int>, int>& ids, const ModelUnits& units,
                  const MaskConfig& mask) {
  const int S = plan.S;
  SUBDP_CHECK(!units.layers.empty(), "mask.granularity = \"neuron\": this model has no maskable layers");
  // Each layer is dealt with the brief's construction, balanced within the layer. Its
  // rotation carries on from the units dealt before it (the brief's global position), and
  // among the S rotations the one that puts the layer's extra units on the subnetworks with
  // the fewest kept parameters so far is taken (ties: the carried one). Restarting every
  // layer at offset 0 gave the first subnetworks every extra unit (GPT, 2 heads, S = 4:
  // subnetworks 0 and 1 held all attention).
  const int L = S / std::gcd(plan.c, S);
  std::vector<int64_t> kept(S, 0);
  int64_t position = 0;
  for (size_t l = 0; l < units.layers.size(); ++l) {
    const UnitLayerSpec& layer = units.layers[l];
    const int carried = static_cast<int>((position * plan.c + position / L) % S);
    std::vector<int> best;
    int64_t best_cost = 0;
    for (int k = 0; k < S; ++k) {
      auto first = deal_units(layer.units, plan.c, S, mix64(mask.seed + 7919 * (l + 1)), (carried + k) % S);
      std::vector<int64_t> add(S, 0);
      add_deal(add, first, plan.c, S, layer.unit_params);
      int64_t cost = 0;  // sum of kept * added: least when the additions go to the lightest
      for (int s2 = 0; s2 < S; ++s2) cost += kept[s2] * add[s2];
      if (best.empty() || cost < best_cost) best = std::move(first), best_cost = cost;
    }
    add_deal(kept, best, plan.c, S, layer.unit_params);
    std::vector<int> groups;
    for (int o : best) groups.push_back(group_id(plan, ids, o));
    plan.unit_group.push_back(groups);
    position += layer.units;
  }
}

/// Throws unless every block in mask.pinned is one of the model's.
void check_pinned_in_range(const ModelUnits& units, const MaskConfig& mask) {
  const int nblocks = static_cast<int>(units.blocks.size());
  for (int b : mask.pinned)
    SUBDP_CHECK(b >= 0 && b < nblocks, "mask.pinned: block {} out of range [0, {})", b, nblocks);
}

/// Block level: droppable, unpinned blocks dealt stage by stage into plan.block_group.
void deal_blocks(SubnetworkPlan& plan, std::map<std::vector<int>, int>& ids, const ModelUnits& units,
                 const MaskConfig& mask) {
  const int S = plan.S;
  const int nblocks = static_cast<int>(units.blocks.size());
  check_pinned_in_range(units, mask);
  plan.block_group.assign(nblocks, -1);
  std::map<int, std::vector<int>> stages;  // stage -> dealt block indices
  for (int b = 0; b < nblocks; ++b) {
    const bool pinned = std::count(mask.pinned.begin(), mask.pinned.end(), b) > 0;
    if (units.blocks[b].droppable && !pinned) stages[units.blocks[b].stage].push_back(b);
  }
  SUBDP_CHECK(!stages.empty(),
              "mask.granularity = \"block\": no droppable residual block is left to deal "
              "(the model has {} blocks, {} of them in mask.pinned); use granularity = \"neuron\" or unpin blocks",
              nblocks, mask.pinned.size());
  // Each stage is dealt with the brief's construction. Its rotation is chosen so the block
  // count per subnetwork is as even as possible over the whole model, not only per stage:
  // exhaustively over rotation combinations when there are few, else greedily stage by
  // stage. Rotation offsets are tried from the brief's (the offset of the stage's first
  // global position), so ties keep the brief's deal.
  const int L = S / std::gcd(plan.c, S);
  std::vector<std::vector<int>> blocks_of;
  std::vector<std::vector<std::vector<int>>> deals;  // [stage][k] first holder per block
  int position = 0;
  for (auto& [stage, blocks] : stages) {
    const int U = static_cast<int>(blocks.size());
    const int preferred = (position * plan.c + position / L) % S;
    std::vector<std::vector<int>> per_k;
    for (int k = 0; k < S; ++k)
      per_k.push_back(deal_units(U, plan.c, S, mix64(mask.seed + 104729 * (stage + 1)), (preferred + k) % S));
    deals.push_back(per_k);
    blocks_of.push_back(blocks);
    position += U;
  }
  const std::vector<int> choice = choose_rotations(deals, plan.c, S);
  for (size_t st = 0; st < deals.size(); ++st)
    for (size_t i = 0; i < blocks_of[st].size(); ++i)
      plan.block_group[blocks_of[st][i]] = group_id(plan, ids, deals[st][choice[st]][i]);
}

/// Refuses a plan in which some subnetwork keeps none of the dealt units: that rank would train
/// the embeddings and head (and pinned blocks) only, which a keep ratio this small never means.
/// Every subnetwork gets one when the dealt units times c reach S, i.e. units x keep >= 1 (the
/// deal is balanced within one unit).
void check_every_subnetwork_keeps_a_unit(const SubnetworkPlan& plan) {
  std::vector<int> kept(plan.S, 0);
  int dealt_units = 0;
  const auto count = [&](int group) {
    if (group < 0) return;  // pinned or undroppable: not dealt
    ++dealt_units;
    for (int s : plan.groups[group]) ++kept[s];
  };
  for (int g : plan.block_group) count(g);
  for (const auto& layer : plan.unit_group)
    for (int g : layer) count(g);
  std::string empty;
  for (int s = 0; s < plan.S; ++s)
    if (kept[s] == 0) empty += fmt::format("{}{}", empty.empty() ? "" : ", ", s);
  if (empty.empty()) return;
  const bool block = plan.granularity == Granularity::block;
  throw Error(fmt::format(
      "mask.keep = {:.4g} with parallel.subnetworks = {} deals each of its {} {} to {} of the {} subnetworks, "
      "which leaves subnetwork(s) {} with none: they would train only the parts never masked. Every subnetwork "
      "keeps one when the dealt units times the keep ratio reach 1 (keep >= 1/{}); raise mask.keep{}",
      plan.keep(), plan.S, dealt_units, block ? "droppable block(s)" : "maskable unit(s)", plan.c, plan.S, empty,
      dealt_units, block ? ", deepen the model, or use mask.granularity = \"neuron\"" : ""));
}

/// Stochastic depth holds the whole model on every rank: DP's plan; the drops are drawn per
/// step by the trainer (stochastic_drop).
MaskConfig stochastic_depth_as_dp(const ModelUnits& units, const MaskConfig& mask, int S) {
  SUBDP_CHECK(S == 1, "mask.regime = \"stochastic\": parallel.subnetworks = {} must be 1", S);
  const bool droppable =
      std::any_of(units.blocks.begin(), units.blocks.end(), [](const BlockSpec& b) { return b.droppable; });
  SUBDP_CHECK(droppable,
              "mask.regime = \"stochastic\": this model has no residual blocks to drop (use resnet, gpt or llama)");
  check_pinned_in_range(units, mask);  // its drops skip the pinned blocks
  MaskConfig dp = mask;
  dp.regime = MaskRegime::none;
  dp.keep = 1.0;
  return dp;
}

}  // namespace

SubnetworkPlan make_plan(const ModelUnits& units, const MaskConfig& mask, int S) {
  if (mask.regime == MaskRegime::stochastic) return make_plan(units, stochastic_depth_as_dp(units, mask, S), S);
  SubnetworkPlan plan;
  plan.regime = plan_regime(mask.regime);
  plan.granularity = mask.granularity;
  plan.S = S;
  if (!plan.masked()) {
    SUBDP_CHECK(S == 1 || mask.keep == 1.0,
                "mask.regime = \"none\" with parallel.subnetworks = {}: plain DP has one "
                "subnetwork; set mask.regime to forward or backward, or subnetworks = 1",
                S);
    plan.c = S;
    return plan;
  }
  plan.c = coverage_from(mask, S);
  std::map<std::vector<int>, int> ids;
  if (plan.granularity == Granularity::neuron)
    deal_neurons(plan, ids, units, mask);
  else
    deal_blocks(plan, ids, units, mask);
  check_every_subnetwork_keeps_a_unit(plan);
  return plan;
}

std::string SubnetworkPlan::describe(const ModelUnits& units) const {
  std::string out = fmt::format("plan: regime={} granularity={} S={} coverage c={} keep={:.4g} groups={}\n",
                                name_of(regime), name_of(granularity), S, c, keep(), groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    out += fmt::format("  group {}: subnetworks {{", g);
    for (size_t i = 0; i < groups[g].size(); ++i) out += fmt::format("{}{}", i ? "," : "", groups[g][i]);
    out += "}\n";
  }
  if (!masked()) return out;
  for (int s = 0; s < S; ++s) {
    out += fmt::format("  subnetwork {}:", s);
    if (granularity == Granularity::block) {
      for (size_t b = 0; b < block_group.size(); ++b)
        out += fmt::format(" {}{}", units.blocks[b].name,
                           block_group[b] < 0  ? "(dense)"
                           : keeps_block(s, b) ? ""
                                               : "(dropped)");
    } else {
      for (size_t l = 0; l < unit_group.size(); ++l) {
        int kept = 0;
        for (size_t u = 0; u < unit_group[l].size(); ++u) kept += keeps_unit(s, l, u);
        out += fmt::format(" {}={}/{}", units.layers[l].name, kept, units.layers[l].units);
      }
    }
    out +=
        fmt::format(" | kept params {} ({:.2f} MiB)\n", kept_params(units, s), kept_params(units, s) * 4.0 / 1048576);
  }
  return out;
}

}  // namespace subdp
