// Training session: evaluation of the assembled full model and of each subnetwork,
// checkpoint save and resume.
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <map>

#include "engine/train/alignment.h"
#include "engine/core/backend.h"
#include "engine/io/checkpoint.h"
#include "engine/config/config_diff.h"
#include "engine/core/error.h"
#include "engine/layers/batchnorm.h"
#include "engine/train/trainer.h"

namespace subdp {

EvalResult Trainer::evaluate(Model& model, int share_rank, int shares, int64_t forwards) {
  double loss_sum = 0;
  int64_t correct_sum = 0, positions = 0;
  const int64_t batches = data_->eval_batches(share_rank, shares);
  if (forwards > batches) data_->eval_batch(0, 0, shares, batch_);                     // share 0 has the most batches
  for (int64_t i = batches; i < forwards; ++i) model.forward(batch_, false, nullptr);  // uncounted
  for (int64_t i = 0; i < batches; ++i) {
    data_->eval_batch(i, share_rank, shares, batch_);
    int64_t correct = 0;
    const double loss = model.forward(batch_, false, &correct);
    const int64_t n = batch_.n * model.positions_per_example();
    loss_sum += loss * n;
    correct_sum += correct;
    positions += n;
  }
  return {positions ? loss_sum / positions : std::nan(""), positions ? static_cast<double>(correct_sum) / positions : 0,
          positions};
}

EvalResult Trainer::evaluate_shares(Model& model) {
  // Every rank evaluates its own share of the test split; the sums are all-reduced (under
  // --simulate-rank as if every rank had this rank's figures).
  // FSDP gathers every block in each forward, a collective: every rank runs as many
  // forwards as the rank with the most batches (the extra ones uncounted).
  double forwards = 0;
  if (model.gathers_blocks()) {
    forwards = static_cast<double>(data_->eval_batches(layout_.rank, layout_.world));
    world_->allreduce_max(&forwards, 1);
  }
  EvalResult own = evaluate(model, layout_.rank, layout_.world, static_cast<int64_t>(forwards));
  // A rank whose share is empty (fewer evaluation batches than ranks) adds nothing; its
  // loss is NaN, and NaN * 0 would poison every rank's sum.
  const double loss_sum = own.positions ? own.loss * own.positions : 0.0;
  double sums[3] = {loss_sum, own.acc * own.positions, static_cast<double>(own.positions)};
  world_->allreduce_sum(sums, 3);
  return {sums[0] / sums[2], sums[1] / sums[2], static_cast<int64_t>(sums[2])};
}

EvalResult Trainer::evaluate_full() {
  // Sharded evaluation (design brief): every rank assembles the full model and evaluates a
  // 1/W share of the test split, so no rank idles while one evaluates everything.
  if (!plan_.masked()) return evaluate_shares(*model_);             // every rank holds the full model
  if (world_->simulated()) return {std::nan(""), std::nan(""), 0};  // other ranks' units are not here
  assemble_eval_model();
  recalibrate_batchnorm(*eval_model_, /*across_world=*/true);
  return evaluate_shares(*eval_model_);
}

void Trainer::assemble_eval_model() {
  auto full = gather_full(*model_, nullptr, *sync_, *world_, specs_, /*to_all=*/true);
  if (!eval_model_) {
    MemoryTracker::global().set_paused(true);  // outside the training footprint
    eval_model_ = make_model(config_.model, full_mask(units_), config_.train.batch_size, config_.train.seed);
    MemoryTracker::global().set_paused(false);
  }
  std::map<std::string, NamedTensor*> by_name;
  for (auto& t : full) by_name[t.name] = &t;
  for (Param* p : eval_model_->params().all()) {
    SUBDP_ASSERT(by_name.count(p->name));
    set_values(p->value, by_name[p->name]->data);
  }
}

void Trainer::recalibrate_batchnorm(Model& model, bool across_world) {
  // The subnetworks' running statistics describe subnetworks, not the assembled model (whose
  // activations sum every kept branch): re-estimate them as a plain average over training
  // batches (BN recalibration, as for slimmable networks and stochastic depth). Across the
  // world, each rank averages an equal number of its own batches and the ranks' averages are
  // averaged, which is the average over all of them.
  auto bns = model.batchnorms();
  if (bns.empty() || !plan_.masked()) return;
  int batches = static_cast<int>(std::min<int64_t>(kRecalibrationBatches, steps_per_epoch_));
  const int ranks = across_world ? layout_.world : 1;
  batches = (batches + ranks - 1) / ranks;
  const float momentum = bns.front()->momentum;  // the layers' own, restored below
  for (BatchNorm2d* bn : bns) {
    bn->running_mean->value.zero_();
    backend().fill(bn->running_var->value.f32(), 1.f, bn->running_var->value.numel());
  }
  for (int i = 0; i < batches; ++i) {
    for (BatchNorm2d* bn : bns) bn->momentum = 1.f / static_cast<float>(i + 1);  // cumulative average
    data_->train_batch(0, i, batch_);
    model.forward(batch_, true, nullptr);
  }
  for (BatchNorm2d* bn : bns) {
    bn->momentum = momentum;
    if (ranks == 1) continue;
    for (Param* p : {bn->running_mean, bn->running_var}) {
      world_->allreduce_sum(p->value.f32(), p->value.numel());
      const HostCopy v(p->value);  // divided on the host: x / ranks, not x * (1 / ranks)
      for (int64_t j = 0; j < p->value.numel(); ++j) v.f32()[j] /= static_cast<float>(ranks);
      v.store();
    }
  }
}

namespace {

/// Copies of every BatchNorm running mean and variance of `model`, to restore its training
/// state after a pass that moves them (a subnetwork's own evaluation, an alignment probe).
std::vector<std::vector<float>> save_running_stats(Model& model) {
  std::vector<std::vector<float>> saved;
  for (BatchNorm2d* bn : model.batchnorms())
    for (Param* p : {bn->running_mean, bn->running_var}) saved.push_back(host_values(p->value));
  return saved;
}

void restore_running_stats(Model& model, const std::vector<std::vector<float>>& saved) {
  size_t k = 0;
  for (BatchNorm2d* bn : model.batchnorms())
    for (Param* p : {bn->running_mean, bn->running_var}) set_values(p->value, saved[k++]);
}

}  // namespace

EvalResult Trainer::evaluate_local() {
  // Dense running statistics are averaged over every subnetwork: for the subnetwork's own
  // evaluation, re-estimate them on its own batches, then restore the training state.
  const auto saved = save_running_stats(*model_);
  recalibrate_batchnorm(*model_, /*across_world=*/false);
  EvalResult own = evaluate_shares(*model_);
  restore_running_stats(*model_, saved);
  return own;
}

nlohmann::json Trainer::measure_alignment() {
  assemble_eval_model();             // collective; the full model after this step's update
  data_->train_batch(0, 0, batch_);  // the fixed batch: this rank's first
  eval_model_->zero_grad();
  eval_model_->forward(batch_, true, nullptr);
  eval_model_->backward();
  // The subnetwork's gradient on the same batch. Its gradients are free after the update;
  // its BatchNorm running statistics are not, so they are put back.
  const auto saved = save_running_stats(*model_);
  model_->zero_grad();
  model_->forward(batch_, true, nullptr);
  model_->backward();
  (void)backend().take_counters();  // the block hooks' count of this gradient, not the next step's
  restore_running_stats(*model_, saved);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [kind, sums] : gradient_alignment(*model_, *eval_model_, units_, plan_)) {
    const double c = sums.cosine();
    out[kind] = std::isnan(c) ? nlohmann::json(nullptr) : nlohmann::json(c);
  }
  if (prints_)
    std::printf("alignment step %lld (rank 0, cosine to the full model's gradient): %s\n",
                static_cast<long long>(step_), out.dump().c_str());
  return out;
}

