// Checkpoints: a directory per step holding the full model (safetensors, readable by
// PyTorch users), the optimizer state in the full layout, and a JSON manifest (config,
// plan hash, layout, step, CRC32 of every file). Written under a temporary name and
// renamed, so a crash never leaves a half checkpoint; the last K are kept.
#pragma once
#include <limits>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace subdp {

/// What a checkpoint records besides tensors.
struct CheckpointInfo {
  int64_t step = 0;            // optimizer steps completed
  int64_t optimizer_steps = 0; // optimizer's own step counter (AdamW bias correction)
  std::string config_toml;
  std::string model_name;
  uint64_t plan_hash = 0;
  int world = 1, subnetworks = 1;
  double train_loss = std::numeric_limits<double>::quiet_NaN();  // rank 0's last training-batch loss
};

/// Name, full shape and kind of one tensor of the full model (every rank agrees).
struct FullTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool trainable = true;  // false: buffer (no optimizer state)
};

/// What to do with the optimizer state of a checkpoint loaded into a model.
enum class OptimizerLoad {
  ignore,   // weights only (sample): optimizer tensors neither read nor checked (CRC only)
  require,  // every "<name>::k" of every trainable tensor, k < states, and nothing else
  reset,    // checkpoint.reset_optimizer = true: weights only, the optimizer starts from zero
};

/// Writes dir/step-<step>/ atomically and prunes to keep_last. Returns the checkpoint path.
/// Errors: a non-finite value in any tensor (named, with its element), checked before any
/// file is written, so a checkpoint never holds inf or NaN.
std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info,
                            const std::vector<NamedTensor>& model, const std::vector<NamedTensor>& optimizer,
                            int keep_last);

/// A checkpoint read by resolve_checkpoint while it looked for an intact one.
struct LoadedCheckpoint {
  bool loaded = false;
  CheckpointInfo info;
  std::vector<NamedTensor> model, optimizer;
};

/// Resolves `resume` ("auto" = newest complete checkpoint in dir, damaged ones skipped with a
/// warning on stderr; otherwise a checkpoint directory). Returns "" when auto finds none;
/// throws when dir holds checkpoints but every one is damaged (a fresh start would overwrite them).
/// With `loaded`, "auto" hands over the checkpoint it read and verified, so that it is not read
/// twice (loaded->loaded stays false for a path, which is not read here).
std::string resolve_checkpoint(const std::string& resume, const std::string& dir, LoadedCheckpoint* loaded = nullptr);

/// Reads and verifies a checkpoint (manifest, CRCs of every file, every value read finite).
/// read_optimizer = false leaves `optimizer` empty: the optimizer file is CRC-checked but
/// neither read nor checked for inf / NaN (weights-only loads). Errors name the file.
void load_checkpoint(const std::string& path, CheckpointInfo& info, std::vector<NamedTensor>& model,
                     std::vector<NamedTensor>& optimizer, bool read_optimizer = true);

/// The loader of resume: load_checkpoint, then the checkpoint is checked
/// against the model it goes into: its model name (model_name), then its tensors
/// (check_checkpoint_tensors). optimizer_states = state tensors per trainable parameter of
/// the run's optimizer.
void load_checkpoint_for(const std::string& path, const std::string& model_name,
                         const std::vector<FullTensorSpec>& specs, int optimizer_states, OptimizerLoad policy,
                         CheckpointInfo& info, std::vector<NamedTensor>& model, std::vector<NamedTensor>& optimizer);

/// The checks of load_checkpoint_for on a checkpoint already read (with the optimizer state
/// when policy is require): model name, then check_checkpoint_tensors.
void check_checkpoint_for(const std::string& path, const std::string& model_name,
                          const std::vector<FullTensorSpec>& specs, int optimizer_states, OptimizerLoad policy,
                          const CheckpointInfo& info, const std::vector<NamedTensor>& model,
                          std::vector<NamedTensor>& optimizer);

/// Checks checkpoint tensors against the model's specs: every spec present with its shape
/// and no other tensor; with OptimizerLoad::require, "<name>::k" for every trainable spec
/// and k < optimizer_states, with its shape, and no other. Errors name the file, the tensor
/// and both shapes. OptimizerLoad::reset and ignore empty `optimizer`. Resume (through
/// load_checkpoint_for) and sample both check with it, so they accept the same checkpoints.
void check_checkpoint_tensors(const std::string& path, const std::vector<FullTensorSpec>& specs,
                              int optimizer_states, OptimizerLoad policy, const std::vector<NamedTensor>& model,
                              std::vector<NamedTensor>& optimizer);

/// Throws when t holds inf or NaN, naming `file`, the tensor and the first such element.
void check_finite(const std::string& file, const NamedTensor& t);

}  // namespace subdp
