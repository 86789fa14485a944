// run_plan: prints the subnetwork plan and the per-rank memory per category, measured by
// building each rank's model in dry-run mode (same shape arithmetic as training).
#include <cstdio>

#include "engine/commands.h"
#include "engine/error.h"
#include "engine/optimizer.h"
#include "models/model.h"

namespace subdp {

int run_plan(const Config& config, int world, double budget_bytes) {
  const int S = config.parallel.subnetworks;
  if (world <= 0) world = S;
  SUBDP_CHECK(world % S == 0, "--world {} is not a multiple of parallel.subnetworks = {}", world, S);
  const ModelUnits units = model_units(config.model);
  const SubnetworkPlan plan = make_plan(units, config.mask, S);
  std::printf("%s", plan.describe(units).c_str());
  auto measure = [&](const SubnetMask& mask) {
    return MemoryTracker::global().measure([&] {
      auto model = make_model(config.model, mask, config.train.batch_size, config.train.seed);
      auto opt = make_optimizer(config.optim, model->params().trainable());
    });
  };
  std::printf("predicted bytes per rank      ");
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12s", category_name(static_cast<MemCategory>(c)));
  std::printf(" %12s\n", "total");
  const MemStats dp = measure(full_mask(units));
  for (int s = 0; s < (plan.masked() ? S : 1); ++s) {
    const MemStats m = measure(make_subnet_mask(plan, units, s, config.mask.scale == "inverse_keep"));
    std::printf("  subnetwork %-3d             ", s);
    for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(m.peak[c]));
    std::printf(" %12lld  (%.2fx DP)\n", static_cast<long long>(m.total_peak),
                static_cast<double>(m.total_peak) / std::max<int64_t>(1, dp.total_peak));
  }
  std::printf("  plain DP                   ");
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(dp.peak[c]));
  std::printf(" %12lld\n", static_cast<long long>(dp.total_peak));
  if (budget_bytes > 0) std::printf("budget %.0f bytes: DP %s\n", budget_bytes, dp.total_peak <= budget_bytes ? "fits" : "does not fit");
  return 0;
}

}  // namespace subdp