namespace {

/// The slowest storage a checkpoint is expected on (a busy network file system), bytes/s.
constexpr double kSlowStorageBytesPerS = 10e6;

}  // namespace

double Trainer::checkpoint_io_allowance_s() const {
  return static_cast<double>(checkpoint_bytes(specs_, optimizer_->num_states())) / kSlowStorageBytesPerS;
}

void Trainer::save(bool final) {
  settle_updates();  // never a checkpoint of an update that wrote a non-finite value
  last_saved_step_ = step_;
  auto tensors = gather_full(*model_, optimizer_.get(), *sync_, *world_, specs_);
  // The other ranks wait for rank 0's write in the barrier below: a slow file system is not a
  // lost peer (a 680 MB checkpoint took more than a 1 s collective_timeout_s).
  LongerWaits io(*world_, checkpoint_io_allowance_s(), "rank 0's checkpoint write");
  if (layout_.rank == 0) {
    std::vector<NamedTensor> model, opt;
    for (auto& t : tensors) (t.name.find("::") == std::string::npos ? model : opt).push_back(std::move(t));
    CheckpointInfo info;
    info.step = step_;
    info.optimizer_steps = optimizer_->steps_taken();
    info.config_toml = config_to_toml(config_);
    info.model_name = name_of(config_.model.name);
    info.plan_hash = plan_.hash();
    info.world = layout_.world;
    info.subnetworks = layout_.S;
    info.train_loss = last_train_loss_;
    const std::string path =
        save_checkpoint(config_.checkpoint.dir, info, model, opt, config_.checkpoint.keep_last, &checkpoints_);
    std::printf("checkpoint%s: %s\n", final ? " (final)" : "", path.c_str());
    std::fflush(stdout);
  }
  metrics_.sync();  // every step up to the checkpoint's is on disk with it
  world_->barrier();
}

