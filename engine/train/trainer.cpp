// Training session: construction, the run loop, stop signals, evaluation lines and memory tables.
#include "engine/train/trainer.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <limits>

#include "engine/core/backend.h"
#include "engine/core/hash.h"
#include "engine/io/checkpoint.h"
#include "engine/config/config_diff.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"
#include "engine/train/footprint.h"
#include "engine/io/metrics_file.h"
#include "engine/layers/flops.h"
#include "engine/train/stop_signals.h"
#include "engine/train/trainer_util.h"

namespace subdp {

namespace {

/// Ranks on this host (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 outside mpirun).
int local_ranks() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local ? std::max(1, std::atoi(local)) : 1;
}

int threads_per_rank(int configured) {
  if (configured > 0) return configured;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return std::max<int>(1, static_cast<int>(cores / local_ranks()));
}

/// Refuses a metrics path that names a folder ("runs/", ".", an existing folder): on several
/// ranks the ".rank<r>" suffix would turn it into hidden files inside it, on one rank the
/// folder would be created before the open failed. Checked alike for every world size.
void check_not_a_folder(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(path).filename().string();
  std::error_code ec;
  SUBDP_CHECK(!name.empty() && name != "." && name != ".." && !fs::is_directory(path, ec),
              "log.metrics_file = \"{}\": names a folder, expected a file path (e.g. \"{}\")", path,
              (fs::path(path) / "metrics.jsonl").lexically_normal().string());
}

/// The metrics file of `rank`: every "{rank}" in the pattern replaced, or, without one, the
/// pattern itself at world size 1 and pattern + ".rank<r>" above. Errors: a pattern naming a
/// folder (check_not_a_folder).
std::string metrics_path(const std::string& pattern, int rank, int world) {
  std::string p = pattern;
  bool templated = false;
  for (auto at = p.find("{rank}"); at != std::string::npos; at = p.find("{rank}", at)) {
    p.replace(at, 6, std::to_string(rank));  // every occurrence
    templated = true;
  }
  check_not_a_folder(p);
  if (templated) return p;
  return world > 1 ? p + ".rank" + std::to_string(rank) : p;
}

/// Refuses a metrics file inside a folder of checkpoint.dir (a step-<n> folder, its
/// temporary): checkpoint.keep_last deletes those folders, and the records with them.
void check_outside_checkpoint_folders(const std::string& metrics, const std::string& checkpoint_dir) {
  namespace fs = std::filesystem;
  if (checkpoint_dir.empty()) return;
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(checkpoint_dir, ec);
  const fs::path file = fs::weakly_canonical(metrics, ec);
  if (ec) return;  // unresolvable: the open names the problem
  const fs::path rel = file.lexically_relative(dir);
  // The folder's lock: the open would fail naming this run's own lock as "another run".
  SUBDP_CHECK(rel != "subdp.lock",
              "log.metrics_file = \"{}\" is the lock file of checkpoint.dir = \"{}\" (subdp.lock, which the run "
              "holds); name another file",
              metrics, checkpoint_dir);
  const bool inside_a_folder = !rel.empty() && *rel.begin() != ".." && std::distance(rel.begin(), rel.end()) > 1;
  SUBDP_CHECK(!inside_a_folder,
              "log.metrics_file = \"{}\" is inside a folder of checkpoint.dir = \"{}\", whose checkpoint folders "
              "the run replaces and deletes (checkpoint.keep_last); write the metrics beside them or elsewhere",
              metrics, checkpoint_dir);
}

}  // namespace

