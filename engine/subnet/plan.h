// Subnetwork plan (design brief, "Subnetwork plan"): which subnetwork keeps which
// unit, deterministic from (model units, granularity, keep ratio, S, seed), with
// uniform coverage c = r*S, balance, mixing and at most S distinct holder groups.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"

namespace subdp {

/// The masking a plan deals: none (DP, stochastic depth), forward or backward.
enum class Regime { none, forward, backward };
/// name_of(Regime) and fmt print "none", "forward", "backward" (plan lines, plan --json).
template <>
struct Choices<Regime> {
  static constexpr auto names = std::array{"none", "forward", "backward"};
};
/// The plan's masking regime for mask.regime: forward and backward as they are; none and
/// stochastic (whole model on every rank, blocks dropped per step) plan no masks.
Regime plan_regime(MaskRegime regime);

/// A maskable layer at neuron level: `units` interchangeable units (neurons, channels,
/// heads) of `unit_params` parameters each. Units of one layer are planned together.
struct UnitLayerSpec {
  std::string name;
  int units = 0;
  int64_t unit_params = 0;
};

/// A residual block at block level. `stage` groups blocks of equal size (dealt together).
/// A block that cannot be dropped (not residual) has droppable = false.
struct BlockSpec {
  std::string name;
  int stage = 0;
  int64_t branch_params = 0;
  bool droppable = true;
};

/// What a model offers for masking; computed from the config without allocating.
struct ModelUnits {
  std::vector<UnitLayerSpec> layers;  // neuron level
  std::vector<BlockSpec> blocks;      // block level
};

/// The plan. Group ids index `groups`; a group is a sorted list of subnetworks.
struct SubnetworkPlan {
  Regime regime = Regime::none;
  Granularity granularity = Granularity::block;
  int S = 1;  // subnetworks
  int c = 1;  // coverage: subnetworks per unit
  std::vector<std::vector<int>> groups;
  std::vector<std::vector<int>> unit_group;  // neuron level: [layer][unit] -> group
  std::vector<int> block_group;              // block level: [block] -> group, -1 = dense (pinned)

  bool masked() const { return regime != Regime::none; }
  /// Effective keep ratio c / S (each unit's probability of being kept by a subnetwork).
  double keep() const { return static_cast<double>(c) / S; }
  /// True when holder group `group` (an index into groups) lists subnetwork s; throws
  /// std::out_of_range for a group index outside groups.
  bool group_has(int group, int s) const;
  /// True when subnetwork s keeps unit `unit` of layer `layer` (always true when unmasked).
  bool keeps_unit(int s, int layer, int unit) const;
  /// True when subnetwork s keeps block b (pinned and undroppable blocks always).
  bool keeps_block(int s, int b) const;
  /// Parameters of the maskable units that subnetwork s keeps: kept units x unit_params
  /// summed over the layers (neuron level), or branch_params of the kept blocks, pinned and
  /// undroppable ones included (block level), by the plan's granularity. The plan balances it.
  int64_t kept_params(const ModelUnits& units, int s) const;
  /// 64-bit hash of the whole plan (compared across ranks at start-up).
  uint64_t hash() const;
  /// Human-readable table of the plan.
  std::string describe(const ModelUnits& units) const;
};

/// Builds the plan. Errors (subdp::Error naming the key): keep * S not whole, block level on
/// a model without droppable blocks, pinned index out of range, a subnetwork left with none of
/// the dealt units (dealt units x c < S, e.g. one droppable block with S = 2, keep 0.5).
/// Construction (design brief): seeded permutation of the units; the unit at position p is
/// kept by subnetworks (o_p + k) mod S, k < c, o_p = (p*c + floor(p/L)) mod S, L = S/gcd(c,S).
/// Block level deals each stage separately, rotated by the offset of its first position.
SubnetworkPlan make_plan(const ModelUnits& units, const MaskConfig& mask, int S);

/// Plan seed of deal d (mask.redeal_every): `seed` itself for deal 0, else a hash of (seed, d)
/// below 2^53, so that runs of seeds s and s + 1 never share a plan sequence.
uint64_t deal_seed(uint64_t seed, int64_t deal);

/// Stochastic depth (mask.regime = "stochastic"): true when rank `rank` drops block `block`
/// at optimizer step `step` (0-based). A counter-based draw u in [0, 1) from (seed, rank,
/// step, block), dropped when u >= keep: each block with probability 1 - keep, independently
/// per block, step and rank, and the same after a resume.
bool stochastic_drop(uint64_t seed, int rank, int64_t step, int block, double keep);

/// The holder-group assignment for one layer of U units (exposed for tests).
/// Returns, per unit, the first subnetwork o of its holder set {o, ..., o+c-1 mod S}.
std::vector<int> deal_units(int U, int c, int S, uint64_t seed, int rotation);

}  // namespace subdp
