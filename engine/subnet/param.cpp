// Parameter creation, local/full index mapping and deterministic initialisation.
#include "engine/subnet/param.h"

#include <cmath>
#include <map>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/hash.h"

namespace subdp {

SubnetMask make_subnet_mask(const SubnetworkPlan& plan, const ModelUnits& units, int s, bool scale_kept) {
  SubnetMask m;
  m.regime = plan.regime;
  m.granularity = plan.granularity;
  for (size_t l = 0; l < units.layers.size(); ++l) {
    LayerMask lm;
    std::vector<int> dropped;
    for (int u = 0; u < units.layers[l].units; ++u)
      (plan.keeps_unit(s, static_cast<int>(l), u) ? lm.order : dropped).push_back(u);
    lm.kept = static_cast<int>(lm.order.size());
    lm.order.insert(lm.order.end(), dropped.begin(), dropped.end());
    m.layers.push_back(lm);
  }
  for (size_t b = 0; b < units.blocks.size(); ++b) {
    m.block_kept.push_back(plan.keeps_block(s, static_cast<int>(b)));
    const bool dealt = plan.masked() && plan.granularity == Granularity::block && plan.block_group.at(b) >= 0;
    m.block_dense.push_back(!dealt);
  }
  if (plan.regime == Regime::forward && scale_kept) m.scale = static_cast<float>(1.0 / plan.keep());
  return m;
}

SubnetMask full_mask(const ModelUnits& units) {
  SubnetworkPlan none;
  return make_subnet_mask(none, units, 0, false);
}

int64_t Param::inner() const {
  int64_t n = 1;
  for (size_t i = unit.axis + 1; i < local_shape.size(); ++i) n *= local_shape[i];
  return n;
}

int64_t Param::outer() const {
  int64_t n = 1;
  for (int i = 0; i < unit.axis; ++i) n *= local_shape.at(i);
  return n;
}

Param& ParamSet::add(const std::string& name, const Shape& full_shape, InitSpec init, UnitRef unit, int block,
                     bool trainable) {
  Param p;
  p.name = name;
  p.full_shape = full_shape;
  p.unit = unit;
  p.block = block;
  p.trainable = trainable;
  p.init = init;
  Shape local = full_shape, grad_shape = full_shape;
  if (unit.layer >= 0) {
    p.mask = &mask_.layers.at(unit.layer);
    SUBDP_ASSERT(full_shape.at(unit.axis) == static_cast<int64_t>(p.mask->units()) * unit.unit_size);
    grad_shape[unit.axis] = static_cast<int64_t>(p.mask->kept) * unit.unit_size;
    if (mask_.forward_masked()) local[unit.axis] = grad_shape[unit.axis];
  }
  p.local_shape = local;
  p.grad_shape = grad_shape;
  p.trained = trainable && (block < 0 || mask_.block_kept.at(block));
  const bool shared = layout_ != ParamLayout::per_param && p.trained && block >= 0;
  if (p.trained && !shared) p.grad = Tensor::zeros(grad_shape, MemCategory::grads);
  if (shares_value(p)) {
    SUBDP_ASSERT(local == grad_shape);  // FSDP: DP or forward masking, where a rank stores what it trains
    params_.push_back(std::move(p));
    return params_.back();  // its value: allocate_shared_blocks; its initial shard: GradientSync
  }
  p.value = Tensor::empty(local, MemCategory::params);
  params_.push_back(std::move(p));
  Param& ref = params_.back();
  if (MemoryTracker::global().dry_run()) return ref;
  HostCopy host(ref.value, /*load=*/false);
  float* v = host.f32();
  const uint64_t seed = seed_;
  for_each_value_run(ref, [&](int64_t local_off, int64_t full_off, int64_t len) {
    for (int64_t i = 0; i < len; ++i) v[local_off + i] = init_value(seed, ref.name, full_off + i, ref.init);
  });
  host.store();
  return ref;
}

std::vector<Param*> ParamSet::trainable() {
  std::vector<Param*> out;
  for (auto& p : params_)
    if (p.trainable) out.push_back(&p);
  return out;
}

std::vector<Param*> ParamSet::buffers() {
  std::vector<Param*> out;
  for (auto& p : params_)
    if (!p.trainable) out.push_back(&p);
  return out;
}

void ParamSet::allocate_shared_blocks() {
  // Each block's tensors at offsets from 0 of one buffer (64-byte aligned runs), so the
  // buffer is the largest block's, not the sum over blocks. A value and its gradient have
  // the same shape (trained parameters), so one set of offsets serves both buffers.
  if (layout_ == ParamLayout::per_param || block_grads_.defined()) return;
  constexpr int64_t kAlign = 16;
  auto padded = [](int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  std::map<int, int64_t> block_elems;
  for (Param& p : params_)
    if (p.trained && p.block >= 0) block_elems[p.block] += padded(shape_numel(p.grad_shape));
  int64_t largest = 0;
  for (const auto& [b, n] : block_elems) largest = std::max(largest, n);
  if (largest == 0) return;
  block_grads_ = Tensor::zeros({largest}, MemCategory::grads);
  // Zeroed: under --simulate-rank the other ranks' segments of a gather never arrive.
  if (layout_ == ParamLayout::shared_block_params) block_values_ = Tensor::zeros({largest}, MemCategory::params);
  std::map<int, int64_t> next;  // per block: its next free offset in the shared buffers
  for (Param& p : params_) {
    if (!p.trained || p.block < 0) continue;
    const int64_t n = shape_numel(p.grad_shape);
    int64_t& at = next[p.block];
    p.grad = block_grads_.slice0(at, at + n).view(p.grad_shape);
    if (shares_value(p)) p.value = block_values_.slice0(at, at + n).view(p.grad_shape);
    at += padded(n);
  }
}

std::vector<Param*> ParamSet::all() {
  std::vector<Param*> out;
  for (auto& p : params_) out.push_back(&p);
  return out;
}

void for_each_value_run(const Param& p, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  for_each_value_run_at(p,
                        [&](int64_t local_off, int64_t full_off, int64_t len, int) { fn(local_off, full_off, len); });
}

void for_each_value_run_at(const Param& p, const std::function<void(int64_t, int64_t, int64_t, int)>& fn) {
  if (p.unit.layer < 0) {
    fn(0, 0, p.value.numel(), -1);
    return;
  }
  const int64_t outer = p.outer(), inner = p.inner(), ext = p.value_extent();
  const int64_t full_ext = p.full_shape.at(p.unit.axis), us = p.unit.unit_size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < ext; a += us) {
      const int64_t full_a = static_cast<int64_t>(p.mask->order[a / us]) * us;
      fn((o * ext + a) * inner, (o * full_ext + full_a) * inner, us * inner, static_cast<int>(a / us));
    }
}

void for_each_grad_run(const Param& p, const std::function<void(int64_t, int64_t, int64_t, int)>& fn) {
  if (!p.grad.defined()) return;
  if (p.unit.layer < 0) {
    fn(0, 0, p.grad.numel(), -1);
    return;
  }
  const int64_t outer = p.outer(), inner = p.inner(), vext = p.value_extent(), gext = p.grad_extent();
  const int64_t us = p.unit.unit_size;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < gext; a += us)
      fn((o * vext + a) * inner, (o * gext + a) * inner, us * inner, static_cast<int>(a / us));
}

