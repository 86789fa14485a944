// Subnetwork plan construction.
#include "engine/plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "engine/data/dataset.h"
#include "engine/error.h"

namespace subdp {

Regime parse_regime(const std::string& s) {
  if (s == "none") return Regime::none;
  if (s == "forward") return Regime::forward;
  if (s == "backward") return Regime::backward;
  throw Error(fmt::format("mask.regime = \"{}\": expected none, forward or backward", s));
}

Granularity parse_granularity(const std::string& s) {
  if (s == "block") return Granularity::block;
  if (s == "neuron") return Granularity::neuron;
  throw Error(fmt::format("mask.granularity = \"{}\": expected block or neuron", s));
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

SubnetworkPlan make_plan(const ModelUnits& units, const MaskConfig& mask, int S) {
  SubnetworkPlan plan;
  plan.regime = parse_regime(mask.regime);
  plan.granularity = parse_granularity(mask.granularity);
  plan.S = S;
  if (!plan.masked()) {
    SUBDP_CHECK(S == 1 || mask.keep == 1.0,
                "mask.regime = \"none\" with parallel.subnetworks = {}: plain DP has one "
                "subnetwork; set mask.regime to forward or backward, or subnetworks = 1", S);
    plan.c = S;
    return plan;
  }
  plan.c = coverage_from(mask, S);
  std::map<std::vector<int>, int> ids;
  if (plan.granularity == Granularity::neuron) {
    SUBDP_CHECK(!units.layers.empty(), "mask.granularity = \"neuron\": this model has no maskable layers");
    for (size_t l = 0; l < units.layers.size(); ++l) {
      auto first = deal_units(units.layers[l].units, plan.c, S, mix64(mask.seed + 7919 * (l + 1)), 0);
      std::vector<int> groups;
      for (int o : first) groups.push_back(group_id(plan, ids, o));
      plan.unit_group.push_back(groups);
    }
    return plan;
  }
  // Block level: droppable, unpinned blocks are dealt stage by stage.
  const int nblocks = static_cast<int>(units.blocks.size());
  for (int b : mask.pinned)
    SUBDP_CHECK(b >= 0 && b < nblocks, "mask.pinned: block {} out of range [0, {})", b, nblocks);
  plan.block_group.assign(nblocks, -1);
  std::map<int, std::vector<int>> stages;  // stage -> dealt block indices
  for (int b = 0; b < nblocks; ++b) {
    const bool pinned = std::count(mask.pinned.begin(), mask.pinned.end(), b) > 0;
    if (units.blocks[b].droppable && !pinned) stages[units.blocks[b].stage].push_back(b);
  }
  SUBDP_CHECK(!stages.empty(), "mask.granularity = \"block\": the model has no droppable residual "
              "blocks (the MLP has none; use granularity = \"neuron\", or unpin blocks)");
  const int L = S / std::gcd(plan.c, S);
  int position = 0;  // global deal position of the stage's first block
  for (auto& [stage, blocks] : stages) {
    const int rotation = (position * plan.c + position / L) % S;
    auto first = deal_units(static_cast<int>(blocks.size()), plan.c, S,
                            mix64(mask.seed + 104729 * (stage + 1)), rotation);
    for (size_t i = 0; i < blocks.size(); ++i) plan.block_group[blocks[i]] = group_id(plan, ids, first[i]);
    position += static_cast<int>(blocks.size());
  }
  return plan;
}

std::string SubnetworkPlan::describe(const ModelUnits& units) const {
  std::string out = fmt::format("plan: regime={} granularity={} S={} coverage c={} keep={:.4g} groups={}\n",
                                regime == Regime::none ? "none" : regime == Regime::forward ? "forward" : "backward",
                                granularity == Granularity::block ? "block" : "neuron", S, c, keep(), groups.size());
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
                           block_group[b] < 0 ? "(dense)" : keeps_block(s, b) ? "" : "(dropped)");
    } else {
      for (size_t l = 0; l < unit_group.size(); ++l) {
        int kept = 0;
        for (size_t u = 0; u < unit_group[l].size(); ++u) kept += keeps_unit(s, l, u);
        out += fmt::format(" {}={}/{}", units.layers[l].name, kept, units.layers[l].units);
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace subdp
