// Subnetwork plan (design brief, "Subnetwork plan"): uniform coverage, balance, mixing, few
// holder groups, determinism, the brief's worked example, local masks, and config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "engine/core/hash.h"
#include "engine/config/config.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"
#include "models/model.h"

namespace subdp {
namespace {

MaskConfig mask_config(const char* granularity, double keep, uint64_t seed = 0, const char* regime = "forward") {
  MaskConfig m;
  m.regime = choice_named<MaskRegime>(regime).value();
  m.granularity = choice_named<Granularity>(granularity).value();
  m.keep = keep;
  m.seed = seed;
  return m;
}

/// Neuron-level units: one maskable layer per entry of `sizes`.
ModelUnits layer_units(const std::vector<int>& sizes) {
  ModelUnits u;
  for (size_t l = 0; l < sizes.size(); ++l) u.layers.push_back({"layer" + std::to_string(l), sizes[l], 10});
  return u;
}

/// Block-level units: `stages[i]` blocks in stage i (block size grows with the stage).
ModelUnits block_units(const std::vector<int>& stages) {
  ModelUnits u;
  for (size_t st = 0; st < stages.size(); ++st)
    for (int i = 0; i < stages[st]; ++i)
      u.blocks.push_back({"block" + std::to_string(u.blocks.size()), static_cast<int>(st), 100 << st, true});
  return u;
}

/// True when U dealt units with coverage c cannot reach all S subnetworks (U * c < S): make_plan
/// refuses such a plan (Plan.SubnetworkWithoutAnyDealtUnitIsRefused), so sweeps skip it.
bool leaves_a_subnetwork_empty(int U, int c, int S) { return U * c < S; }

/// Checks the group table: at most S groups, each a sorted set of c distinct subnetworks.
void expect_groups_valid(const SubnetworkPlan& p) {
  EXPECT_LE(static_cast<int>(p.groups.size()), p.S);
  EXPECT_GE(p.groups.size(), 1u);
  std::set<std::vector<int>> distinct;
  for (const auto& g : p.groups) {
    ASSERT_EQ(static_cast<int>(g.size()), p.c);
    ASSERT_TRUE(std::is_sorted(g.begin(), g.end()));
    ASSERT_EQ(std::adjacent_find(g.begin(), g.end()), g.end()) << "repeated subnetwork in a group";
    for (int s : g) ASSERT_TRUE(s >= 0 && s < p.S);
    distinct.insert(g);
  }
  EXPECT_EQ(distinct.size(), p.groups.size()) << "the same group interned twice";
}

/// Coverage and balance of `count` units whose holders are given by keeps(s, i).
template <class Keeps>
void expect_covered_and_balanced(int count, const SubnetworkPlan& p, Keeps keeps, const std::string& what) {
  for (int i = 0; i < count; ++i) {
    int holders = 0;
    for (int s = 0; s < p.S; ++s) holders += keeps(s, i);
    ASSERT_EQ(holders, p.c) << what << " unit " << i << ": coverage";
  }
  const int lo = count * p.c / p.S, hi = (count * p.c + p.S - 1) / p.S;
  for (int s = 0; s < p.S; ++s) {
    int kept = 0;
    for (int i = 0; i < count; ++i) kept += keeps(s, i);
    ASSERT_TRUE(kept >= lo && kept <= hi)
        << what << " subnetwork " << s << " keeps " << kept << " of " << count << " units, want " << lo << ".." << hi;
  }
}

// ---------------------------------------------------------------------------------------------
// Neuron level

TEST(Plan, NeuronLevelCoverageBalanceGroupsMixing) {
  std::vector<int> sizes(69);
  std::iota(sizes.begin(), sizes.end(), 1);  // U = 1..69, one layer each
  const ModelUnits units = layer_units(sizes);
  for (int S = 1; S <= 16; ++S)
    for (int c = 1; c <= S; ++c)
      for (uint64_t seed : {0ull, 1ull, 977ull}) {
        SCOPED_TRACE(::testing::Message() << "S=" << S << " c=" << c << " seed=" << seed);
        const SubnetworkPlan p = make_plan(units, mask_config("neuron", static_cast<double>(c) / S, seed), S);
        ASSERT_EQ(p.S, S);
        ASSERT_EQ(p.c, c);
        ASSERT_DOUBLE_EQ(p.keep(), static_cast<double>(c) / S);
        expect_groups_valid(p);
        ASSERT_EQ(p.unit_group.size(), sizes.size());
        for (size_t l = 0; l < sizes.size(); ++l) {
          const int U = sizes[l];
          ASSERT_EQ(static_cast<int>(p.unit_group[l].size()), U);
          std::set<int> used;
          for (int g : p.unit_group[l]) {
            ASSERT_TRUE(g >= 0 && g < static_cast<int>(p.groups.size()));
            used.insert(g);
          }
          expect_covered_and_balanced(
              U, p, [&](int s, int u) { return p.keeps_unit(s, static_cast<int>(l), u); }, "layer" + std::to_string(l));
          // Mixing: units of one layer do not all share one holder group.
          if (U >= 2 * S && c < S) EXPECT_GE(used.size(), 2u) << "U=" << U;
          if (c == S) EXPECT_EQ(used.size(), 1u);
        }
      }
}

TEST(Plan, NeuronLevelMixingUsesEveryGroupOnceUAtLeastS) {
  // Documented construction: offsets o_p = (p*c + floor(p/L)) mod S reach all S offsets
  // within S units, so a layer of U >= S units uses S distinct holder groups (c < S).
  for (int S = 2; S <= 16; ++S)
    for (int c = 1; c < S; ++c)
      for (int U : {S, S + 1, 2 * S + 3, 69}) {
        const SubnetworkPlan p = make_plan(layer_units({U}), mask_config("neuron", static_cast<double>(c) / S, 4), S);
        std::set<int> used(p.unit_group[0].begin(), p.unit_group[0].end());
        EXPECT_EQ(static_cast<int>(used.size()), S) << "S=" << S << " c=" << c << " U=" << U;
      }
}

TEST(Plan, DealUnitsFollowsDocumentedConstruction) {
  // deal_units gives unit perm[p] the offset (p*c + floor(p/L) + rotation) mod S: the
  // multiset of offsets is that of the formula, whatever the permutation.
  for (int S = 1; S <= 16; ++S)
    for (int c = 1; c <= S; ++c)
      for (int U : {1, 5, 17, 40}) {
        const int L = S / std::gcd(c, S);
        for (int rotation : {0, S - 1}) {
          std::vector<int> got = deal_units(U, c, S, 12345, rotation), want;
          for (int p = 0; p < U; ++p) want.push_back((p * c + p / L + rotation) % S);
          std::sort(got.begin(), got.end());
          std::sort(want.begin(), want.end());
          ASSERT_EQ(got, want) << "S=" << S << " c=" << c << " U=" << U << " rotation=" << rotation;
        }
      }
}

TEST(Plan, DealUnitsPermutationIsSeeded) {
  // Same seed: same deal. Different seeds: the units change places (mixing across seeds).
  const auto a = deal_units(64, 2, 8, 1, 0);
  EXPECT_EQ(a, deal_units(64, 2, 8, 1, 0));
  int differ = 0;
  for (uint64_t seed = 2; seed < 12; ++seed) differ += deal_units(64, 2, 8, seed, 0) != a;
  EXPECT_GE(differ, 9);
}

TEST(Plan, NeuronLayersUseIndependentPermutations) {
  // Two layers of the same size get different unit -> group assignments.
  const SubnetworkPlan p = make_plan(layer_units({64, 64, 64}), mask_config("neuron", 0.5, 7), 8);
  EXPECT_NE(p.unit_group[0], p.unit_group[1]);
  EXPECT_NE(p.unit_group[1], p.unit_group[2]);
  EXPECT_NE(p.unit_group[0], p.unit_group[2]);
}

// ---------------------------------------------------------------------------------------------
// Block level

const std::vector<std::vector<int>> kStageSets = {{6},     {2, 2, 2},    {3, 5, 2, 7},       {1, 1, 1}, {4, 4, 4, 4},
                                                  {13, 2}, {5, 1, 5, 1}, {1, 2, 3, 4, 5, 6}, {69}};

TEST(Plan, BlockLevelCoverageAndPerStageBalance) {
  for (const auto& stages : kStageSets) {
    const ModelUnits units = block_units(stages);
    const int U = static_cast<int>(units.blocks.size());
    for (int S = 1; S <= 16; ++S)
      for (int c = 1; c <= S; ++c)
        for (uint64_t seed : {0ull, 3ull}) {
          if (leaves_a_subnetwork_empty(U, c, S)) continue;
          SCOPED_TRACE(::testing::Message() << "stages=" << stages.size() << " first=" << stages[0] << " S=" << S
                                            << " c=" << c << " seed=" << seed);
          const SubnetworkPlan p = make_plan(units, mask_config("block", static_cast<double>(c) / S, seed), S);
          ASSERT_EQ(p.c, c);
          expect_groups_valid(p);
          ASSERT_EQ(p.block_group.size(), units.blocks.size());
          int first = 0;
          for (size_t st = 0; st < stages.size(); ++st) {
            for (int i = 0; i < stages[st]; ++i) {
              const int g = p.block_group[first + i];
              ASSERT_TRUE(g >= 0 && g < static_cast<int>(p.groups.size()));
            }
            expect_covered_and_balanced(
                stages[st], p, [&](int s, int i) { return p.keeps_block(s, first + i); }, "stage" + std::to_string(st));
            first += stages[st];
          }
        }
  }
}

TEST(Plan, BlockLevelTotalBalancedForEqualStages) {
  // Balance applies to the list of unpinned blocks too. With stages of equal size (every
  // ResNet here) some per-stage rotation of the deal balances the total as well (checked
  // exhaustively for these shapes), so each subnetwork must keep floor or ceil of U*c/S
  // blocks overall, not only per stage.
  int cases = 0, failed = 0;
  std::string detail;
  for (const std::vector<int>& stages : {std::vector<int>{2, 2}, {2, 2, 2}, {3, 3}, {3, 3, 3}, {4, 4, 4}}) {
    const ModelUnits units = block_units(stages);
    const int U = static_cast<int>(units.blocks.size());
    for (int S = 1; S <= 16; ++S)
      for (int c = 1; c <= S; ++c) {
        if (leaves_a_subnetwork_empty(U, c, S)) continue;
        const SubnetworkPlan p = make_plan(units, mask_config("block", static_cast<double>(c) / S, 0), S);
        const int lo = U * c / S, hi = (U * c + S - 1) / S;
        std::string counts;
        bool ok = true;
        for (int s = 0; s < S; ++s) {
          int kept = 0;
          for (int b = 0; b < U; ++b) kept += p.keeps_block(s, b);
          ok = ok && kept >= lo && kept <= hi;
          counts += (s ? "," : "") + std::to_string(kept);
        }
        ++cases;
        if (!ok && ++failed <= 8)
          detail += "\n  " + std::to_string(stages.size()) + " stages of " + std::to_string(stages[0]) +
                    ", S=" + std::to_string(S) + " c=" + std::to_string(c) + ": blocks kept per subnetwork {" + counts +
                    "}, want " + std::to_string(lo) + ".." + std::to_string(hi);
      }
  }
  EXPECT_EQ(failed, 0) << failed << " of " << cases << " (stages, S, c) cases unbalanced in total" << detail;
}

TEST(Plan, BriefExampleSixBlocksThreeStages) {
  // Brief: U = 6 blocks (3 stages of 2), S = 4, c = 2 gives, in deal order,
  // {0,1} {2,3} {1,2} {3,0} {2,3} {0,1}: three blocks per subnetwork, four groups.
  // make_plan deals each stage through a seeded permutation, so the order of the two blocks
  // inside a stage depends on the seed; the pair of groups of each stage is the brief's.
  const ModelUnits units = block_units({2, 2, 2});
  const std::vector<std::multiset<std::vector<int>>> want = {{{0, 1}, {2, 3}}, {{1, 2}, {0, 3}}, {{2, 3}, {0, 1}}};
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const SubnetworkPlan p = make_plan(units, mask_config("block", 0.5, seed), 4);
    EXPECT_EQ(p.groups.size(), 4u);
    for (int st = 0; st < 3; ++st) {
      std::multiset<std::vector<int>> got = {p.groups.at(p.block_group[2 * st]),
                                             p.groups.at(p.block_group[2 * st + 1])};
      EXPECT_EQ(got, want[st]) << "seed " << seed << " stage " << st;
    }
    for (int s = 0; s < 4; ++s) {
      int kept = 0;
      for (int b = 0; b < 6; ++b) kept += p.keeps_block(s, b);
      EXPECT_EQ(kept, 3) << "seed " << seed << " subnetwork " << s;
    }
  }
}

TEST(Plan, PinnedAndUndroppableBlocksAreDense) {
  ModelUnits units = block_units({3, 4});
  units.blocks[5].droppable = false;
  MaskConfig mc = mask_config("block", 0.25, 2);
  mc.pinned = {0, 4};
  const SubnetworkPlan p = make_plan(units, mc, 4);
  for (int b : {0, 4, 5}) {
    EXPECT_EQ(p.block_group[b], -1) << b;
    for (int s = 0; s < 4; ++s) EXPECT_TRUE(p.keeps_block(s, b)) << b;
  }
  // The rest is dealt stage by stage: stage 0 = {1, 2}, stage 1 = {3, 6}.
  for (const std::vector<int>& blocks : {std::vector<int>{1, 2}, {3, 6}}) {
    for (int b : blocks) ASSERT_GE(p.block_group[b], 0) << b;
    expect_covered_and_balanced(
        static_cast<int>(blocks.size()), p, [&](int s, int i) { return p.keeps_block(s, blocks[i]); }, "dealt blocks");
  }
}

TEST(Plan, UnmaskedPlanKeepsEverything) {
  const ModelUnits units = block_units({2, 2});
  const SubnetworkPlan p = make_plan(units, mask_config("block", 1.0, 0, "none"), 1);
  EXPECT_FALSE(p.masked());
  EXPECT_EQ(p.c, p.S);
  for (int b = 0; b < 4; ++b) EXPECT_TRUE(p.keeps_block(0, b));
  // keep = 1 with masking: c = S, everyone keeps everything, one group.
  const SubnetworkPlan q = make_plan(layer_units({10}), mask_config("neuron", 1.0), 4);
  EXPECT_EQ(q.c, 4);
  EXPECT_EQ(q.groups.size(), 1u);
  for (int s = 0; s < 4; ++s)
    for (int u = 0; u < 10; ++u) EXPECT_TRUE(q.keeps_unit(s, 0, u));
}

// ---------------------------------------------------------------------------------------------
// Real models

TEST(Plan, RealModelsAreBalanced) {
  ModelConfig resnet;
  resnet.name = ModelKind::resnet;  // default: widths {32, 64, 128}, 2 blocks per stage
  ModelConfig mlp;
  mlp.name = ModelKind::mlp;
  const ModelUnits ru = model_units(resnet), mu = model_units(mlp);
  ASSERT_EQ(ru.blocks.size(), 6u);
  for (size_t b = 0; b < ru.blocks.size(); ++b) EXPECT_EQ(ru.blocks[b].stage, static_cast<int>(b / 2));
  ASSERT_EQ(ru.layers.size(), 6u);
  EXPECT_TRUE(mu.blocks.empty());
  ASSERT_EQ(mu.layers.size(), 1u);  // hidden layer 0 only (1024 -> 1024: odd layers dense)
  EXPECT_EQ(mu.layers[0].units, 1024);
  for (int S : {2, 4, 8})
    for (int c = 1; c < S; ++c) {
      const double keep = static_cast<double>(c) / S;
      for (const ModelUnits* u : {&ru, &mu}) {
        const SubnetworkPlan p = make_plan(*u, mask_config("neuron", keep, 11), S);
        for (size_t l = 0; l < u->layers.size(); ++l)
          expect_covered_and_balanced(
              u->layers[l].units, p, [&](int s, int i) { return p.keeps_unit(s, static_cast<int>(l), i); },
              u->layers[l].name);
      }
      if (leaves_a_subnetwork_empty(6, c, S)) continue;
      const SubnetworkPlan b = make_plan(ru, mask_config("block", keep, 11), S);
      for (int st = 0; st < 3; ++st)
        expect_covered_and_balanced(
            2, b, [&](int s, int i) { return b.keeps_block(s, 2 * st + i); }, "stage " + std::to_string(st));
    }
}

/// Every subnetwork's kept parameters over the whole model are within one unit (the largest
/// unit of the model) of the mean: the per-rank peak, not only each layer, is balanced.
void expect_ranks_balanced(const ModelUnits& u, const SubnetworkPlan& p, const std::string& what) {
  int64_t largest = 0;
  if (p.granularity == Granularity::neuron)
    for (const auto& l : u.layers) largest = std::max(largest, l.unit_params);
  else
    for (const auto& b : u.blocks) largest = std::max(largest, b.branch_params);
  std::vector<int64_t> kept(p.S);
  for (int s = 0; s < p.S; ++s) kept[s] = p.kept_params(u, s);
  const double mean = std::accumulate(kept.begin(), kept.end(), 0.0) / p.S;
  for (int s = 0; s < p.S; ++s)
    ASSERT_LE(std::abs(kept[s] - mean), static_cast<double>(largest))
        << what << " S=" << p.S << " c=" << p.c << ": subnetwork " << s << " keeps " << kept[s] << " params, mean "
        << mean << ", largest unit " << largest;
}

TEST(Plan, NeuronLevelRanksBalancedOverTheModel) {
  // The failing input of issue 22: a GPT with 2 heads per block at S = 4, keep 0.25 gave
  // subnetworks 0 and 1 a head in every block and 2 and 3 none.
  ModelConfig gpt;
  gpt.name = ModelKind::gpt;
  gpt.heads = 2;
  const SubnetworkPlan two_heads = make_plan(model_units(gpt), mask_config("neuron", 0.25), 4);
  for (int s = 0; s < 4; ++s) {
    int heads = 0;
    for (int b = 0; b < gpt.depth; ++b) heads += two_heads.keeps_unit(s, 2 * b, 0) + two_heads.keeps_unit(s, 2 * b, 1);
    EXPECT_EQ(heads, 3) << "subnetwork " << s;  // 6 blocks x 2 heads over 4 subnetworks
  }
  // Property over many models, S and c: real GPTs, ResNets and MLPs, and random layer lists.
  std::vector<std::pair<std::string, ModelUnits>> models;
  for (int heads : {1, 2, 3, 4, 8})
    for (int depth : {1, 2, 3, 5, 6, 12}) {
      gpt.heads = heads;
      gpt.width = 24 * heads;
      gpt.depth = depth;
      models.emplace_back(fmt::format("gpt heads={} depth={}", heads, depth), model_units(gpt));
    }
  ModelConfig resnet;
  resnet.name = ModelKind::resnet;
  for (auto widths : {std::vector<int>{32, 64, 128}, std::vector<int>{3, 5, 7}, std::vector<int>{8, 12, 16}}) {
    resnet.widths = widths;
    models.emplace_back("resnet", model_units(resnet));
  }
  ModelConfig mlp;
  mlp.name = ModelKind::mlp;
  for (auto hidden : {std::vector<int>{1024, 1024}, std::vector<int>{7, 5, 3}, std::vector<int>{96, 64}}) {
    mlp.hidden = hidden;
    models.emplace_back("mlp", model_units(mlp));
  }
  for (uint64_t r = 0; r < 20; ++r) {
    ModelUnits u;
    const int layers = 1 + static_cast<int>(mix64(r) % 12);
    for (int l = 0; l < layers; ++l)
      u.layers.push_back({"l" + std::to_string(l), 1 + static_cast<int>(mix64(r * 131 + l) % 9),
                          1 + static_cast<int64_t>(mix64(r * 977 + l) % 1000)});
    models.emplace_back("random " + std::to_string(r), u);
  }
  for (const auto& [what, u] : models)
    for (int S : {2, 3, 4, 5, 8})
      for (int c = 1; c < S; ++c)
        for (uint64_t seed : {0ull, 5ull}) {
          const SubnetworkPlan p = make_plan(u, mask_config("neuron", static_cast<double>(c) / S, seed), S);
          expect_ranks_balanced(u, p, what);
          for (size_t l = 0; l < u.layers.size(); ++l)  // and every layer stays balanced
            expect_covered_and_balanced(
                u.layers[l].units, p, [&](int s, int i) { return p.keeps_unit(s, static_cast<int>(l), i); },
                u.layers[l].name);
        }
}

TEST(Plan, BlockLevelRanksBalancedOverTheModel) {
  // Stages are dealt together (choose_rotations): the kept branch parameters per subnetwork
  // are within one branch of the mean, for real ResNets and GPTs and stage lists.
  std::vector<std::pair<std::string, ModelUnits>> models;
  ModelConfig resnet;
  resnet.name = ModelKind::resnet;
  for (int per_stage : {1, 2, 3, 4}) {
    resnet.blocks_per_stage = per_stage;
    models.emplace_back("resnet " + std::to_string(per_stage), model_units(resnet));
  }
  ModelConfig gpt;
  gpt.name = ModelKind::gpt;
  for (int depth : {2, 3, 6, 8, 12}) {
    gpt.depth = depth;
    models.emplace_back("gpt " + std::to_string(depth), model_units(gpt));
  }
  for (auto stages :
       {std::vector<int>{2, 2, 2}, std::vector<int>{1, 3, 5}, std::vector<int>{4, 4}, std::vector<int>{3}})
    models.emplace_back("stages", block_units(stages));
  for (const auto& [what, u] : models)
    for (int S : {2, 3, 4, 6, 8})
      for (int c = 1; c < S; ++c)
        if (!leaves_a_subnetwork_empty(static_cast<int>(u.blocks.size()), c, S))
          expect_ranks_balanced(u, make_plan(u, mask_config("block", static_cast<double>(c) / S, 3), S), what);
}

// ---------------------------------------------------------------------------------------------
// Determinism and the hash

TEST(Plan, DeterministicAndHashed) {
  const ModelUnits units = layer_units({40, 33, 7});
  const MaskConfig mc = mask_config("neuron", 0.5, 21);
  const SubnetworkPlan a = make_plan(units, mc, 4), b = make_plan(units, mc, 4);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.unit_group, b.unit_group);
  EXPECT_EQ(a.groups, b.groups);
  // Different seeds give different plans (and hashes).
  std::set<uint64_t> hashes;
  for (uint64_t seed = 0; seed < 20; ++seed)
    hashes.insert(make_plan(units, mask_config("neuron", 0.5, seed), 4).hash());
  EXPECT_EQ(hashes.size(), 20u);
  // The hash covers S, c, granularity and regime.
  EXPECT_NE(a.hash(), make_plan(units, mask_config("neuron", 0.25, 21), 4).hash());
  EXPECT_NE(a.hash(), make_plan(units, mask_config("neuron", 0.5, 21), 8).hash());
  EXPECT_NE(a.hash(), make_plan(units, mask_config("neuron", 0.5, 21, "backward"), 4).hash());
  ModelUnits both = units;
  both.blocks = block_units({2, 2}).blocks;
  EXPECT_NE(make_plan(both, mask_config("neuron", 0.5, 21), 4).hash(),
            make_plan(both, mask_config("block", 0.5, 21), 4).hash());
  // Block level is deterministic too.
  const ModelUnits bu = block_units({3, 5});
  EXPECT_EQ(make_plan(bu, mask_config("block", 0.5, 9), 4).hash(),
            make_plan(bu, mask_config("block", 0.5, 9), 4).hash());
  EXPECT_EQ(make_plan(bu, mask_config("block", 0.5, 9), 4).block_group,
            make_plan(bu, mask_config("block", 0.5, 9), 4).block_group);
}

