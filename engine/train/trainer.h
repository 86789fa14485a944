// The training session of one rank: layout, plan, local model, optimizer, gradient
// averaging, data, evaluation, metrics and checkpoints (design brief, "One training step").
#pragma once
#include <cmath>
#include <chrono>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/train/assemble.h"
#include "engine/io/checkpoint.h"
#include "engine/comm/communicator.h"
#include "engine/data/data_source.h"
#include "engine/parallel/grad_sync.h"
#include "engine/io/dir_lock.h"
#include "engine/io/metrics_file.h"
#include "engine/optim/optimizer.h"

namespace subdp {

/// Options of `subdp train` that are not part of the config.
struct TrainOptions {
  std::string simulate_rank;  // "w/W": run rank w of a W-rank layout alone (local stand-in comm)
  /// Test hook (invariant 5, environment SUBDP_DUMP_LOCAL): after the run each rank writes
  /// its values in the full layout, NaN where it holds none, to <dir>/rank<r>.safetensors.
  std::string dump_local_dir;
};

/// Evaluation result: mean loss (nats per target position) and accuracy (fraction).
struct EvalResult {
  double loss = 0, acc = 0;
  int64_t positions = 0;
};

class Trainer {
 public:
  /// Builds everything; collective over `world`. Errors name the config key.
  Trainer(const Config& config, std::unique_ptr<Communicator> world, const TrainOptions& options);
  /// Runs the configured number of steps; prints progress and the final summary line.
  /// Returns the process's exit status: 0 when the run finished (a stop signal at the last
  /// step included), kExitStopped (75) when a stop signal ended it early with a checkpoint
  /// written, 128 + the signal's number when there was no checkpoint.dir to write to.
  /// Errors (bad data, non-finite values, lost ranks) are thrown as Error.
  int run();