Trainer::Trainer(const Config& config, std::unique_ptr<Communicator> world, const TrainOptions& options)
    : config_(config), options_(options), world_(std::move(world)) {
  // First: a preemption during the start-up (data loading, a large resume) is recorded and
  // honoured after the first step (exit 75), instead of killing the run (143) before it.
  install_stop_signals(parse_stop_signals(config_.train.stop_signals));
  set_backend(make_backend(config_.device.type));  // once per run, before any model is built
  backend().configure(threads_per_rank(config_.train.threads), winograd_tile_side(config_.train),
                      config_.device.precision);
  layout_.world = world_->size();
  layout_.rank = world_->rank();
  prints_ = layout_.rank == 0 || world_->simulated();
  layout_.S = config_.parallel.subnetworks;
  SUBDP_CHECK(layout_.world % layout_.S == 0,
              "{}[parallel] subnetworks = {} does not divide the world size W = {}: W must be S x R replicas",
              config_origin(config_), layout_.S, layout_.world);
  units_ = model_units(config_.model);
  plan_ = make_plan(units_, config_.mask, layout_.S);
  check_layout_agreement();
  check_memory_budget();
  prepare_outputs();
  build_local_model();
  data_ = make_data_source(config_, layout_.rank, layout_.world);
  check_data_agreement();
  batch_ = data_->make_batch();
  Config dp = config_;
  dp.parallel.subnetworks = 1;
  dp.mask.regime = MaskRegime::none;
  dp.mask.keep = 1.0;
  dp.train.recompute = Recompute::none;  // plain DP: no memory baseline either
  dp.parallel.shard = Sharding::none;
  dp_footprint_ = predict_rank_memory(dp, layout_.world, layout_.rank);
  specs_ = full_specs(config_.model);
  steps_per_epoch_ = data_->steps_per_epoch();
  total_steps_ = config_.train.epochs > 0 ? config_.train.epochs * steps_per_epoch_ : config_.train.steps;
  base_lr_ = config_.optim.lr * (config_.optim.lr_scaling == LrScaling::linear ? layout_.world : 1);
  if (!config_.checkpoint.resume.empty()) resume();
  if (step_ == 0) report_short_schedule();
  check_checkpoint_room();
  // After resume: the file keeps the steps up to the resumed one, so every step appears once
  // (resumed at the last step, run() evaluates it again: its eval record is written anew).
  if (!config_.log.metrics_file.empty())
    metrics_.open(metrics_path(config_.log.metrics_file, layout_.rank, layout_.world), step_, "log.metrics_file",
                  step_ >= total_steps_ ? step_ - 1 : step_);
}

void Trainer::check_memory_budget() {
  // Every rank measures before any rank allocates (the allgather orders it): no rank's model
  // is counted against another's share of the host.
  std::string error;
  // One dry run serves the budget check and rank 0's start-up table (print_memory_comparison).
  if (!config_.train.allow_overcommit || prints_)
    layout_footprint_ = predict_rank_memory(config_, layout_.world, layout_.rank);
  if (!config_.train.allow_overcommit) {
    const int64_t predicted = layout_footprint_.total_peak;
    std::string where;
    int64_t available = backend().device_free_bytes();
    if (available >= 0) {
      // The CUDA backend's own scratch, grown on demand (per-row losses, column sums, the
      // optimizer's chunk table), is not in the plan: tens of KB to a few hundred.
      constexpr int64_t kUnplannedDeviceBytes = int64_t{1} << 20;
      available = std::max<int64_t>(0, available - kUnplannedDeviceBytes);
      where = "free device memory, less 1 MiB for the CUDA backend's scratch the plan does not count";
    } else {
      available = host_memory_available_bytes(&where);
      const int local = local_ranks();
      if (available >= 0 && local > 1) {
        available /= local;
        where += fmt::format(", shared by {} ranks on this host", local);
      }
    }
    error = memory_fit_error(predicted, available, where);
  }
  stop_on_any_error(world_->allgather(error));
}

void Trainer::prepare_outputs() {
  // Every output is checked, on the ranks that write it, before anything is trained: a
  // read-only folder must not cost a whole run. Rank 0 writes the checkpoints and holds
  // checkpoint.dir's lock for the run.
  std::string error;
  try {
    if (layout_.rank == 0 && !config_.checkpoint.dir.empty()) {
      checkpoint_lock_ = std::make_unique<DirectoryLock>(config_.checkpoint.dir, "checkpoint.dir");
      if (config_.checkpoint.resume.empty()) check_fresh_checkpoint_dir(config_.checkpoint.dir);
    }
    if (!config_.log.metrics_file.empty()) {
      const std::string path = metrics_path(config_.log.metrics_file, layout_.rank, layout_.world);
      check_outside_checkpoint_folders(path, config_.checkpoint.dir);
      check_writable_file(path, "log.metrics_file");
    }
  } catch (const Error& e) {
    error = e.what();
  }
  stop_on_any_error(world_->allgather(error));
}