TEST(Plan, DescribeListsEverySubnetwork) {
  const ModelUnits units = block_units({2, 2, 2});
  const SubnetworkPlan p = make_plan(units, mask_config("block", 0.5, 0), 4);
  const std::string d = p.describe(units);
  for (int s = 0; s < 4; ++s) EXPECT_NE(d.find("subnetwork " + std::to_string(s)), std::string::npos) << d;
  EXPECT_NE(d.find("dropped"), std::string::npos) << d;
}

// ---------------------------------------------------------------------------------------------
// Local masks

TEST(Plan, SubnetMaskOrdersKeptUnitsFirst) {
  ModelUnits units = layer_units({13, 8});
  units.blocks = block_units({3, 3}).blocks;
  for (const char* gran : {"neuron", "block"})
    for (const char* regime : {"forward", "backward"}) {
      const SubnetworkPlan p = make_plan(units, mask_config(gran, 0.75, 3, regime), 4);
      const bool neuron = std::string(gran) == "neuron";
      for (int s = 0; s < 4; ++s) {
        SCOPED_TRACE(::testing::Message() << gran << " " << regime << " s=" << s);
        const SubnetMask m = make_subnet_mask(p, units, s, true);
        EXPECT_EQ(m.regime, p.regime);
        EXPECT_EQ(m.granularity, p.granularity);
        EXPECT_FLOAT_EQ(m.scale, std::string(regime) == "forward" ? 4.f / 3.f : 1.f);
        EXPECT_FLOAT_EQ(make_subnet_mask(p, units, s, false).scale, 1.f);
        ASSERT_EQ(m.layers.size(), units.layers.size());
        for (size_t l = 0; l < units.layers.size(); ++l) {
          const LayerMask& lm = m.layers[l];
          ASSERT_EQ(lm.units(), units.layers[l].units);
          std::vector<int> sorted = lm.order;
          std::sort(sorted.begin(), sorted.end());
          for (int u = 0; u < lm.units(); ++u) ASSERT_EQ(sorted[u], u) << "order is a permutation";
          EXPECT_TRUE(std::is_sorted(lm.order.begin(), lm.order.begin() + lm.kept));
          EXPECT_TRUE(std::is_sorted(lm.order.begin() + lm.kept, lm.order.end()));
          for (int q = 0; q < lm.units(); ++q)
            EXPECT_EQ(p.keeps_unit(s, static_cast<int>(l), lm.order[q]), q < lm.kept);
          if (!neuron) EXPECT_EQ(lm.kept, lm.units());  // block level: no neuron slicing
        }
        ASSERT_EQ(m.block_kept.size(), units.blocks.size());
        for (size_t b = 0; b < units.blocks.size(); ++b) {
          EXPECT_EQ(static_cast<bool>(m.block_kept[b]), p.keeps_block(s, static_cast<int>(b)));
          EXPECT_EQ(m.skips_block(static_cast<int>(b)), std::string(regime) == "forward" && !m.block_kept[b]);
          if (neuron) EXPECT_TRUE(m.block_kept[b]);
        }
      }
    }
  const SubnetMask f = full_mask(units);
  EXPECT_EQ(f.regime, Regime::none);
  EXPECT_FLOAT_EQ(f.scale, 1.f);
  for (const LayerMask& lm : f.layers) {
    EXPECT_EQ(lm.kept, lm.units());
    for (int q = 0; q < lm.units(); ++q) EXPECT_EQ(lm.order[q], q);
  }
  for (char k : f.block_kept) EXPECT_TRUE(k);
}

