// Checkpoints: a directory per step holding the full model (safetensors, readable by
// PyTorch users), the optimizer state in the full layout, and a JSON manifest (config,
// plan hash, layout, step, CRC32 of every file). Written under a temporary name and
// renamed, so a crash never leaves a half checkpoint; the last K are kept.
#pragma once
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace subdp {

/// What a checkpoint records besides tensors.
struct CheckpointInfo {
  int64_t step = 0;             // optimizer steps completed
  int64_t optimizer_steps = 0;  // optimizer's own step counter (AdamW bias correction)
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

/// A checkpoint whose files changed after they were written (CRC32 mismatch) or that holds
/// inf / NaN: resume "auto" skips it for an older one. Any other failure to read a complete
/// checkpoint (another format version, a manifest this engine cannot parse) is a plain Error,
/// which stops "auto": such a checkpoint is neither skipped nor overwritten.
class DamagedCheckpoint : public Error {
 public:
  using Error::Error;
};

/// What one run knows of the checkpoints in its folder, for pruning: those it wrote (or
/// read and verified), and those it refused to delete (warned about once).
struct CheckpointLedger {
  std::set<std::string> trusted, refused;
};

/// Writes dir/step-<step>/ atomically and prunes to keep_last (prune_checkpoints). Returns
/// the checkpoint path. Errors, checked before any file is written: a non-finite value in
/// any tensor (named, with its element), so a checkpoint never holds inf or NaN; less free
/// space in dir than the checkpoint's bytes (check_free_space). `ledger` (may be null) gains
/// the new checkpoint. A checkpoint of the same step already in dir is replaced only when this
/// run wrote it or it verifies; otherwise the save fails naming it (never destroyed unread).
std::string save_checkpoint(const std::string& dir, const CheckpointInfo& info, const std::vector<NamedTensor>& model,
                            const std::vector<NamedTensor>& optimizer, int keep_last,
                            CheckpointLedger* ledger = nullptr);

/// Deletes the complete checkpoints of dir older than its newest keep_last, but only those in
/// ledger.trusted or that verify now (this format, every CRC32 right), and never `newest` (the
/// one just written, which a later step's checkpoint in the folder would otherwise outrank);
/// any other is kept, with one warning on stderr naming it and why.
void prune_checkpoints(const std::string& dir, int keep_last, CheckpointLedger& ledger, const std::string& newest);

/// Bytes the safetensors files of a checkpoint of these tensors take (data, headers, manifest).
int64_t checkpoint_bytes(const std::vector<NamedTensor>& model, const std::vector<NamedTensor>& optimizer);
/// The same from the full model's specs before any tensor is gathered: each tensor's values
/// and, for trainable ones, `states` optimizer states (Optimizer::num_states). At least the
/// figure the save computes (state names counted 4 characters longer).
int64_t checkpoint_bytes(const std::vector<FullTensorSpec>& specs, int states);

/// Throws when `free_bytes` (statvfs of dir) is less than `needed` (bytes), naming dir, both
/// figures in MiB, and the room keep_last + 1 checkpoints need (the oldest of the keep_last kept
/// is deleted only once the new one is complete). `step` is the checkpoint's step, for the message.
void check_free_space(const std::string& dir, int64_t step, int64_t needed, int64_t free_bytes, int keep_last);

/// Bytes free to an unprivileged writer in the file system holding `path` (statvfs f_bavail);
/// -1 when it cannot be asked.
int64_t free_disk_bytes(const std::string& path);

/// A fresh run (checkpoint.resume empty) refuses a checkpoint.dir that already holds complete
/// checkpoints (step-N folders): its own would be interleaved with them, keep_last would prune
/// them, and a later resume = "auto" would pick whichever step is highest. The error names dir,
/// the checkpoints and the two ways on (resume = "auto", another folder).
void check_fresh_checkpoint_dir(const std::string& dir);
/// A resume from `resume`, checkpoint `step` inside checkpoint.dir `dir`, refuses when dir holds
/// complete checkpoints of later steps (step-N folders, N > step): the run would overwrite those
/// of its own steps unread and leave the others, from another timeline, for resume = "auto".
/// The error names both paths, the later checkpoints and the ways on.
void check_no_later_checkpoints(const std::string& dir, const std::string& resume, int64_t step);

/// A checkpoint read by newest_checkpoint while it looked for an intact one.
struct LoadedCheckpoint {
  bool loaded = false;
  CheckpointInfo info;
  std::vector<NamedTensor> model, optimizer;
};

/// The newest complete checkpoint in dir (checkpoint.resume = "auto"), damaged ones skipped
/// with a warning on stderr. Returns "" when there is none; throws when dir holds checkpoints
/// but every one is damaged (a fresh start would overwrite them), and when a checkpoint it
/// meets cannot be read for another reason (another format version, an unparsable manifest:
/// see DamagedCheckpoint), naming it. With `loaded`, it hands over the checkpoint it read and
/// verified, so that it is not read twice. The errors speak of checkpoint.resume = "auto"
/// unless `for_resume` is false (`sample` given a checkpoint.dir).
std::string newest_checkpoint(const std::string& dir, LoadedCheckpoint* loaded = nullptr, bool for_resume = true);

/// Reads and verifies a checkpoint (manifest, CRCs of every file, every value read finite).
/// read_optimizer = false leaves `optimizer` empty: the optimizer file is neither read nor
/// CRC-checked, and may be absent (weights-only loads: sample). Errors name the file.
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
void check_checkpoint_tensors(const std::string& path, const std::vector<FullTensorSpec>& specs, int optimizer_states,
                              OptimizerLoad policy, const std::vector<NamedTensor>& model,
                              std::vector<NamedTensor>& optimizer);

/// Throws when t holds inf or NaN, naming `file`, the tensor and the first such element.
void check_finite(const std::string& file, const NamedTensor& t);

}  // namespace subdp