 private:
  /// Builds model_, sync_ and optimizer_ for plan_ (collective: holder-group communicators).
  void build_local_model();
  /// parallel.overlap: how many all-reduce messages start during the backward pass (rank 0), or
  /// a warning when none can.
  void report_overlap() const;
  /// A warning (rank 0, before step 1) when optim.warmup_steps is not shorter than the run: the
  /// learning rate would never reach optim.lr.
  void report_short_schedule() const;
  /// Frees model_, sync_ and optimizer_, then builds them for `plan` (collective): the device
  /// never holds two models. The optimizer starts at step 0 with zero state.
  void replace_plan(SubnetworkPlan plan);
  /// The plan of deal d (mask.redeal_every): the configured plan with seed mask.seed + d.
  SubnetworkPlan plan_of_deal(int64_t deal) const;
  /// Collective: moves every slice and its optimizer state to its holders under the plan of
  /// `deal`; the old model is freed before the new one is built (trainer_redeal.cpp).
  void redeal(int64_t deal);
  /// Collective: every rank loaded the same data (its description and content CRC32), else
  /// throws on every rank naming the first rank that differs and both descriptions.
  void check_data_agreement();
  void check_layout_agreement();
  /// Collective, before the model is built: refuses (every rank, with both figures) when the
  /// plan's bytes for a rank exceed the memory available to it, unless train.allow_overcommit.
  void check_memory_budget();
  /// Collective, before the first step: locks checkpoint.dir (rank 0) and checks that every
  /// output path can be created and written on the ranks that write it; errors name the key.
  void prepare_outputs();
  /// Throws the first non-empty message of an allgather (naming its rank when W > 1).
  void stop_on_any_error(const std::vector<std::string>& errors) const;
  /// Bytes this rank moved in one step: all-reduce payload (reduce-scatter and all-gather
  /// count half each) and owner-broadcast payload (backward masking).
  struct StepTraffic {
    int64_t allreduced = 0, broadcast = 0;
  };
  /// What one step measured: its phases fill it, record() writes it.
  struct StepFigures {
    double loss = 0;      // mean cross-entropy of this rank's batch (nats)
    int64_t correct = 0;  // target positions whose argmax is the target
    int64_t flops = 0;    // forward and backward FLOPs (engine/layers/flops.h)
    double lr = 0;        // learning rate of the update
    double comm_s = 0;    // seconds in collectives (inside the backward pass included)
    double step_s = 0;    // seconds of the whole step
    StepTraffic bytes;
    // Seconds of each phase where the work runs (Backend::timestamp): this step's up to its
    // one synchronisation, and the previous step's after it (readable only now); -1: none.
    double prepare_s = -1, forward_s = -1, backward_s = -1;
    double previous_check_s = -1, previous_reduce_s = -1, previous_update_s = -1, previous_publish_s = -1;
  };
  /// Backend timestamps at the ends of a step's phases (-1: not taken); `begin` opens it.
  struct PhaseStamps {
    int64_t begin = -1, prepared = -1, forwarded = -1, backwarded = -1, checked = -1, reduced = -1, updated = -1,
            published = -1;
  };
  /// After the step's synchronisation: this step's phases up to it and the previous step's
  /// after its own, into f (Backend::seconds_between).
  void read_phase_times(StepFigures& f) const;
  /// One optimizer step, as named phases in order: prepare_step, forward_backward,
  /// skip_if_nonfinite, reduce, clip_gradients, update, publish, record.
  void train_step(int64_t epoch, int64_t step_in_epoch);
  /// Re-deals the plan when due, loads the batch, draws stochastic-depth drops, zeroes the
  /// gradients and the step's counters.
  void prepare_step(int64_t epoch, int64_t step_in_epoch);
  /// Forward and backward on this rank's batch (ZeRO-2 / FSDP: the block collectives run
  /// inside, through the model's block hooks); the loss stays in the backend's counters.
  void forward_backward(StepFigures& f);
  /// The step's one read of the backend's counters (the loss, the gradient check, the
  /// previous update's non-finite writes), then collective: agrees on non-finite values and
  /// stop signals across ranks. True when the step is skipped (train.nonfinite = "skip");
  /// throws when it must stop.
  bool skip_if_nonfinite(StepFigures& f);
  /// Averages gradients over their holders (GradientSync::average).
  void reduce(StepFigures& f);
  /// The optimizer update at this step's learning rate. Its count of non-finite writes stays
  /// in the backend's counters: the next step reads it with its own, or settle_updates() does
  /// before anything else reads the weights.
  void update(StepFigures& f);
  /// Sends the updated values to the ranks that need them: ZeRO's all-gather, backward
  /// masking's owner broadcasts.
  void publish(StepFigures& f);
  /// After a step in which some rank received a stop signal (every rank agrees through the
  /// step's flag all-reduce): checkpoints (when checkpoint.dir is set), prints one line and
  /// returns the exit status (kExitStopped, or 128 + the signal without a checkpoint.dir).
  int stop_for_signal();
  /// Stochastic depth: this step's dropped blocks, passed to the model.
  void draw_dropped_blocks();
  /// This rank's gradients that the step's counters check (ZeRO-2, FSDP, overlap: those
  /// outside blocks; the blocks' were checked by the sync's block hooks).
  std::vector<Param*> unchecked_gradients();
  /// After the step's counters found a non-finite gradient: names the first tensor holding
  /// one on this rank on stderr (rank, tensor, 1-based step), searching (ZeRO-2 / FSDP) the
  /// shard pieces the blocks' gradients were reduced into, then the gradients in the backward
  /// pass's order. A read-back per tensor: only after a fault.
  void name_nonfinite_gradient() const;
  /// Collective: when no step has read the last update's count of non-finite writes yet,
  /// reads it and stops every rank on a fault. Called before anything outside a training step
  /// reads the weights (evaluation, checkpoints, alignment, re-dealing, the run's end).
  void settle_updates();
  /// Collective, once the ranks agreed that an update at 1-based step `step` wrote a
  /// non-finite value (`mine`: on this rank): names the tensor on each such rank and stops
  /// every rank.
  [[noreturn]] void report_nonfinite_update(int64_t step, bool mine);
  void clip_gradients();
  EvalResult evaluate_full();
  /// Collective: eval_model_ (created on first use, untracked) receives the assembled full model.
  void assemble_eval_model();
  /// Collective (log.alignment_every): cosine of this rank's subnetwork gradient against the
  /// full model's on the same fixed batch (this rank's first training batch), per unit kind.
  /// Training is unchanged: the model's BatchNorm running statistics are restored.
  nlohmann::json measure_alignment();
  EvalResult evaluate_local();
  /// Re-estimates BatchNorm running statistics of `model` on training batches (masked runs):
  /// kRecalibrationBatches of this rank's own, or split over the world (across_world).
  void recalibrate_batchnorm(Model& model, bool across_world);
  static constexpr int kRecalibrationBatches = 32;
  /// Loss and accuracy of `model` on test share share_rank of `shares` (no communication, but
  /// for FSDP's gathers). `forwards`: at least this many forward passes; those beyond the
  /// share's batches run on share 0's first batch and are not counted (FSDP: equal collectives).
  EvalResult evaluate(Model& model, int share_rank, int shares, int64_t forwards = 0);
  /// Collective: every rank evaluates its share of the test split; all-reduced totals.
  EvalResult evaluate_shares(Model& model);
  /// Writes the step's metrics line and, every log.every steps, the progress line.
  void record(const StepFigures& f);
  void save(bool final);
  /// Seconds the other ranks may wait past parallel.collective_timeout_s while rank 0 writes or
  /// reads a checkpoint: its bytes (checkpoint_bytes) at a slow file system's 10 MB/s. Only
  /// bounds how late a rank 0 stuck in its I/O is noticed.
  double checkpoint_io_allowance_s() const;
  /// What rank 0 read for a resume: the full model, its optimizer state, the manifest, and
  /// whether the checkpoint is checkpoint.dir's own (a save at its step would rewrite it).
  struct ResumeSource {
    std::vector<NamedTensor> full, opt;
    CheckpointInfo info;
    bool in_own_dir = false;
  };
  /// Rank 0 of resume(): finds, reads and checks the checkpoint that checkpoint.resume names.
  ResumeSource read_resume_source(OptimizerLoad policy);
  /// Collective: loads the checkpoint (read on rank 0) into every rank's layout.
  void resume();
  void print_memory_comparison();
  /// Before step 1 (rank 0): throws on every rank when checkpoint.dir's file system has no
  /// room for one checkpoint (check_free_space), instead of at the first save.
  void check_checkpoint_room();
  /// The eval line (rank 0) and the metrics file's eval record (every rank that writes one).
  void print_eval(const EvalResult& full, const EvalResult& subnetworks);
  /// Collective (the largest peak): the final record in the metrics file and the memory and
  /// final lines.
  void report_final(const EvalResult& final_eval);
  void dump_local_values(const std::string& dir);

