// Sub-commands of the subdp binary, callable from the CLI and from tests.
// Each returns a process exit code and throws subdp::Error on bad input.
#pragma once
#include <string>

#include "engine/config.h"

namespace subdp {

/// Options of `subdp train` that are not part of the config.
struct TrainOptions {
  std::string simulate_rank;  // "w/W": run rank w of a W-rank layout alone (local stand-in comm)
};

/// `subdp train`: trains per config, prints progress and the final summary line.
int run_train(const Config& config, const TrainOptions& options);

/// `subdp plan`: prints the subnetwork plan and predicted per-rank memory.
/// world = 0 means "use the MPI world size or S".
int run_plan(const Config& config, int world, double budget_bytes);

/// `subdp version`: version and compiled-in backends.
int run_version();

}  // namespace subdp