namespace {

/// Refuses a checkpoint whose [model] table differs from this run's (heads, kv_heads,
/// rope_theta, ...): tensors of equal shapes can hold another model, which would then train on
/// silently. The error names the first differing key with both values. A checkpoint config this
/// binary cannot parse (an older version's) is not compared: a warning says so.
/// What of `m` its trained weights depend on: defaults spelled out (the LLaMA's ffn_width and
/// kv_heads 0 mean 8 width / 3 rounded and heads), and the keys that do not change the
/// function at all cleared: zero_init_residual (initialisation only) and the LLaMA's context
/// (rotary embeddings have no table of positions to outgrow; the GPT's position table does).
ModelConfig weights_defining(ModelConfig m) {
  m.zero_init_residual = false;
  if (m.name == ModelKind::llama) {
    m.ffn_width = llama_ffn_width(m);
    if (m.kv_heads == 0) m.kv_heads = m.heads;
    m.context = ModelConfig{}.context;
  }
  return m;
}

void check_same_model(const Config& config, const std::string& path, const std::string& checkpoint_config) {
  Config theirs = config, ours = config;
  try {
    theirs.model = weights_defining(parse_config(checkpoint_config, path + "/manifest.json", {}).model);
  } catch (const Error& e) {
    std::fprintf(stderr, "subdp: warning: %s: the checkpoint's [model] table is not compared with this run's: %s\n",
                 path.c_str(), e.what());
    return;
  }
  ours.model = weights_defining(config.model);
  const ConfigDifference d = first_config_difference(config_to_toml(theirs), config_to_toml(ours));
  SUBDP_CHECK(d.key.empty(),
              "{}: the checkpoint's model has {} = {}, this run's {}: its weights belong to that model; resume with "
              "the checkpoint's [model] values",
              path, d.key, d.a, d.b);
}

}  // namespace