  Config config_;
  TrainOptions options_;
  std::unique_ptr<Communicator> world_;
  Layout layout_;
  ModelUnits units_;
  SubnetworkPlan plan_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> eval_model_;  // assembled full model for evaluation (untracked)
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<DataSource> data_;
  Batch batch_;
  std::vector<FullTensorSpec> specs_;
  MetricsFile metrics_;
  std::unique_ptr<DirectoryLock> checkpoint_lock_;  // rank 0 with checkpoint.dir: held for the run
  CheckpointLedger checkpoints_;                    // rank 0: what keep_last may delete
  MemStats dp_footprint_;
  MemStats layout_footprint_;  // this rank's planned bytes (check_memory_budget), when checked or printed
  int64_t step_ = 0, total_steps_ = 0, steps_per_epoch_ = 0;
  int64_t last_saved_step_ = -1;
  int64_t skipped_in_a_row_ = 0;  // consecutive steps skipped for non-finite values
  bool updates_unread_ = false;   // the last update's non-finite writes are still in the counters
  int64_t skipped_total_ = 0;     // steps this run skipped (train.nonfinite = "skip")
  /// --simulate-rank r/W with W > 1: the evaluation covers this rank's 1/W of the test split.
  bool evaluates_a_rank_share() const { return world_->simulated() && layout_.world > 1; }
  bool prints_ = false;  // rank 0, or the simulated rank, prints progress
  double base_lr_ = 0;
  double window_loss_ = 0, window_acc_ = 0;
  int64_t window_n_ = 0, window_examples_ = 0;
  double window_time_ = 0;
  PhaseStamps stamps_, previous_stamps_;   // this step's and the previous step's phase boundaries
  nlohmann::json pending_alignment_;       // measured this step, written with its metrics line
  nlohmann::json pending_redeal_;          // a re-deal before this step: written with its metrics line
  int stop_signal_ = 0;                    // a stop signal every rank has agreed on (0: none)
  int64_t deal_ = 0;                       // the plan in use is that of deal deal_ (mask.redeal_every)
  double last_train_loss_ = std::nan("");  // NaN until a step runs (a resume at the last step runs none)
  std::chrono::steady_clock::time_point start_;
};

}  // namespace subdp