void for_each_grad_span(const Param& p, const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (!p.grad.defined()) return;
  if (p.unit.layer < 0 || p.value_extent() == p.grad_extent()) {
    fn(0, 0, p.grad.numel());
    return;
  }
  // Kept units come first along the axis, so each outer row's gradient is one span.
  const int64_t outer = p.outer(), inner = p.inner(), vext = p.value_extent(), gext = p.grad_extent();
  for (int64_t o = 0; o < outer; ++o) fn(o * vext * inner, o * gext * inner, gext * inner);
}

int64_t grad_offset_of(const Param& p, int64_t local_off, int pos) {
  if (p.unit.layer < 0) return local_off;
  const int64_t inner = p.inner(), ext = p.value_extent(), gext = p.grad_extent(), us = p.unit.unit_size;
  const int64_t o = local_off / (ext * inner);
  return (o * gext + static_cast<int64_t>(pos) * us) * inner;
}

int64_t full_offset_of_grad(const Param& p, int64_t grad_off) {
  if (p.unit.layer < 0) return grad_off;
  const int64_t inner = p.inner(), gext = p.grad_extent(), us = p.unit.unit_size;
  const int64_t o = grad_off / (gext * inner), rem = grad_off % (gext * inner);
  const int64_t pos = rem / (us * inner), within = rem % (us * inner);
  return (o * p.full_shape.at(p.unit.axis) + int64_t{p.mask->order[pos]} * us) * inner + within;
}

namespace {

std::string describe_full_element(const Param& p, int64_t full, int unit) {
  std::string out =
      fmt::format("element {} of the full {} tensor", element_str(p.full_shape, full), shape_str(p.full_shape));
  if (unit >= 0) out += fmt::format(", unit {} of maskable layer {}", unit, p.unit.layer);
  return out;
}

}  // namespace

std::string describe_grad_element(const Param& p, int64_t grad_off) {
  int unit = -1;
  if (p.unit.layer >= 0) {
    const int64_t inner = p.inner(), span = p.grad_extent() * inner;
    unit = p.mask->order[(grad_off % span) / (int64_t{p.unit.unit_size} * inner)];
  }
  return describe_full_element(p, full_offset_of_grad(p, grad_off), unit);
}

std::string locate_nonfinite(const Param& p, const float* data) {
  std::string found;
  for_each_value_run_at(p, [&](int64_t lo, int64_t fo, int64_t len, int at) {
    for (int64_t k = 0; k < len && found.empty(); ++k)
      if (!std::isfinite(data[lo + k])) found = describe_full_element(p, fo + k, at >= 0 ? p.mask->order[at] : -1);
  });
  return found;
}

float init_value(uint64_t seed, const std::string& name, int64_t full_index, InitSpec init) {
  if (init.kind == InitSpec::constant) return init.a;
  uint64_t h = mix64(seed ^ 0x9e3779b97f4a7c15ULL);
  for (char ch : name) h = mix64(h ^ static_cast<unsigned char>(ch));
  const uint64_t r1 = mix64(h ^ mix64(static_cast<uint64_t>(full_index) * 2 + 1));
  const double u1 = (static_cast<double>(r1 >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  if (init.kind == InitSpec::uniform) return static_cast<float>((2.0 * u1 - 1.0) * init.a);
  const uint64_t r2 = mix64(h ^ mix64(static_cast<uint64_t>(full_index) * 2 + 2));
  const double u2 = (static_cast<double>(r2 >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  // Box-Muller transform.
  return static_cast<float>(init.a * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

std::vector<FloatSpan> grad_spans(const std::vector<Param*>& params) {
  std::vector<FloatSpan> spans;
  spans.reserve(params.size());
  for (const Param* p : params) spans.push_back({p->grad.f32(), p->grad.numel()});
  return spans;
}

}  // namespace subdp