Trainer::ResumeSource Trainer::read_resume_source(OptimizerLoad policy) {
  ResumeSource src;
  LoadedCheckpoint read;  // "auto" verifies the checkpoint it picks by reading it: use that read
  const CheckpointConfig& ck = config_.checkpoint;
  const std::string path = ck.resumes_newest() ? newest_checkpoint(ck.dir, &read) : ck.resume;
  if (read.loaded) {
    src.info = read.info;
    src.full = std::move(read.model);
    src.opt = std::move(read.optimizer);
    check_checkpoint_for(path, name_of(config_.model.name), specs_, optimizer_->num_states(), policy, src.info,
                         src.full, src.opt);
  } else if (!path.empty()) {
    load_checkpoint_for(path, name_of(config_.model.name), specs_, optimizer_->num_states(), policy, src.info, src.full,
                        src.opt);
  }
  if (path.empty()) {
    std::printf("checkpoint.resume = \"auto\": no checkpoint in %s, starting fresh\n", ck.dir.c_str());
    return src;
  }
  check_same_model(config_, path, src.info.config_toml);
  checkpoints_.trusted.insert(path);  // read and verified: keep_last may prune it
  std::error_code ec;
  src.in_own_dir =
      !ck.dir.empty() && std::filesystem::equivalent(std::filesystem::path(path).parent_path(), ck.dir, ec);
  if (src.in_own_dir && !ck.resumes_newest()) check_no_later_checkpoints(ck.dir, path, src.info.step);
  SUBDP_CHECK(src.info.step <= total_steps_,
              "{}: checkpoint at step {}, past the run's last step {} ([train] steps / epochs): nothing to "
              "train; raise train.steps or train.epochs",
              path, src.info.step, total_steps_);
  std::printf("resuming from %s at step %lld%s\n", path.c_str(), static_cast<long long>(src.info.step),
              src.info.step == total_steps_ ? " (the run's last step: no training steps)" : "");
  return src;
}

void Trainer::resume() {
  // Rank 0 reads and checks the checkpoint; a failure there is broadcast so every rank stops
  // cleanly.
  const OptimizerLoad policy = config_.checkpoint.reset_optimizer ? OptimizerLoad::reset : OptimizerLoad::require;
  ResumeSource src;
  std::string error;
  std::vector<std::string> errors;
  {
    LongerWaits io(*world_, checkpoint_io_allowance_s(), "rank 0's checkpoint read");  // as in save
    if (layout_.rank == 0) {
      try {
        src = read_resume_source(policy);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    errors = world_->allgather(error);
  }
  SUBDP_CHECK(errors[0].empty(), "{}", errors[0]);
  CheckpointInfo& info = src.info;
  std::vector<NamedTensor>& full = src.full;
  const int64_t in_own_dir = src.in_own_dir;  // checkpoint.dir's own step-N (a save would rewrite it)
  int64_t header[4] = {info.step, info.optimizer_steps, static_cast<int64_t>(full.size()), in_own_dir};
  world_->broadcast(header, sizeof(header), 0);
  world_->broadcast(&info.train_loss, sizeof(info.train_loss), 0);
  if (header[2] == 0) return;  // nothing to resume
  const bool reset = policy == OptimizerLoad::reset;
  if (const int64_t k = config_.mask.redeal_every; k > 0 && header[0] / k != deal_) {
    // The checkpoint was taken under a later deal's plan: build that layout, then load into it.
    deal_ = header[0] / k;
    replace_plan(plan_of_deal(deal_));
  }
  for (auto& t : src.opt) full.push_back(std::move(t));
  scatter_full(*model_, reset ? nullptr : optimizer_.get(), *world_, specs_, full);
  step_ = header[0];
  // A run that trains no step must not rewrite the checkpoint it loaded (reset_optimizer
  // would write zeros over its moments); into another checkpoint.dir it is saved as usual.
  if (header[3]) last_saved_step_ = step_;
  optimizer_->set_steps_taken(reset ? 0 : header[1]);
  last_train_loss_ = info.train_loss;
  if (reset)  // every rank says so: its optimizer state is not what the checkpoint's run had
    std::printf(
        "rank %d: checkpoint.reset_optimizer = true: weights loaded at step %lld, optimizer state and "
        "its step count start from zero\n",
        layout_.rank, static_cast<long long>(step_));
}

}  // namespace subdp