// ---------------------------------------------------------------------------------------------
// Errors name the config key

std::string plan_error(const ModelUnits& units, const MaskConfig& mc, int S) {
  try {
    make_plan(units, mc, S);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Plan, ErrorsNameTheKey) {
  const ModelUnits blocks = block_units({2, 2});
  const ModelUnits layers = layer_units({8});
  // keep * S not whole, or c outside [1, S].
  for (double keep : {0.3, 0.0, 1.25, -0.5}) {
    const std::string e = plan_error(layers, mask_config("neuron", keep), 4);
    EXPECT_NE(e.find("mask.keep"), std::string::npos) << keep << ": \"" << e << "\"";
  }
  EXPECT_EQ(plan_error(layers, mask_config("neuron", 1.0 / 3), 3), "");
  // Block level on the MLP (no droppable blocks).
  ModelConfig mlp;
  mlp.name = ModelKind::mlp;
  std::string e = plan_error(model_units(mlp), mask_config("block", 0.5), 4);
  EXPECT_NE(e.find("mask.granularity"), std::string::npos) << e;
  // Block level with every block pinned or undroppable: nothing to deal.
  MaskConfig all_pinned = mask_config("block", 0.5);
  all_pinned.pinned = {0, 1, 2, 3};
  e = plan_error(blocks, all_pinned, 4);
  EXPECT_NE(e.find("mask.granularity"), std::string::npos) << e;
  // Neuron level on a model without maskable layers.
  e = plan_error(blocks, mask_config("neuron", 0.5), 4);
  EXPECT_NE(e.find("mask.granularity"), std::string::npos) << e;
  // Pinned out of range.
  for (int bad : {-1, 4, 100}) {
    MaskConfig mc = mask_config("block", 0.5);
    mc.pinned = {1, bad};
    e = plan_error(blocks, mc, 4);
    EXPECT_NE(e.find("mask.pinned"), std::string::npos) << bad << ": \"" << e << "\"";
    // Stochastic depth too (its plan is DP's; the pin was ignored).
    mc.regime = MaskRegime::stochastic;
    e = plan_error(blocks, mc, 1);
    EXPECT_NE(e.find("mask.pinned: block " + std::to_string(bad) + " out of range"), std::string::npos)
        << bad << ": \"" << e << "\"";
  }
  // Unknown regime / granularity spellings cannot reach the plan: the config parser refuses
  // them (Config.ChoiceKeysReadEverySpellingAndRefuseOthers).
  // No masking with S > 1 subnetworks is refused.
  e = plan_error(blocks, mask_config("block", 0.5, 0, "none"), 4);
  EXPECT_NE(e.find("mask.regime"), std::string::npos) << e;
}

// A subnetwork left without any dealt unit would train only the parts never masked: refused,
// naming the empty subnetworks, exactly when dealt units x keep < 1.
TEST(Plan, SubnetworkWithoutAnyDealtUnitIsRefused) {
  std::string e = plan_error(block_units({1}), mask_config("block", 0.5), 2);
  EXPECT_NE(e.find("subnetwork(s) 1 with none"), std::string::npos) << e;
  EXPECT_NE(e.find("keep >= 1/1"), std::string::npos) << e;
  e = plan_error(block_units({2}), mask_config("block", 0.25), 4);
  EXPECT_NE(e.find("subnetwork(s) 2, 3 with none"), std::string::npos) << e;
  // Pinned blocks are not dealt: 3 blocks with 2 pinned leave one to deal.
  MaskConfig pinned = mask_config("block", 0.5);
  pinned.pinned = {0, 2};
  EXPECT_NE(plan_error(block_units({3}), pinned, 2).find("with none"), std::string::npos);
  e = plan_error(layer_units({1, 1}), mask_config("neuron", 0.25), 4);
  EXPECT_NE(e.find("maskable unit(s)"), std::string::npos) << e;
  // At the threshold every subnetwork keeps one.
  EXPECT_EQ(plan_error(block_units({2}), mask_config("block", 0.5), 2), "");
  EXPECT_EQ(plan_error(block_units({2}), mask_config("block", 0.5), 4), "");
  EXPECT_EQ(plan_error(block_units({1, 1, 1, 1}), mask_config("block", 0.25), 4), "");
  EXPECT_EQ(plan_error(layer_units({1, 1}), mask_config("neuron", 0.5), 4), "");
}

}  // namespace
}  // namespace subdp
