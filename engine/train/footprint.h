// Per-rank memory prediction: runs the trainer's own constructors (model, optimizer,
// gradient buckets, batch) in the tracker's dry-run mode with a simulated communicator,
// so predictions come from the same shape arithmetic the engine allocates with.
#pragma once
#include "engine/config/config.h"
#include "engine/core/memory.h"
#include "engine/parallel/overlap.h"
#include "models/model.h"

namespace subdp {

/// How the trainer overlaps the holder all-reduces (parallel.overlap): a communication thread
/// on the CPU, deferred collectives on a CUDA device, or off.
OverlapMode overlap_mode_of(const Config& config);

/// Bytes by category that rank `rank` of a `world`-rank run of `config` allocates.
/// Errors as the trainer's (layout, plan, model).
MemStats predict_rank_memory(const Config& config, int world, int rank);

}  // namespace subdp
