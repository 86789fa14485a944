// Checkpoints: a directory per step holding the full model (safetensors, readable by
// PyTorch users), the optimizer state in the full layout, and a JSON manifest (config,
// plan hash, layout, step, CRC32 of every file). Written under a temporary name and
// renamed, so a crash never leaves a half checkpoint; the last K are kept.
#pragma once
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
};

/// Writes dir/step-<step>/ atomically and prunes to keep_last. Returns the checkpoint path.
std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info,
                            const std::vector<NamedTensor>& model, const std::vector<NamedTensor>& optimizer,
                            int keep_last);

/// Resolves `resume` ("auto" = newest complete checkpoint in dir, damaged ones skipped with a
/// warning on stderr; otherwise a checkpoint directory). Returns "" when auto finds none.
std::string resolve_checkpoint(const std::string& resume, const std::string& dir);

/// Reads and verifies a checkpoint (manifest, CRCs). Errors name the file.
void load_checkpoint(const std::string& path, CheckpointInfo& info, std::vector<NamedTensor>& model,
                     std::vector<NamedTensor>& optimizer);

}  // namespace subdp
