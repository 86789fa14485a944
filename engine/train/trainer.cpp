// Training session: construction, the step, evaluation and logging.
#include "engine/train/trainer.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <iostream>
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

namespace subdp {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

std::string metrics_path(const std::string& pattern, int rank, int world) {
  std::string p = pattern;
  const auto at = p.find("{rank}");
  if (at != std::string::npos) return p.replace(at, 6, std::to_string(rank));
  return world > 1 ? p + ".rank" + std::to_string(rank) : p;
}

nlohmann::json memory_json(const std::array<int64_t, kNumMemCategories>& bytes) {
  nlohmann::json j;
  for (int c = 0; c < kNumMemCategories; ++c) j[category_name(static_cast<MemCategory>(c))] = bytes[c];
  return j;
}

}  // namespace

Trainer::Trainer(const Config& config, std::unique_ptr<Communicator> world, const TrainOptions& options)
    : config_(config), options_(options), world_(std::move(world)) {
  set_backend(make_backend(config_.device.type));  // once per run, before any model is built
  backend().configure(threads_per_rank(config_.train.threads), winograd_tile_side(config_.train));
  layout_.world = world_->size();
  layout_.rank = world_->rank();
  prints_ = layout_.rank == 0 || world_->backend() == "simulated";
  layout_.S = config_.parallel.subnetworks;
  SUBDP_CHECK(layout_.world % layout_.S == 0,
              "parallel.subnetworks = {} does not divide the world size W = {}: W must be S x R replicas",
              layout_.S, layout_.world);
  units_ = model_units(config_.model);
  plan_ = make_plan(units_, config_.mask, layout_.S);
  check_layout_agreement();
  check_memory_budget();
  prepare_outputs();
  build_local_model();
  data_ = make_data_source(config_, layout_.rank, layout_.world);
  batch_ = data_->make_batch();
  Config dp = config_;
  dp.parallel.subnetworks = 1;
  dp.mask.regime = "none";
  dp.mask.keep = 1.0;
  dp.train.recompute = "none";  // plain DP: no memory baseline either
  dp.parallel.shard = "none";
  dp_footprint_ = predict_rank_memory(dp, layout_.world, layout_.rank);
  specs_ = full_specs(config_.model);
  steps_per_epoch_ = data_->steps_per_epoch();
  total_steps_ = config_.train.epochs > 0 ? config_.train.epochs * steps_per_epoch_ : config_.train.steps;
  base_lr_ = config_.optim.lr * (config_.optim.lr_scaling == "linear" ? layout_.world : 1);
  if (!config_.checkpoint.resume.empty()) resume();
  // After resume: the file keeps the steps up to the resumed one, so every step appears once.
  if (!config_.log.metrics_file.empty())
    metrics_.open(metrics_path(config_.log.metrics_file, layout_.rank, layout_.world), step_, "log.metrics_file");
  install_stop_signals(parse_stop_signals(config_.train.stop_signals));
}

