// The config schema: every key, its Config member and its rule, in canonical order.
#include "engine/cli/config_schema.h"

namespace subdp::schema {
namespace {

/// The keys of [model], [data] and [train], in canonical order.
std::vector<Field> model_data_train_fields(Config& c) {
  auto& m = c.model;
  auto& d = c.data;
  auto& t = c.train;
  return {
      {"model", "name", choice(m.name), any()},
      {"model", "hidden", &m.hidden, nonempty_list(between(1, 1 << 24))},
      {"model", "widths", &m.widths, nonempty_list(between(1, 1 << 16))},
      {"model", "blocks_per_stage", &m.blocks_per_stage, between(1, 4096)},
      {"model", "zero_init_residual", &m.zero_init_residual, any()},
      {"model", "in_channels", &m.in_channels, between(1, 1 << 16)},
      {"model", "image_size", &m.image_size, between(1, 1 << 14)},
      {"model", "classes", &m.classes, between(2, 1 << 24)},
      {"model", "vocab", &m.vocab, between(2, 1 << 24)},
      {"model", "context", &m.context, between(1, 1 << 20)},
      {"model", "width", &m.width, between(1, 1 << 16)},
      {"model", "heads", &m.heads, between(1, 1 << 16)},
      {"model", "depth", &m.depth, between(1, 4096)},
      {"model", "mlp_ratio", &m.mlp_ratio, between(1, 64)},
      {"model", "ffn_width", &m.ffn_width, between(0, 1 << 24)},
      {"model", "kv_heads", &m.kv_heads, between(0, 1 << 16)},
      {"model", "rope_theta", &m.rope_theta, above(0)},
      {"data", "name", choice(d.name), any()},
      {"data", "path", &d.path, any()},
      {"data", "val_fraction", &d.val_fraction, range(0, 1, true, true)},
      {"data", "normalize", &d.normalize, any()},
      {"train", "epochs", &t.epochs, at_least(0)},
      {"train", "steps", &t.steps, at_least(0)},
      {"train", "batch_size", &t.batch_size, between(1, 1 << 20)},
      {"train", "eval_every", &t.eval_every, at_least(0)},
      {"train", "eval_batches", &t.eval_batches, at_least(1)},
      {"train", "seed", &t.seed, at_least(0)},
      {"train", "threads", &t.threads, between(0, 1024)},
      {"train", "nonfinite", choice(t.nonfinite), any()},
      {"train", "recompute", choice(t.recompute), any()},
      {"train", "max_skipped_steps", &t.max_skipped_steps, between(0, 1000000)},
      {"train", "winograd_tile", choice(t.winograd_tile), any()},
      {"train", "stop_signals", &t.stop_signals, any()},
      {"train", "allow_overcommit", &t.allow_overcommit, any()},
  };
}

/// The keys of [optim], [parallel], [mask], [device], [checkpoint] and [log], in canonical order.
std::vector<Field> optim_to_log_fields(Config& c) {
  auto& o = c.optim;
  auto& p = c.parallel;
  auto& k = c.mask;
  auto& v = c.device;
  auto& ck = c.checkpoint;
  auto& l = c.log;
  return {
      {"optim", "name", choice(o.name), any()},
      {"optim", "lr", &o.lr, above(0)},
      {"optim", "momentum", &o.momentum, range(0, 1, false, true)},
      {"optim", "nesterov", &o.nesterov, any()},
      {"optim", "weight_decay", &o.weight_decay, at_least(0)},
      {"optim", "beta1", &o.beta1, range(0, 1, false, true)},
      {"optim", "beta2", &o.beta2, range(0, 1, false, true)},
      {"optim", "eps", &o.eps, above(0)},
      {"optim", "warmup_steps", &o.warmup_steps, at_least(0)},
      {"optim", "schedule", choice(o.schedule), any()},
      {"optim", "min_lr_ratio", &o.min_lr_ratio, range(0, 1, false, false)},
      {"optim", "lr_scaling", choice(o.lr_scaling), any()},
      {"optim", "grad_clip", &o.grad_clip, at_least(0)},
      {"parallel", "subnetworks", &p.subnetworks, between(1, 4096)},
      {"parallel", "backend", choice(p.backend), any()},
      // A floor of 262 floats a message: smaller buckets cost a collective per few values (1e-30
      // sent one element a message, 100x slower, which looks like a hang).
      {"parallel", "bucket_mb", &p.bucket_mb, at_least(0.001)},
      // The watchdog looks every 0.5 s (engine/comm/watchdog.cpp): a shorter timeout would fire on
      // any collective a tick happens to land in.
      {"parallel", "collective_timeout_s", &p.collective_timeout_s, at_least(1.0)},
      {"parallel", "shard", choice(p.shard), any()},
      {"parallel", "overlap", &p.overlap, any()},
      {"mask", "regime", choice(k.regime), any()},
      {"mask", "granularity", choice(k.granularity), any()},
      {"mask", "keep", &k.keep, range(0, 1, true, false)},
      {"mask", "seed", &k.seed, at_least(0)},
      {"mask", "scale", choice(k.scale), any()},
      {"mask", "pinned", &k.pinned, at_least(0)},
      {"mask", "redeal_every", &k.redeal_every, at_least(0)},
      {"device", "type", choice(v.type), any()},
      {"device", "precision", choice(v.precision), any()},
      {"checkpoint", "dir", &ck.dir, any()},
      {"checkpoint", "every", &ck.every, at_least(0)},
      {"checkpoint", "keep_last", &ck.keep_last, at_least(1)},
      {"checkpoint", "resume", &ck.resume, any()},
      {"checkpoint", "reset_optimizer", &ck.reset_optimizer, any()},
      {"log", "every", &l.every, at_least(1)},
      {"log", "metrics_file", &l.metrics_file, any()},
      {"log", "alignment_every", &l.alignment_every, at_least(0)},
  };
}

}  // namespace

Rule any() { return {}; }
Rule at_least(double lo) {
  Rule r;
  r.lo = lo;
  return r;
}
Rule above(double lo) {
  Rule r;
  r.lo = lo;
  r.lo_open = true;
  return r;
}
Rule range(double lo, double hi, bool lo_open, bool hi_open) {
  Rule r;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = hi_open;
  return r;
}
/// lo <= value <= hi. The upper bounds on sizes are sanity limits far above any model this
/// engine trains; they keep the shape arithmetic (int, int64) from overflowing.
Rule between(double lo, double hi) { return range(lo, hi, false, false); }
Rule nonempty_list(Rule element) {
  element.nonempty = true;
  return element;
}

std::vector<Field> fields(Config& c) {
  std::vector<Field> all = model_data_train_fields(c);
  for (Field& f : optim_to_log_fields(c)) all.push_back(std::move(f));
  return all;
}

}  // namespace subdp::schema
