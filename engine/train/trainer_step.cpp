// One optimizer step as named phases (Trainer::train_step), its value checks, gradient
// clipping, stochastic-depth draws and the step's metrics and progress lines.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/hash.h"
#include "engine/layers/flops.h"
#include "engine/train/stop_signals.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_util.h"

namespace subdp {

void Trainer::train_step(int64_t epoch, int64_t in_epoch) {
  StepFigures f;
  const auto t0 = Clock::now();
  Backend& be = backend();
  stamps_ = PhaseStamps{};
  stamps_.begin = be.timestamp();
  prepare_step(epoch, in_epoch);
  stamps_.prepared = be.timestamp();
  forward_backward(f);
  if (skip_if_nonfinite(f)) {
    previous_stamps_ = PhaseStamps{};  // no reduce, update or publish to time
    return;
  }
  stamps_.checked = be.timestamp();
  reduce(f);
  if (config_.optim.grad_clip > 0) clip_gradients();
  stamps_.reduced = be.timestamp();
  update(f);
  stamps_.updated = be.timestamp();
  publish(f);
  stamps_.published = be.timestamp();
  previous_stamps_ = stamps_;
  ++step_;
  last_train_loss_ = f.loss;
  if (config_.log.alignment_every > 0 && step_ % config_.log.alignment_every == 0) {
    settle_updates();
    pending_alignment_ = measure_alignment();
  }
  f.step_s = seconds_since(t0);
  record(f);
}

void Trainer::prepare_step(int64_t epoch, int64_t in_epoch) {
  if (const int64_t k = config_.mask.redeal_every; k > 0 && step_ / k != deal_) redeal(step_ / k);
  data_->train_batch(epoch, in_epoch, batch_);
  if (config_.mask.regime == MaskRegime::stochastic) draw_dropped_blocks();
  model_->zero_grad();
  sync_->begin_step();
  FlopCounter::take();
}

void Trainer::forward_backward(StepFigures& f) {
  model_->enqueue_forward(batch_, true);
  stamps_.forwarded = backend().timestamp();
  model_->backward();
  sync_->wait_overlapped();  // parallel.overlap: before any other collective
  stamps_.backwarded = backend().timestamp();
  f.flops = FlopCounter::take();
}

void Trainer::read_phase_times(StepFigures& f) const {
  Backend& be = backend();
  f.prepare_s = be.seconds_between(stamps_.begin, stamps_.prepared);
  f.forward_s = be.seconds_between(stamps_.prepared, stamps_.forwarded);
  f.backward_s = be.seconds_between(stamps_.forwarded, stamps_.backwarded);
  const PhaseStamps& p = previous_stamps_;
  if (p.published < 0) return;  // the run's first step, or the previous one was skipped
  f.previous_check_s = be.seconds_between(p.backwarded, p.checked);
  f.previous_reduce_s = be.seconds_between(p.checked, p.reduced);
  f.previous_update_s = be.seconds_between(p.reduced, p.updated);
  f.previous_publish_s = be.seconds_between(p.updated, p.published);
}

bool Trainer::skip_if_nonfinite(StepFigures& f) {
  // The step's one host synchronisation: the loss, the gradients' non-finite count and the
  // previous update's non-finite writes come back in one read of the counters.
  backend().count_nonfinite_spans(grad_spans(unchecked_gradients()));
  // One all-reduce carries the flags, in the backend's memory (on a GPU NCCL reduces them on
  // the device): a non-finite value anywhere, a stop signal on any rank (every rank then
  // finishes this step and stops after it, at the same step), and a non-finite write by the
  // previous step's update.
  backend().set_step_flags(static_cast<double>(stop_signal_received()));
  world_->allreduce_max(backend().step_flags(), 3);
  const StepCounters c = backend().take_counters();
  read_phase_times(f);  // every timestamp so far is behind the read-back
  check_forward_counters(c);
  f.loss = c.loss_rows ? c.loss_sum / static_cast<double>(c.loss_rows) : 0.0;
  f.correct = c.correct;
  const double* flags = c.flags;
  stop_signal_ = static_cast<int>(flags[1]);
  updates_unread_ = false;
  if (flags[2] != 0) report_nonfinite_update(step_, c.nonfinite_writes > 0);  // the cause of whatever follows
  if (c.nonfinite > 0) name_nonfinite_gradient();
  if (flags[0] == 0) {
    skipped_in_a_row_ = 0;
    return false;
  }
  SUBDP_CHECK(config_.train.nonfinite == NonfinitePolicy::skip,
              "non-finite loss or gradient at step {} (see the rank's "
              "message above); stopping before the optimizer step, no checkpoint written over the last good one "
              "(train.nonfinite = \"skip\" skips such steps instead)",
              step_ + 1);
  ++skipped_in_a_row_;
  ++skipped_total_;
  last_train_loss_ = f.loss;  // the last batch's loss, as the final line says (non-finite here)
  SUBDP_CHECK(skipped_in_a_row_ <= config_.train.max_skipped_steps,
              "non-finite loss or gradient in {} consecutive steps (the last: step {}): train.nonfinite = \"skip\" "
              "skips at most train.max_skipped_steps = {} in a row; stopping, no checkpoint written over the last "
              "good one",
              skipped_in_a_row_, step_ + 1, config_.train.max_skipped_steps);
  if (prints_)
    std::fprintf(stderr, "subdp: warning: skipping step %lld: non-finite values (%lld in a row)\n",
                 static_cast<long long>(step_ + 1), static_cast<long long>(skipped_in_a_row_));
  ++step_;
  return true;
}

void Trainer::reduce(StepFigures& f) {
  const auto tc = Clock::now();
  sync_->average();
  f.comm_s = sync_->hook_seconds() + seconds_since(tc);
}

void Trainer::update(StepFigures& f) {
  f.lr = learning_rate(config_.optim, base_lr_, step_, total_steps_);
  optimizer_->step(f.lr);
  updates_unread_ = true;
}

void Trainer::publish(StepFigures& f) {
  const auto tb = Clock::now();
  sync_->gather_values();  // sharded: every holder receives the shards' updated values
  sync_->broadcast_unit_values();
  f.comm_s += seconds_since(tb);
  f.bytes = {sync_->take_bytes(), sync_->take_broadcast_bytes()};
}

void Trainer::draw_dropped_blocks() {
  // Stochastic depth: each unpinned, droppable block is dropped with probability 1 - keep,
  // drawn per step and rank; kept branches are scaled by 1/keep (mask.scale).
  const int n = static_cast<int>(units_.blocks.size());
  std::vector<char> dense(n), dropped(n, 0);
  for (int b = 0; b < n; ++b) {
    const bool pinned = std::count(config_.mask.pinned.begin(), config_.mask.pinned.end(), b) > 0;
    dense[b] = pinned || !units_.blocks[b].droppable;
    if (!dense[b])
      dropped[b] =
          stochastic_drop(config_.train.seed ^ mix64(config_.mask.seed), layout_.rank, step_, b, config_.mask.keep);
  }
  const float scale = config_.mask.scale == MaskScale::inverse_keep ? static_cast<float>(1.0 / config_.mask.keep) : 1.f;
  model_->set_dropped_blocks(dropped, dense, scale);
}

std::vector<Param*> Trainer::unchecked_gradients() {
  std::vector<Param*> unchecked;
  for (Param* p : model_->params().trainable()) {
    // ZeRO-2, FSDP and overlap: the sync's block hooks counted the blocks' gradients.
    if (p->grad.defined() && !(sync_->checks_block_gradients() && p->block >= 0)) unchecked.push_back(p);
  }
  return unchecked;
}

void Trainer::name_nonfinite_gradient() const {
  // Only after a fault. Under ZeRO-2 / FSDP the blocks' gradients were reduced into the shard
  // pieces (and zeroed), where the rank owning a piece finds the value the sum carried: those
  // first, then the gradients in the backward pass's order (the last layer's first).
  std::vector<std::pair<const Param*, FloatSpan>> places;
  for (const ShardPiece& piece : sync_->shard_pieces()) places.push_back({piece.param, {piece.grad, piece.len}});
  const auto& params = model_->params().trainable();
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    if ((*it)->grad.defined()) places.push_back({*it, {(*it)->grad.f32(), (*it)->grad.numel()}});
  for (const auto& [p, span] : places) {
    if (backend().all_finite(span.x, span.n)) continue;
    std::fprintf(stderr, "subdp: rank %d: non-finite gradient in %s at step %lld\n", layout_.rank, p->name.c_str(),
                 static_cast<long long>(step_ + 1));  // 1-based, as the progress lines and metrics
    return;
  }
}

void Trainer::settle_updates() {
  if (!updates_unread_) return;
  updates_unread_ = false;
  const StepCounters c = backend().take_counters();
  SUBDP_ASSERT(c.loss_rows == 0 && c.nonfinite == 0 && c.bad_ids == 0);  // nothing but the update's count
  double bad = c.nonfinite_writes > 0 ? 1.0 : 0.0;
  world_->allreduce_max(&bad, 1);
  if (bad != 0) report_nonfinite_update(step_, c.nonfinite_writes > 0);
}

void Trainer::report_nonfinite_update(int64_t step, bool mine_bad) {
  // The update loops counted the non-finite values they wrote (no second pass over the
  // weights); only now, on a fault, is each parameter searched and the messages exchanged.
  std::string mine;
  if (mine_bad) {
    const int i = std::max(optimizer_->locate_nonfinite(), 0);  // counted but not found again: name the first
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
    std::string where =
        p.shard_value.defined() ? first_bad(p.shard_value, p.shard_runs) : locate_nonfinite(p, HostCopy(p.value).f32());
    if (!where.empty()) mine = fmt::format("tensor {}, {}", p.name, where);
    const auto states = optimizer_->state(i);
    for (size_t k = 0; k < states.size() && mine.empty(); ++k) {
      where = first_bad(*states[k], optimizer_->state_runs(i));  // the state's own layout (sharded: pieces)
      if (!where.empty()) mine = fmt::format("optimizer state {}::{}, {}", p.name, k, where);
    }
    if (mine.empty()) mine = fmt::format("tensor {} or its optimizer state", p.name);  // counted, not found
  }
  const auto all = world_->allgather(mine);
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    SUBDP_CHECK(all[r].empty(),
                "non-finite value at step {} (written by the optimizer update) on rank {}: {}; every rank "
                "stops here and no checkpoint is written (a smaller optim.lr, optim.grad_clip, or a checkpoint "
                "before the fault)",
                step, r, all[r]);
  SUBDP_CHECK(false, "non-finite value at step {} (written by the optimizer update) on a rank that did not name it",
              step);
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

void Trainer::record(const StepFigures& f) {
  const double positions = static_cast<double>(batch_.n * model_->positions_per_example());
  const double loss = f.loss, acc = f.correct / positions, lr = f.lr, step_s = f.step_s, comm_s = f.comm_s;
  const MemStats& mem = MemoryTracker::global().stats();
  if (metrics_.is_open()) {
    nlohmann::json j = {{"step", step_},
                        {"epoch", static_cast<double>(step_) / steps_per_epoch_},
                        {"rank", layout_.rank},
                        {"subnetwork", layout_.subnet()},
                        {"loss", loss},
                        {"acc", acc},
                        {"lr", lr},
                        {"step_time_s", step_s},
                        {"compute_s", step_s - comm_s},
                        {"comm_s", comm_s},
                        {"bytes_allreduced", f.bytes.allreduced},
                        {"bytes_broadcast", f.bytes.broadcast},
                        {"flops", f.flops},
                        {"mem_current", memory_json(mem.current)},
                        {"mem_peak", memory_json(mem.peak)},
                        {"mem_total_current", mem.total_current},
                        {"mem_total_peak", mem.total_peak},
                        {"peak_rss", process_peak_rss_bytes()}};
    if (const int64_t used = backend().device_used_bytes(); used >= 0) j["device_used_bytes"] = used;
    j["phases_s"] = {{"prepare", f.prepare_s}, {"forward", f.forward_s}, {"backward", f.backward_s}};
    if (f.previous_check_s >= 0)
      j["previous_phases_s"] = {{"check", f.previous_check_s},
                                {"reduce", f.previous_reduce_s},
                                {"update", f.previous_update_s},
                                {"publish", f.previous_publish_s}};
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
    const double rate =
        window_examples_ * layout_.world * model_->positions_per_example() / std::max(window_time_, 1e-9);
    const double eta = (total_steps_ - step_) * window_time_ / window_n_;
    std::printf(
        "epoch %lld step %lld/%lld loss %.4f acc %.4f lr %.5f %s %.0f step %.3fs (slowest rank) "
        "peak %s (largest rank) eta %.0fs\n",
        static_cast<long long>((step_ - 1) / steps_per_epoch_ + 1), static_cast<long long>(step_),
        static_cast<long long>(total_steps_), window_loss_ / window_n_, window_acc_ / window_n_, lr,
        model_->positions_per_example() > 1 ? "tokens/s" : "samples/s", rate, worst[0],
        mib(static_cast<int64_t>(worst[1])).c_str(), eta);
    std::fflush(stdout);
  }
  window_loss_ = window_acc_ = window_time_ = 0;
  window_n_ = window_examples_ = 0;
}

}  // namespace subdp