void Trainer::check_memory_budget() {
  // Every rank measures before any rank allocates (the allgather orders it): no rank's model
  // is counted against another's share of the host.
  std::string error;
  if (!config_.train.allow_overcommit) {
    const int64_t predicted = predict_rank_memory(config_, layout_.world, layout_.rank).total_peak;
    std::string where;
    int64_t available = backend().device_free_bytes();
    if (available >= 0) {
      where = "free device memory";
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
    if (layout_.rank == 0 && !config_.checkpoint.dir.empty())
      checkpoint_lock_ = std::make_unique<DirectoryLock>(config_.checkpoint.dir, "checkpoint.dir");
    if (!config_.log.metrics_file.empty())
      check_writable_file(metrics_path(config_.log.metrics_file, layout_.rank, layout_.world), "log.metrics_file");
  } catch (const Error& e) {
    error = e.what();
  }
  stop_on_any_error(world_->allgather(error));
}

void Trainer::stop_on_any_error(const std::vector<std::string>& errors) const {
  for (size_t r = 0; r < errors.size(); ++r)
    SUBDP_CHECK(errors[r].empty(), "{}{}", errors[r], errors.size() > 1 ? fmt::format(" (on rank {})", r) : "");
}

void Trainer::build_local_model() {
  const SubnetMask mask = make_subnet_mask(plan_, units_, layout_.subnet(), config_.mask.scale == "inverse_keep");
  const Sharding sharding = sharding_of(config_.parallel.shard);
  model_ = make_model(config_.model, mask, config_.train.batch_size, config_.train.seed,
                      config_.train.recompute == "blocks", param_layout_of(sharding));
  sync_ = std::make_unique<GradientSync>(*world_, layout_, plan_, model_->params().all(), config_.parallel.bucket_mb,
                                         sharding, static_cast<int>(units_.blocks.size()));
  sync_->initialise_shard_values(config_.train.seed);  // FSDP: the shards hold the blocks' values
  optimizer_ = make_optimizer(config_.optim, model_->params().trainable(),
                              sync_->sharded() ? &sync_->shard_pieces() : nullptr);
  block_params_.clear();
  if (!sync_->shards_blocks()) return;
  for (Param* p : model_->params().trainable()) {
    if (!p->grad.defined() || p->block < 0) continue;
    if (static_cast<int>(block_params_.size()) <= p->block) block_params_.resize(p->block + 1);
    block_params_[p->block].push_back(p);
  }
  BlockHooks hooks;
  hooks.after_backward = [this](int b) { reduce_block_gradients(b); };
  if (sharding == Sharding::parameters) hooks.before_forward = hooks.before_backward = [this](int b) { gather_block(b); };
  model_->set_block_hooks(std::move(hooks));
}

void Trainer::gather_block(int b) {
  const auto t = Clock::now();
  sync_->gather_block(b);
  hook_comm_s_ += seconds_since(t);
}

void Trainer::reduce_block_gradients(int b) {
  static const std::vector<Param*> none;
  const auto& params = b < static_cast<int>(block_params_.size()) ? block_params_[b] : none;
  // Reduced all the same when not finite: every holder takes part in the collective.
  for (Param* p : params)
    if (blocks_finite_ && !gradient_finite(*p)) blocks_finite_ = false;
  const auto t = Clock::now();
  sync_->reduce_block(b);
  hook_comm_s_ += seconds_since(t);
  for (Param* p : params) p->grad.zero_();
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
  const std::string what = d.key.empty() ? fmt::format("plan (hashes {} vs {})", all[bad].substr(17), all[0].substr(17))
                                         : fmt::format("config: {} = {} on rank {}, {} on rank 0", d.key, d.a, bad, d.b);
  throw Error(fmt::format("rank {} was started with a different {}; every rank must run the same config file and "
                          "overrides", bad, what));
}

int Trainer::run() {
  if (prints_) {
    std::printf("subdp: %s | world W=%d, subnetworks S=%d, replicas R=%d | device %s, backend %s | %d threads/rank\n",
                data_->describe().c_str(), layout_.world, layout_.S, layout_.replicas(), backend().name().c_str(),
                world_->backend().c_str(), threads_per_rank(config_.train.threads));
    std::printf("%s", plan_.describe(units_).c_str());
    if (world_->backend() == "simulated" && sync_->sharded())
      std::printf("note: --simulate-rank with parallel.shard = \"%s\": the other ranks' shards never arrive, so "
                  "losses and accuracies mean nothing; memory and bytes are this rank's\n",
                  config_.parallel.shard.c_str());
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
      final_eval = evaluate_full();
      print_eval(final_eval, plan_.masked() ? evaluate_local() : final_eval);
    }
    if (!config_.checkpoint.dir.empty() && config_.checkpoint.every > 0 && step_ % config_.checkpoint.every == 0)
      save(false);
    if (stop_signal_ != 0 && step_ < total_steps_) return stop_for_signal();  // at the last step: finish
  }
  if (!config_.checkpoint.dir.empty() && step_ != last_saved_step_) save(true);
  // Test hook (invariant 5): each rank writes its values in the full layout, NaN where unheld.
  if (const char* dir = std::getenv("SUBDP_DUMP_LOCAL")) dump_local_values(dir);
  double peak = static_cast<double>(MemoryTracker::global().stats().total_peak);
  world_->allreduce_max(&peak, 1);
  if (prints_) {
    std::printf("memory: largest per-rank peak %s; plain DP would need %s per rank (%.2fx)\n",
                mib(static_cast<int64_t>(peak)).c_str(), mib(dp_footprint_.total_peak).c_str(),
                peak / std::max<double>(1, dp_footprint_.total_peak));
    if (!std::isfinite(final_eval.loss) && final_eval.positions > 0)
      std::fprintf(stderr, "subdp: warning: the final evaluation's loss is not finite\n");
    std::printf("final step=%lld train_loss=%.6f test_loss=%.6f test_acc=%.6f peak_bytes=%lld time_s=%.2f",
                static_cast<long long>(step_), last_train_loss_, final_eval.loss, final_eval.acc,
                static_cast<long long>(peak), seconds_since(start_));
    if (skipped_total_ > 0) std::printf(" skipped_steps=%lld", static_cast<long long>(skipped_total_));
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

int Trainer::stop_for_signal() {
  const bool saves = !config_.checkpoint.dir.empty();
  if (saves && step_ != last_saved_step_) save(false);
  if (prints_) {
    if (saves)
      std::printf("stopped by %s at step %lld of %lld: checkpoint in %s; run again with checkpoint.resume = \"auto\" "
                  "to continue (exit status %d)\n", signal_name(stop_signal_).c_str(), static_cast<long long>(step_),
                  static_cast<long long>(total_steps_), config_.checkpoint.dir.c_str(), kExitStopped);
    else
      std::printf("stopped by %s at step %lld of %lld: no checkpoint.dir, nothing saved (exit status %d)\n",
                  signal_name(stop_signal_).c_str(), static_cast<long long>(step_),
                  static_cast<long long>(total_steps_), 128 + stop_signal_);
    std::fflush(stdout);
  }
  return saves ? kExitStopped : 128 + stop_signal_;
}

void Trainer::train_step(int64_t epoch, int64_t in_epoch) {
  const auto t0 = Clock::now();
  if (const int64_t k = config_.mask.redeal_every; k > 0 && step_ / k != deal_) redeal(step_ / k);
  data_->train_batch(epoch, in_epoch, batch_);
  if (config_.mask.regime == "stochastic") draw_dropped_blocks();
  model_->zero_grad();
  sync_->take_bytes();  // ZeRO-2 sends inside the backward pass: count from here
  sync_->take_broadcast_bytes();
  blocks_finite_ = true;
  hook_comm_s_ = 0;
  FlopCounter::take();
  int64_t correct = 0;
  const double loss = model_->forward(batch_, true, &correct);
  model_->backward();
  const int64_t flops = FlopCounter::take();
  const bool finite = gradients_finite() && std::isfinite(loss);
  // One all-reduce carries both flags: a non-finite value anywhere, and a stop signal on any
  // rank (every rank then finishes this step and stops after it, at the same step).
  double flags[2] = {finite ? 0.0 : 1.0, static_cast<double>(stop_signal_received())};
  world_->allreduce_max(flags, 2);
  stop_signal_ = static_cast<int>(flags[1]);
  if (flags[0] > 0) {
    SUBDP_CHECK(config_.train.nonfinite == "skip", "non-finite loss or gradient at step {} (see the rank's message "
                "above); stopping before the optimizer step, no checkpoint written over the last good one "
                "(train.nonfinite = \"skip\" skips such steps instead)", step_ + 1);
    ++skipped_in_a_row_;
    ++skipped_total_;
    last_train_loss_ = loss;  // the last batch's loss, as the final line says (non-finite here)
    SUBDP_CHECK(skipped_in_a_row_ <= config_.train.max_skipped_steps,
                "non-finite loss or gradient in {} consecutive steps (the last: step {}): train.nonfinite = \"skip\" "
                "skips at most train.max_skipped_steps = {} in a row; stopping, no checkpoint written over the last "
                "good one",
                skipped_in_a_row_, step_ + 1, config_.train.max_skipped_steps);
    if (prints_) std::fprintf(stderr, "subdp: warning: skipping step %lld: non-finite values (%lld in a row)\n",
                                        static_cast<long long>(step_ + 1), static_cast<long long>(skipped_in_a_row_));
    ++step_;
    return;
  }
  skipped_in_a_row_ = 0;
  const auto tc = Clock::now();
  sync_->average();
  double comm_s = hook_comm_s_ + seconds_since(tc);
  if (config_.optim.grad_clip > 0) clip_gradients();
  const double lr = learning_rate(config_.optim, base_lr_, step_, total_steps_);
  optimizer_->step(lr);
  check_updated_values();
  const auto tb = Clock::now();
  sync_->gather_values();  // sharded: every holder receives the shards' updated values
  sync_->broadcast_unit_values();
  comm_s += seconds_since(tb);
  const StepTraffic bytes{sync_->take_bytes(), sync_->take_broadcast_bytes()};
  ++step_;
  last_train_loss_ = loss;
  if (config_.log.alignment_every > 0 && step_ % config_.log.alignment_every == 0)
    pending_alignment_ = measure_alignment();
  const double positions = static_cast<double>(batch_.n * model_->positions_per_example());
  log_step(loss, correct / positions, lr, seconds_since(t0), comm_s, flops, bytes);
}

void Trainer::draw_dropped_blocks() {
  // Stochastic depth: each unpinned, droppable block is dropped with probability 1 - keep,
  // drawn per step and rank; kept branches are scaled by 1/keep (mask.scale).
  const int n = static_cast<int>(units_.blocks.size());
  std::vector<char> dense(n), dropped(n, 0);
  for (int b = 0; b < n; ++b) {
    const bool pinned = std::count(config_.mask.pinned.begin(), config_.mask.pinned.end(), b) > 0;
    dense[b] = pinned || !units_.blocks[b].droppable;
    if (!dense[b]) dropped[b] = stochastic_drop(config_.train.seed ^ mix64(config_.mask.seed), layout_.rank, step_, b,
                                                config_.mask.keep);
  }
  const float scale = config_.mask.scale == "inverse_keep" ? static_cast<float>(1.0 / config_.mask.keep) : 1.f;
  model_->set_dropped_blocks(dropped, dense, scale);
}

bool Trainer::gradients_finite() {
  if (!blocks_finite_) return false;
  for (Param* p : model_->params().trainable()) {
    // ZeRO-2 and FSDP: the blocks' gradients were checked by reduce_block_gradients.
    if (!p->grad.defined() || (sync_->shards_blocks() && p->block >= 0)) continue;
    if (!gradient_finite(*p)) return false;
  }
  return true;
}

bool Trainer::gradient_finite(const Param& p) const {
  if (backend().all_finite(p.grad.f32(), p.grad.numel())) return true;
  std::fprintf(stderr, "subdp: rank %d: non-finite gradient in %s at step %lld\n", layout_.rank, p.name.c_str(),
               static_cast<long long>(step_ + 1));  // 1-based, as the progress lines and metrics
  return false;
}

void Trainer::check_updated_values() {
  // The update loops count the non-finite values they write (no second pass over the
  // weights); one flag is all-reduced, and only on a fault do the ranks exchange messages.
  const int i = optimizer_->nonfinite_param();
  std::string mine;
  if (i >= 0) {
    const Param& p = *optimizer_->params()[i];
    // A tensor laid out in runs (optimizer state; FSDP's value shard): its first non-finite element.
    auto first_bad = [&](const Tensor& t, const std::vector<StateRun>& runs) -> std::string {
      const HostCopy host(t);
      for (const StateRun& r : runs) {
        const float* s = host.f32() + r.state_off;
        const int64_t bad = std::find_if(s, s + r.len, [](float x) { return !std::isfinite(x); }) - s;
        if (bad < r.len) return describe_grad_element(p, r.grad_off + bad);
      }
      return "";
    };
    // FSDP keeps a block's values in its shard (the shared buffer holds another block's).
    std::string where = p.shard_value.defined() ? first_bad(p.shard_value, p.shard_runs)
                                                : locate_nonfinite(p, HostCopy(p.value).f32());
    if (!where.empty()) mine = fmt::format("tensor {}, {}", p.name, where);
    const auto states = optimizer_->state(i);
    for (size_t k = 0; k < states.size() && mine.empty(); ++k) {
      where = first_bad(*states[k], optimizer_->state_runs(i));  // the state's own layout (sharded: pieces)
      if (!where.empty()) mine = fmt::format("optimizer state {}::{}, {}", p.name, k, where);
    }
    if (mine.empty()) mine = fmt::format("tensor {} or its optimizer state", p.name);  // counted, not found
  }
  double bad = mine.empty() ? 0 : 1;
  world_->allreduce_max(&bad, 1);
  if (bad == 0) return;
  const auto all = world_->allgather(mine);
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    SUBDP_CHECK(all[r].empty(), "non-finite value at step {} (written by the optimizer update) on rank {}: {}; every rank "
                "stops here and no checkpoint is written (a smaller optim.lr, optim.grad_clip, or a checkpoint "
                "before the fault)", step_ + 1, r, all[r]);
}

void Trainer::clip_gradients() {
  // Global norm over distinct slices: each slice counted once, by the owner of its group
  // (sharded: by the holder whose shard it is, the only one with its averaged gradient).
  std::vector<FloatSpan> spans;
  for (const ShardPiece& piece : sync_->shard_pieces()) spans.push_back({piece.grad, piece.len});
  for (Param* p : sync_->sharded() ? std::vector<Param*>{} : model_->params().trainable()) {
    if (!p->grad.defined()) continue;
    const float* g = p->grad.f32();
    // Owned runs that touch in memory are summed as one span, so the order of additions (and
    // the bits of the norm) is the same whether or not the parameter is cut into units.
    int64_t begin = 0, end = -1;
    for_each_grad_run(*p, [&](int64_t, int64_t go, int64_t len, int pos) {
      if (sync_->owner_of_group(sync_->group_of(*p, pos)) != layout_.rank) return;
      if (go != end) {
        if (end > begin) spans.push_back({g + begin, end - begin});
        begin = go;
      }
      end = go + len;
    });
    if (end > begin) spans.push_back({g + begin, end - begin});
  }
  double sq = backend().sum_squares_spans(spans);
  world_->allreduce_sum(&sq, 1);
  const double norm = std::sqrt(sq);
  if (norm <= config_.optim.grad_clip) return;
  const float factor = static_cast<float>(config_.optim.grad_clip / (norm + 1e-6));
  for (const ShardPiece& piece : sync_->shard_pieces()) backend().scale(piece.grad, factor, piece.len);
  for (Param* p : sync_->sharded() ? std::vector<Param*>{} : model_->params().trainable())
    if (p->grad.defined()) backend().scale(p->grad.f32(), factor, p->grad.numel());
}

void Trainer::log_step(double loss, double acc, double lr, double step_s, double comm_s, int64_t flops, StepTraffic bytes) {
  const MemStats& mem = MemoryTracker::global().stats();
  if (metrics_.is_open()) {
    nlohmann::json j = {{"step", step_}, {"epoch", static_cast<double>(step_) / steps_per_epoch_}, {"rank", layout_.rank},
                        {"subnetwork", layout_.subnet()}, {"loss", loss}, {"acc", acc}, {"lr", lr},
                        {"step_time_s", step_s}, {"compute_s", step_s - comm_s}, {"comm_s", comm_s},
                        {"bytes_allreduced", bytes.allreduced},
                        {"bytes_broadcast", bytes.broadcast}, {"flops", flops}, {"mem_current", memory_json(mem.current)},
                        {"mem_peak", memory_json(mem.peak)}, {"mem_total_current", mem.total_current},
                        {"mem_total_peak", mem.total_peak}, {"peak_rss", process_peak_rss_bytes()}};
    if (const int64_t used = backend().device_used_bytes(); used >= 0) j["device_used_bytes"] = used;
    if (!pending_alignment_.is_null()) j["alignment"] = pending_alignment_;
    if (!pending_redeal_.is_null()) j["redeal"] = pending_redeal_;
    metrics_.write(j);
  }
  pending_alignment_ = nullptr;
  pending_redeal_ = nullptr;
  window_loss_ += loss;
  window_acc_ += acc;
  window_examples_ += batch_.n;
  window_time_ += step_s;
  ++window_n_;
  if (step_ % config_.log.every != 0 && step_ != total_steps_) return;
  double worst[2] = {step_s, static_cast<double>(mem.total_peak)};
  world_->allreduce_max(worst, 2);
  if (prints_) {
    // Examples per second over all ranks; tokens per second for language models.
    const double rate = window_examples_ * layout_.world * model_->positions_per_example() / std::max(window_time_, 1e-9);
    const double eta = (total_steps_ - step_) * window_time_ / window_n_;
    std::printf("epoch %lld step %lld/%lld loss %.4f acc %.4f lr %.5f %s %.0f step %.3fs (slowest rank) "
                "peak %s (largest rank) eta %.0fs\n", static_cast<long long>((step_ - 1) / steps_per_epoch_ + 1),
                static_cast<long long>(step_), static_cast<long long>(total_steps_), window_loss_ / window_n_,
                window_acc_ / window_n_, lr, model_->positions_per_example() > 1 ? "tokens/s" : "samples/s", rate, worst[0], mib(static_cast<int64_t>(worst[1])).c_str(), eta);
    std::fflush(stdout);
  }
  window_loss_ = window_acc_ = window_time_ = 0;
  window_n_ = window_examples_ = 0;
}

void Trainer::print_eval(const EvalResult& full, const EvalResult& sub) {
  if (!prints_) return;
  std::printf("eval step %lld epoch %.2f: full model test_loss %.4f test_acc %.4f", static_cast<long long>(step_),
              static_cast<double>(step_) / steps_per_epoch_, full.loss, full.acc);
  if (full.positions == 0 && world_->backend() == "simulated")
    std::printf(" (not evaluated: --simulate-rank runs this rank alone)");
  // Byte-level text: bits per byte (per token for token shards) = loss in nats / ln 2.
  if (config_.data.name == "text" || config_.data.name == "token_shards")
    std::printf(" bits_per_%s %.4f", config_.data.name == "text" ? "byte" : "token", full.loss / std::log(2.0));
  // A share with no examples gives 0/0; print it as "nan", not "-nan".
  auto shown = [](double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; };
  if (plan_.masked()) std::printf(" | subnetworks (own share) loss %.4f acc %.4f", shown(sub.loss), shown(sub.acc));
  std::printf("\n");
  std::fflush(stdout);
}

void Trainer::print_memory_comparison() {
  const MemStats& mem = MemoryTracker::global().stats();
  std::printf("memory on rank %-3d (bytes)   ", layout_.rank);
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12s", category_name(static_cast<MemCategory>(c)));
  std::printf(" %12s\n  this layout                ", "total");
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(mem.current[c]));
  std::printf(" %12lld\n  plain DP                   ", static_cast<long long>(mem.total_current));
  for (int c = 0; c < kNumMemCategories; ++c) std::printf(" %12lld", static_cast<long long>(dp_footprint_.peak[c]));
  std::printf(" %12lld  (this layout: %.2fx DP)\n", static_cast<long long>(dp_footprint_.total_peak),
              static_cast<double>(mem.total_current) / std::max<int64_t>(1, dp_footprint_.total_peak));
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
        for (int64_t i = 0; i < r.len; ++i) t.data[full_offset_of_grad(*p, r.grad_off + i)] = host.f32()[r.state_off + i];
      out.push_back(std::move(t));
      continue;
    }
    const HostCopy host(p->value);
    const float* v = host.f32();
    for_each_value_run(*p, [&](int64_t lo, int64_t fo, int64_t len) {
      std::copy(v + lo, v + lo + len, t.data.begin() + fo);
    });
    out.push_back(std::move(t));
  }
  save_safetensors(dir + "/rank" + std::to_string(layout_.rank) + ".safetensors", out);
}

}  // namespace subdp
