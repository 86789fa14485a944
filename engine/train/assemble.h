// Moving parameters between the local (masked) layout and the full model: assembling one
// copy of every unit on rank 0 (evaluation, checkpoints) and scattering a full model into
// any layout (loading checkpoints). Works on values and on optimizer state.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/comm/communicator.h"
#include "engine/parallel/grad_sync.h"
#include "engine/io/safetensors.h"
#include "engine/optim/optimizer.h"
#include "models/model.h"

namespace subdp {

/// Names and full shapes of every tensor of the full model (all ranks agree).
std::vector<FullTensorSpec> full_specs(const ModelConfig& config);

/// Collective: returns on rank 0 (on every rank when to_all) the full model's tensors, each
/// unit taken from the owner of its holder group (lowest rank), dense tensors from rank 0.
/// Empty on other ranks. With an optimizer, also returns its state as "<name>::<k>" tensors
/// (zeros where unheld).
std::vector<NamedTensor> gather_full(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                                     const std::vector<FullTensorSpec>& specs, bool to_all = false);

/// Collective: rank 0 holds `full` (read by load_checkpoint_for, which checked names and
/// shapes); every rank copies its slices of each parameter and, when opt is given, of the
/// optimizer state ("<name>::k"). A missing tensor here is an internal error.
void scatter_full(Model& model, Optimizer* opt, Communicator& world, const std::vector<FullTensorSpec>& specs,
                  const std::vector<NamedTensor>& full);

/// One rank's share of the full model, in host memory: for each tensor of `specs` and each
/// optimizer state of it (values first, then states 0..n-1), the runs of elements that this
/// rank owns, the ones gather_full takes from it (each element is owned by exactly one rank).
struct OwnedSlices {
  struct Runs {
    std::vector<int64_t> full_off, len;  // full-model flat offsets and lengths, in elements
    std::vector<float> values;           // the runs' elements, one after another
  };
  std::vector<Runs> tensors;
  /// Host bytes held (values and offsets).
  int64_t bytes() const;
  /// Order-free checksum of (tensor, full offset, value bits) over the elements held; summed
  /// (mod 2^64) over every rank it covers the whole model and optimizer state once.
  uint64_t checksum() const;
};

/// Copies this rank's owned elements of `model` and `opt` to the host (no communication).
OwnedSlices copy_owned_slices(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                              const std::vector<FullTensorSpec>& specs);

/// The checksum OwnedSlices::checksum would give for copy_owned_slices(...), without the copy.
uint64_t owned_checksum(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                        const std::vector<FullTensorSpec>& specs);

/// Collective: fills every slice that `model` (and `opt`) stores from the owners' `slices`,
/// taken under any plan of the same model and optimizer. Each tensor moves in windows of at
/// most window_values float32 elements (a reduce to rank 0 and a broadcast, host buffers), so
/// the transient memory is one window. Exact bit for bit: the non-owners contribute -0.0.
/// Returns the payload bytes this rank sent and received (2 x 4 bytes per element).
int64_t scatter_owned_slices(Model& model, Optimizer* opt, Communicator& world,
                             const std::vector<FullTensorSpec>& specs, const OwnedSlices& slices,
                             int64_t window_values);

}  // namespace subdp
