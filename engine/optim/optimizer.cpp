// SGD and AdamW updates over gradient runs, and the learning-rate schedule.
#include "engine/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace subdp {

namespace {

/// Per-parameter state, updated run by run. Unsharded, the state is shaped like the
/// gradient and the runs are its spans (for_each_grad_span); sharded (ZeRO-1 / ZeRO-2 / FSDP),
/// the state of a parameter holds its shard pieces only, one after another, and each run
/// reads its averaged gradient and updates its values where its piece says (ShardPiece::grad,
/// ShardPiece::value).
class StatefulOptimizer : public Optimizer {
 public:
  StatefulOptimizer(std::vector<Param*> params, int states, const std::vector<ShardPiece>* shard)
      : params_(std::move(params)), states_(states), sharded_(shard != nullptr) {
    for (Param* p : params_) {
      std::vector<StateRun> runs;
      std::vector<UpdateRun> updates;  // w and g here; the state pointers once it exists
      int64_t n = 0;
      if (shard) {
        for (const ShardPiece& piece : *shard)
          if (piece.param == p) {
            runs.push_back({piece.value_off, piece.grad_off, n, piece.len});
            updates.push_back({piece.value, piece.grad, nullptr, nullptr, piece.len});
            n += piece.len;
          }
      } else {
        for_each_grad_span(*p, [&](int64_t vo, int64_t go, int64_t len) {
          runs.push_back({vo, go, go, len});
          updates.push_back({p->value.f32() + vo, p->grad.f32() + go, nullptr, nullptr, len});
        });
        n = p->grad.numel();
      }
      std::vector<Tensor> s;
      for (int i = 0; i < states; ++i)
        s.push_back(shard ? Tensor::zeros({n}, MemCategory::optimizer)
                          : Tensor::zeros(p->grad.shape(), MemCategory::optimizer));
      for (size_t k = 0; k < runs.size(); ++k) {
        if (states > 0) updates[k].s0 = s[0].f32() + runs[k].state_off;
        if (states > 1) updates[k].s1 = s[1].f32() + runs[k].state_off;
      }
      first_update_.push_back(update_runs_.size());
      update_runs_.insert(update_runs_.end(), updates.begin(), updates.end());
      state_.push_back(std::move(s));
      runs_.push_back(std::move(runs));
    }
    first_update_.push_back(update_runs_.size());
  }
  std::vector<Tensor*> state(size_t i) override {
    std::vector<Tensor*> out;
    for (auto& t : state_.at(i)) out.push_back(&t);
    return out;
  }
  std::vector<StateRun> state_runs(size_t i) const override { return runs_.at(i); }
  bool sharded() const override { return sharded_; }
  int num_states() const override { return states_; }
  int64_t steps_taken() const override { return t_; }
  void set_steps_taken(int64_t t) override { t_ = t; }
  const std::vector<Param*>& params() const override { return params_; }
  int locate_nonfinite() const override {
    for (size_t i = 0; i < params_.size(); ++i) {
      std::vector<FloatSpan> written;  // what its updates write: values and state
      for (size_t k = first_update_[i]; k < first_update_[i + 1]; ++k)
        for (const float* x : {update_runs_[k].w, update_runs_[k].s0, update_runs_[k].s1})
          if (x) written.push_back({x, update_runs_[k].n});
      if (!backend().all_finite_spans(written)) return static_cast<int>(i);
    }
    return -1;
  }

 protected:
  std::vector<Param*> params_;
  std::vector<std::vector<Tensor>> state_;
  std::vector<std::vector<StateRun>> runs_;
  std::vector<UpdateRun> update_runs_;  // every parameter's runs, in order: values, gradient, state
  std::vector<size_t> first_update_;    // parameter i's runs: [first_update_[i], first_update_[i + 1])
  int states_;
  bool sharded_;
  int64_t t_ = 0;
};

/// SGD as torch.optim.SGD: g += wd * w; buf = momentum * buf + g (first step: buf = g);
/// Nesterov: g = g + momentum * buf; w -= lr * g.
class Sgd : public StatefulOptimizer {
 public:
  Sgd(const OptimConfig& c, std::vector<Param*> params, const std::vector<ShardPiece>* shard)
      : StatefulOptimizer(std::move(params), c.momentum > 0 ? 1 : 0, shard), c_(c) {}
  void step(double lr) override {
    const float mu = static_cast<float>(c_.momentum), wd = static_cast<float>(c_.weight_decay);
    const float flr = static_cast<float>(lr);
    const bool first = t_ == 0;
    backend().sgd_update_runs(update_runs_, flr, mu, wd, c_.nesterov, first);
    ++t_;
  }

 private:
  OptimConfig c_;
};

/// AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW: w *= 1 - lr*wd; m, v moments with
/// bias correction; w -= lr * m_hat / (sqrt(v_hat) + eps).
class AdamW : public StatefulOptimizer {
 public:
  AdamW(const OptimConfig& c, std::vector<Param*> params, const std::vector<ShardPiece>* shard)
      : StatefulOptimizer(std::move(params), 2, shard), c_(c) {}
  void step(double lr) override {
    ++t_;
    const double b1 = c_.beta1, b2 = c_.beta2;
    const float bc1 = static_cast<float>(1.0 - std::pow(b1, static_cast<double>(t_)));
    const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t_))));
    const float step_size = static_cast<float>(lr) / bc1;
    const float decay = static_cast<float>(1.0 - lr * c_.weight_decay), eps = static_cast<float>(c_.eps);
    const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
    backend().adamw_update_runs(update_runs_, step_size, bc2_sqrt, decay, eps, fb1, fb2);
  }

 private:
  OptimConfig c_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimConfig& c, std::vector<Param*> params,
                                          const std::vector<ShardPiece>* shard) {
  std::vector<Param*> held;
  for (Param* p : params)
    if (p->grad.defined()) held.push_back(p);
  if (c.name == OptimizerKind::sgd) return std::make_unique<Sgd>(c, held, shard);
  if (c.name == OptimizerKind::adamw) return std::make_unique<AdamW>(c, held, shard);
  throw Error(fmt::format("optim.name = \"{}\": expected sgd or adamw", c.name));
}

double learning_rate(const OptimConfig& c, double base_lr, int64_t step, int64_t total) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == Schedule::constant) return base_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total - c.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double floor = base_lr * c.min_lr_ratio;
  return floor + 0.5 * (base_lr - floor) * (1.0 + std::cos(3.141592653589793 * progress));
}

}  // namespace subdp