void Trainer::check_checkpoint_room() {
  // The first save comes checkpoint.every steps on, or at the end of the run: a file system
  // without room for one checkpoint is named now, not after the training the save would end.
  std::string error;
  if (layout_.rank == 0 && !config_.checkpoint.dir.empty() && step_ < total_steps_) {
    const int64_t every = config_.checkpoint.every;
    const int64_t first_save = every > 0 ? std::min(total_steps_, (step_ / every + 1) * every) : total_steps_;
    try {
      check_free_space(config_.checkpoint.dir, first_save, checkpoint_bytes(specs_, optimizer_->num_states()),
                       free_disk_bytes(config_.checkpoint.dir), config_.checkpoint.keep_last);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  stop_on_any_error(world_->allgather(error));
}

void Trainer::stop_on_any_error(const std::vector<std::string>& errors) const {
  for (size_t r = 0; r < errors.size(); ++r)
    SUBDP_CHECK(errors[r].empty(), "{}{}", errors[r], errors.size() > 1 ? fmt::format(" (on rank {})", r) : "");
}

void Trainer::build_local_model() {
  const SubnetMask mask =
      make_subnet_mask(plan_, units_, layout_.subnet(), config_.mask.scale == MaskScale::inverse_keep);
  const Sharding sharding = config_.parallel.shard;
  model_ = make_model(config_.model, mask, config_.train.batch_size, config_.train.seed,
                      config_.train.recompute == Recompute::blocks, param_layout_of(sharding));
  sync_ = std::make_unique<GradientSync>(*world_, layout_, plan_, model_->params().all(), config_.parallel.bucket_mb,
                                         sharding, static_cast<int>(units_.blocks.size()), overlap_mode_of(config_));
  sync_->initialise_shard_values(config_.train.seed);  // FSDP: the shards hold the blocks' values
  optimizer_ =
      make_optimizer(config_.optim, model_->params().trainable(), sync_->sharded() ? &sync_->shard_pieces() : nullptr);
  // ZeRO-2 / FSDP / overlap: the sync's collectives inside the passes, each block's gradients counted first.
  model_->set_block_hooks(sync_->block_hooks());
  if (step_ == 0) report_overlap();
}

void Trainer::report_short_schedule() const {
  const int64_t warmup = config_.optim.warmup_steps;
  if (!prints_ || warmup < total_steps_) return;
  // The warm-up's last rate is base_lr * total / warmup (optimizer.cpp's linear ramp).
  std::fputs(
      fmt::format("subdp: warning: optim.warmup_steps = {} is not shorter than the run ({} steps): the learning "
                  "rate rises to {:.3g} at most and never reaches {:.3g} (optim.lr{})\n",
                  warmup, total_steps_, base_lr_ * static_cast<double>(total_steps_) / static_cast<double>(warmup),
                  base_lr_, config_.optim.lr_scaling == LrScaling::linear ? " x W" : "")
          .c_str(),
      stderr);
}

void Trainer::report_overlap() const {
  const auto [early, total] = sync_->overlapped_messages();
  if (!prints_ || total == 0) return;
  if (early == 0 && units_.blocks.empty())
    std::fputs(fmt::format("subdp: warning: parallel.overlap = true, but model.name = \"{}\" has no residual blocks: "
                           "no all-reduce message can start before the backward pass ends, whatever bucket_mb\n",
                           config_.model.name)
                   .c_str(),
               stderr);
  else if (early == 0)
    std::fprintf(stderr,
                 "subdp: warning: parallel.overlap = true, but no all-reduce message of rank %d can start before the "
                 "backward pass ends: at parallel.bucket_mb = %g each holds parameters outside the blocks (embeddings, "
                 "head); a smaller bucket_mb gives the blocks' gradients messages of their own\n",
                 layout_.rank, config_.parallel.bucket_mb);
  else
    std::printf("overlap: %d of rank %d's %d all-reduce messages start during the backward pass\n", early, layout_.rank,
                total);
}

void Trainer::check_data_agreement() {
  const std::string mine = fmt::format("{} (CRC32 {:08x})", data_->describe(), data_->content_crc32());
  const auto all = world_->allgather(mine);
  for (int r = 1; r < static_cast<int>(all.size()); ++r)
    SUBDP_CHECK(all[r] == all[0],
                "rank {} loaded other data than rank 0 from the same [data] keys: \"{}\" on rank {}, \"{}\" on rank 0; "
                "each rank reads data.path itself, so its files must be the same on every node (a partial or stale "
                "node-local copy?)",
                r, all[r], r, all[0]);
}

void Trainer::check_layout_agreement() {
  // Every rank must run the same config and plan: compare hashes (clear error, no hang), and
  // on a mismatch exchange the config texts to name the first key that differs.
  const std::string text = config_to_toml(config_);
  const std::string mine = fmt::format("{:016x}/{:016x}", mix64(std::hash<std::string>{}(text)), plan_.hash());
  const auto all = world_->allgather(mine);
  int bad = -1;
  for (int r = 0; r < static_cast<int>(all.size()) && bad < 0; ++r)
    if (all[r] != all[0]) bad = r;
  if (bad < 0) return;
  const auto texts = world_->allgather(text);
  const ConfigDifference d = first_config_difference(texts[bad], texts[0]);
  const std::string what = d.key.empty()
                               ? fmt::format("plan (hashes {} vs {})", all[bad].substr(17), all[0].substr(17))
                               : fmt::format("config: {} = {} on rank {}, {} on rank 0", d.key, d.a, bad, d.b);
  throw Error(
      fmt::format("rank {} was started with a different {}; every rank must run the same config file and "
                  "overrides",
                  bad, what));
}

int Trainer::run() {
  if (prints_) {
    std::printf(
        "subdp: %s | world W=%d, subnetworks S=%d, replicas R=%d | device %s %s, backend %s | %d threads/rank\n",
        data_->describe().c_str(), layout_.world, layout_.S, layout_.replicas(), backend().name().c_str(),
        fmt::format("{}", config_.device.precision).c_str(), name_of(world_->kind()),
        threads_per_rank(config_.train.threads));
    std::printf("%s", plan_.describe(units_).c_str());
    if (world_->simulated() && sync_->sharded())
      std::printf(
          "note: --simulate-rank with parallel.shard = \"%s\": the other ranks' shards never arrive, so "
          "losses and accuracies mean nothing; memory and bytes are this rank's\n",
          name_of(config_.parallel.shard));
    print_memory_comparison();
    std::fflush(stdout);
  }
  start_ = Clock::now();
  EvalResult final_eval{std::nan(""), std::nan(""), 0};
  if (step_ >= total_steps_) {  // resumed at the last step: report the loaded model
    final_eval = evaluate_full();
    print_eval(final_eval, plan_.masked() ? evaluate_local() : final_eval);
  }
  while (step_ < total_steps_) {
    const int64_t epoch = step_ / steps_per_epoch_, in_epoch = step_ % steps_per_epoch_;
    train_step(epoch, in_epoch);
    const bool epoch_end = step_ % steps_per_epoch_ == 0;
    const bool eval_now = config_.train.eval_every > 0 ? step_ % config_.train.eval_every == 0 : epoch_end;
    if (eval_now || step_ == total_steps_) {
      settle_updates();
      final_eval = evaluate_full();
      print_eval(final_eval, plan_.masked() ? evaluate_local() : final_eval);
    }
    if (!config_.checkpoint.dir.empty() && config_.checkpoint.every > 0 && step_ % config_.checkpoint.every == 0)
      save(false);
    if (stop_signal_ != 0 && step_ < total_steps_) return stop_for_signal();  // at the last step: finish
  }
  settle_updates();  // the last update's check, before the checkpoint, the dump and the report
  if (!config_.checkpoint.dir.empty() && step_ != last_saved_step_) save(true);
  if (!options_.dump_local_dir.empty()) dump_local_values(options_.dump_local_dir);
  report_final(final_eval);
  // A stop signal at or after the last step (during the final evaluation or save): the run is
  // complete, so it exits 0, but says so, on the rank that received it.
  if (const int late = stop_signal_received(); late != 0) {
    std::fprintf(stderr, "subdp: rank %d received %s at the last step; the run had finished%s (exit status 0)\n",
                 layout_.rank, signal_name(late).c_str(),
                 config_.checkpoint.dir.empty() ? "" : ", its final checkpoint is written");
    std::fflush(stderr);
  }
  return 0;
}

void Trainer::report_final(const EvalResult& final_eval) {
  double peak = static_cast<double>(MemoryTracker::global().stats().total_peak);
  world_->allreduce_max(&peak, 1);
  const double time_s = seconds_since(start_);
  if (metrics_.is_open()) {  // the values of the final line below (train_loss: this rank's last batch)
    nlohmann::json j = {{"event", "final"},
                        {"step", step_},
                        {"train_loss", last_train_loss_},
                        {"test_loss", final_eval.loss},
                        {"test_acc", final_eval.acc},
                        {"peak_bytes", static_cast<int64_t>(peak)},
                        {"time_s", time_s},
                        {"skipped_steps", skipped_total_},
                        {"device", backend().name()},
                        {"precision", fmt::format("{}", config_.device.precision)}};
    if (evaluates_a_rank_share()) j["test_split_share"] = "rank";
    metrics_.write(j);
  }
  if (!prints_) return;
  std::printf("memory: largest per-rank peak %s; plain DP would need %s per rank (%.2fx)\n",
              mib(static_cast<int64_t>(peak)).c_str(), mib(dp_footprint_.total_peak).c_str(),
              peak / std::max<double>(1, dp_footprint_.total_peak));
  if (!std::isfinite(final_eval.loss) && final_eval.positions > 0)
    std::fprintf(stderr, "subdp: warning: the final evaluation's loss is not finite\n");
  std::printf("final step=%lld train_loss=%.6f test_loss=%.6f test_acc=%.6f peak_bytes=%lld time_s=%.2f",
              static_cast<long long>(step_), last_train_loss_, final_eval.loss, final_eval.acc,
              static_cast<long long>(peak), time_s);
  if (skipped_total_ > 0) std::printf(" skipped_steps=%lld", static_cast<long long>(skipped_total_));
  if (evaluates_a_rank_share()) std::printf(" test_split_share=rank");  // 1/W of the test split, or none
  std::printf("\n");
  std::fflush(stdout);
}

int Trainer::stop_for_signal() {
  settle_updates();
  const bool saves = !config_.checkpoint.dir.empty();
  if (saves && step_ != last_saved_step_) save(false);
  if (prints_) {
    if (saves)
      std::printf(
          "stopped by %s at step %lld of %lld: checkpoint in %s; run again with checkpoint.resume = \"auto\" "
          "to continue (exit status %d)\n",
          signal_name(stop_signal_).c_str(), static_cast<long long>(step_), static_cast<long long>(total_steps_),
          config_.checkpoint.dir.c_str(), kExitStopped);
    else
      std::printf("stopped by %s at step %lld of %lld: no checkpoint.dir, nothing saved (exit status %d)\n",
                  signal_name(stop_signal_).c_str(), static_cast<long long>(step_),
                  static_cast<long long>(total_steps_), 128 + stop_signal_);
    std::fflush(stdout);
  }
  return saves ? kExitStopped : 128 + stop_signal_;
}

void Trainer::print_eval(const EvalResult& full, const EvalResult& sub) {
  const bool text = is_token_data(config_.data.name);
  const char* bits_name = config_.data.name == DatasetKind::text ? "bits_per_byte" : "bits_per_token";
  // A share with no examples gives 0/0; print it as "nan", not "-nan".
  auto shown = [](double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; };
  if (metrics_.is_open()) {  // the values of the eval line below (the same on every rank)
    nlohmann::json j = {{"event", "eval"},
                        {"step", step_},
                        {"epoch", static_cast<double>(step_) / steps_per_epoch_},
                        {"test_loss", full.loss},
                        {"test_acc", full.acc}};
    if (text) j[bits_name] = full.loss / std::log(2.0);
    if (plan_.masked()) j["subnetwork_loss"] = shown(sub.loss), j["subnetwork_acc"] = shown(sub.acc);
    if (evaluates_a_rank_share()) j["test_split_share"] = "rank";  // not the whole test split
    metrics_.write(j);
  }
  if (!prints_) return;
  std::printf("eval step %lld epoch %.2f: full model test_loss %.4f test_acc %.4f", static_cast<long long>(step_),
              static_cast<double>(step_) / steps_per_epoch_, full.loss, full.acc);
  if (full.positions == 0 && world_->simulated()) std::printf(" (not evaluated: --simulate-rank runs this rank alone)");
  if (full.positions > 0 && evaluates_a_rank_share())  // the real rank's work: 1/W of the test split
    std::printf(" (on this rank's 1/%d of the test split only: --simulate-rank)", layout_.world);
  // Byte-level text: bits per byte (per token for token shards) = loss in nats / ln 2.
  if (text) std::printf(" %s %.4f", bits_name, full.loss / std::log(2.0));
  if (plan_.masked()) std::printf(" | subnetworks (own share) loss %.4f acc %.4f", shown(sub.loss), shown(sub.acc));
  if (plan_.masked() && sub.positions == 0)  // --simulate-rank: the other ranks' shares are not here
    std::printf(" (this rank's share of the %lld evaluation batches is empty: train.eval_batches < W)",
                static_cast<long long>(config_.train.eval_batches));
  std::printf("\n");
  std::fflush(stdout);
}

void Trainer::print_memory_comparison() {
  // Planned peaks side by side (what `subdp plan` prints, and what the budget check holds
  // against the free memory), then what is allocated before the first step: a device
  // library's workspace (cuBLASLt's) and the passes' transients come later, so that row is
  // not this layout's footprint.
  const auto row = [](const char* label, const int64_t* bytes, int64_t total) {
    std::printf("  %-26s", label);
    for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(bytes[c]));
    std::printf(" %12lld", static_cast<long long>(total));
  };
  const MemStats& planned = layout_footprint_;
  const MemStats& now = MemoryTracker::global().stats();
  std::printf("memory on rank %-3d (bytes)   ", layout_.rank);
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12s", category_name(static_cast<MemCategory>(c)));
  std::printf(" %12s\n", "total");
  row("this layout, planned peak", planned.peak.data(), planned.total_peak);
  std::printf("  (%.2fx DP)\n",
              static_cast<double>(planned.total_peak) / std::max<int64_t>(1, dp_footprint_.total_peak));
  row("plain DP, planned peak", dp_footprint_.peak.data(), dp_footprint_.total_peak);
  std::printf("\n");
  row("allocated before step 1", now.current.data(), now.total_current);
  std::printf("\n");
}

}  // namespace subdp

namespace subdp {

void Trainer::dump_local_values(const std::string& dir) {
  std::vector<NamedTensor> out;
  for (Param* p : model_->params().all()) {
    NamedTensor t{p->name, p->full_shape, std::vector<float>(shape_numel(p->full_shape), std::nanf(""))};
    if (p->shard_value.defined()) {  // FSDP: a block's values live in this rank's shard only
      const HostCopy host(p->shard_value);
      for (const StateRun& r : p->shard_runs)
        for (int64_t i = 0; i < r.len; ++i)
          t.data[full_offset_of_grad(*p, r.grad_off + i)] = host.f32()[r.state_off + i];
      out.push_back(std::move(t));
      continue;
    }
    const HostCopy host(p->value);
    const float* v = host.f32();
    for_each_value_run(
        *p, [&](int64_t lo, int64_t fo, int64_t len) { std::copy(v + lo, v + lo + len, t.data.begin() + fo); });
    out.push_back(std::move(t));
  }
  save_safetensors(dir + "/rank" + std::to_string(layout_.rank) + ".safetensors", out);
}

}  // namespace subdp
