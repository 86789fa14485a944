// Moving parameters between the local (masked) layout and the full model: assembling one
// copy of every unit on rank 0 (evaluation, checkpoints) and scattering a full model into
// any layout (loading checkpoints). Works on values and on optimizer state.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/comm/communicator.h"
#include "engine/grad_sync.h"
#include "engine/io/safetensors.h"
#include "engine/optimizer.h"
#include "models/model.h"

namespace subdp {

/// Names and full shapes of every tensor of the full model (all ranks agree).
std::vector<FullTensorSpec> full_specs(const ModelConfig& config);

/// Collective: returns on rank 0 (on every rank when to_all) the full model's tensors, each
/// unit taken from the owner of its holder group (lowest rank), dense tensors from rank 0.
/// Empty on other ranks. With an optimizer, also returns its state as "<name>::<k>" tensors
/// (zeros where unheld).
std::vector<NamedTensor> gather_full(Model& model, Optimizer* opt, const GradientSync& sync,
                                     Communicator& world, const std::vector<FullTensorSpec>& specs,
                                     bool to_all = false);

/// Collective: rank 0 holds `full` (read by load_checkpoint_for, which checked names and
/// shapes); every rank copies its slices of each parameter and, when opt is given, of the
/// optimizer state ("<name>::k"). A missing tensor here is an internal error.
void scatter_full(Model& model, Optimizer* opt, Communicator& world, const std::vector<FullTensorSpec>& specs,
                  const std::vector<NamedTensor>& full);

}  // namespace subdp
