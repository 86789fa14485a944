// Gather to / scatter from the full model layout.
#include "engine/train/assemble.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "engine/core/hash.h"
#include "engine/core/error.h"

namespace subdp {

namespace {

std::map<std::string, Param*> by_name(Model& model) {
  std::map<std::string, Param*> out;
  for (Param* p : model.params().all()) out[p->name] = p;
  return out;
}

// Index of each parameter's optimizer state: the optimizer holds one entry per trainable
// parameter with a gradient, in the model's order. Empty without an optimizer.
std::map<const Param*, size_t> optimizer_index(Model& model, const Optimizer* opt) {
  std::map<const Param*, size_t> index;
  if (!opt) return index;
  size_t i = 0;
  for (Param* p : model.params().trainable())
    if (p->grad.defined()) index[p] = i++;
  return index;
}

}  // namespace

std::vector<FullTensorSpec> full_specs(const ModelConfig& config) {
  std::vector<FullTensorSpec> specs;
  MemoryTracker::global().measure([&] {
    auto units = model_units(config);
    auto model = make_model(config, full_mask(units), 1, 0);
    for (Param* p : model->params().all()) specs.push_back({p->name, p->full_shape, p->trainable});
  });
  return specs;
}

namespace {

// The tensor of p that k names: its value (k = -1; FSDP: its shard) or optimizer state k
// (undefined when this rank holds no state for p).
Tensor tensor_of(Param& p, Optimizer* opt, const std::map<const Param*, size_t>& opt_index, int k) {
  if (k < 0) return p.shard_value.defined() ? p.shard_value : p.value;
  return opt_index.count(&p) ? *opt->state(opt_index.at(&p))[k] : Tensor();
}

// The runs of p's tensor k when it is held as shard pieces (sharded optimizer state; FSDP's
// value shard), else nothing.
std::optional<std::vector<StateRun>> sharded_runs(const Param& p, int k, Optimizer* opt,
                                                  const std::map<const Param*, size_t>& opt_index) {
  if (k < 0) return p.shard_value.defined() ? std::optional(p.shard_runs) : std::nullopt;
  if (!opt->sharded()) return std::nullopt;
  return opt->state_runs(opt_index.at(&p));
}

// Calls fn(full_offset, src + local offset, len) for every run of `src` (p's tensor k, on the
// host) that this rank contributes to the full model: each element comes from exactly one
// rank, the owner of its holder group (dense tensors: rank 0), or under ZeRO-1 the holder
// whose shard holds that state element (FSDP: that value element too).
void for_each_owned_run(const Param& p, const float* src, int k, Optimizer* opt,
                        const std::map<const Param*, size_t>& opt_index, const GradientSync& sync, int rank,
                        const std::function<void(int64_t, const float*, int64_t)>& fn) {
  if (!src) return;
  if (const auto runs = sharded_runs(p, k, opt, opt_index)) {
    for (const StateRun& r : *runs)
      for (int64_t t = 0; t < r.len; ++t) fn(full_offset_of_grad(p, r.grad_off + t), src + r.state_off + t, 1);
    return;
  }
  const bool block_held = p.grad.defined() || !p.trainable;
  for_each_value_run_at(p, [&](int64_t lo, int64_t fo, int64_t len, int pos) {
    const bool unit_held = p.unit.layer < 0 || pos < p.mask->kept;
    const int owner = sync.owner_of_group(sync.group_of(p, pos));
    if (!unit_held || owner != rank || (k >= 0 && !block_held)) return;
    fn(fo, k < 0 ? src + lo : src + grad_offset_of(p, lo, pos), len);
  });
}

// Calls fn(local_offset, full_offset, len) for every run of p's tensor k that this rank
// stores: every local value (k = -1), the kept prefix of the state, or its shard pieces.
void for_each_stored_run(const Param& p, int k, Optimizer* opt, const std::map<const Param*, size_t>& opt_index,
                         const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (const auto runs = sharded_runs(p, k, opt, opt_index)) {
    for (const StateRun& r : *runs)
      for (int64_t t = 0; t < r.len; ++t) fn(r.state_off + t, full_offset_of_grad(p, r.grad_off + t), 1);
    return;
  }
  for_each_value_run_at(p, [&](int64_t lo, int64_t fo, int64_t len, int pos) {
    if (k < 0)
      fn(lo, fo, len);
    else if (p.unit.layer < 0 || pos < p.mask->kept)
      fn(grad_offset_of(p, lo, pos), fo, len);
  });
}

int states_of(const FullTensorSpec& spec, const Optimizer* opt) {
  return opt && spec.trainable ? opt->num_states() : 0;
}

}  // namespace

std::vector<NamedTensor> gather_full(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                                     const std::vector<FullTensorSpec>& specs, bool to_all) {
  auto local = by_name(model);
  const auto opt_index = optimizer_index(model, opt);
  std::vector<NamedTensor> out;
  const int rank = world.rank();
  for (const auto& spec : specs) {
    for (int k = -1; k < states_of(spec, opt); ++k) {
      // k = -1: values; k >= 0: optimizer state k.
      std::vector<float> full(shape_numel(spec.shape), 0.f);
      auto it = local.find(spec.name);
      if (it != local.end()) {
        // The tensor's elements on the host (its own memory on a host backend).
        const HostCopy host(tensor_of(*it->second, opt, opt_index, k));
        for_each_owned_run(*it->second, host.f32(), k, opt, opt_index, sync, rank,
                           [&](int64_t fo, const float* src, int64_t len) {
                             std::memcpy(full.data() + fo, src, sizeof(float) * len);
                           });
      }
      world.reduce_sum(full.data(), full.data(), static_cast<int64_t>(full.size()), 0);
      if (to_all) world.broadcast(full.data(), static_cast<int64_t>(sizeof(float) * full.size()), 0);
      if (rank == 0 || to_all)
        out.push_back({k < 0 ? spec.name : spec.name + "::" + std::to_string(k), spec.shape, std::move(full)});
    }
  }
  return out;
}

void scatter_full(Model& model, Optimizer* opt, Communicator& world, const std::vector<FullTensorSpec>& specs,
                  const std::vector<NamedTensor>& full) {
  std::map<std::string, const NamedTensor*> file;
  for (const auto& t : full) file[t.name] = &t;
  auto local = by_name(model);
  const auto opt_index = optimizer_index(model, opt);
  for (const auto& spec : specs) {
    for (int k = -1; k < states_of(spec, opt); ++k) {
      const std::string name = k < 0 ? spec.name : spec.name + "::" + std::to_string(k);
      // Rank 0's tensors were checked against the specs by load_checkpoint_for; a gap here
      // is a bug, and the flag keeps every rank out of the broadcast that would hang.
      int present = 1;
      if (world.rank() == 0) {
        auto it = file.find(name);
        present = it != file.end() && it->second->shape == spec.shape;
      }
      world.broadcast(&present, sizeof(present), 0);
      SUBDP_ASSERT(present == 1);
      std::vector<float> buf(shape_numel(spec.shape));
      if (world.rank() == 0) buf = file[name]->data;
      world.broadcast(buf.data(), static_cast<int64_t>(buf.size() * sizeof(float)), 0);
      auto it = local.find(spec.name);
      if (it == local.end()) continue;
      Param& p = *it->second;
      if (k >= 0 && !opt_index.count(&p)) continue;  // this rank holds no state for it
      const HostCopy host(tensor_of(p, opt, opt_index, k));
      float* dst = host.f32();
      for_each_stored_run(p, k, opt, opt_index, [&](int64_t lo, int64_t fo, int64_t len) {
        std::memcpy(dst + lo, buf.data() + fo, sizeof(float) * len);
      });
      host.store();
    }
  }
}

int64_t OwnedSlices::bytes() const {
  int64_t b = 0;
  for (const auto& t : tensors)
    b += static_cast<int64_t>(t.values.size() * sizeof(float) + (t.full_off.size() + t.len.size()) * sizeof(int64_t));
  return b;
}

namespace {

// One element's share of an OwnedSlices checksum: (tensor index, full offset, value bits).
uint64_t element_hash(size_t tensor, int64_t full_off, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return mix64(mix64((static_cast<uint64_t>(tensor) << 40) + static_cast<uint64_t>(full_off)) ^ bits);
}

// Calls fn(t, full_offset, src, len) for every run this rank owns, t indexing (spec, state)
// as OwnedSlices::tensors does; src points into a host copy valid during the call.
void for_each_owned(Model& model, Optimizer* opt, const GradientSync& sync, int rank,
                    const std::vector<FullTensorSpec>& specs,
                    const std::function<void(size_t, int64_t, const float*, int64_t)>& fn) {
  auto local = by_name(model);
  const auto opt_index = optimizer_index(model, opt);
  size_t t = 0;
  for (const auto& spec : specs)
    for (int k = -1; k < states_of(spec, opt); ++k, ++t) {
      auto it = local.find(spec.name);
      if (it == local.end()) continue;
      const HostCopy host(tensor_of(*it->second, opt, opt_index, k));
      for_each_owned_run(*it->second, host.f32(), k, opt, opt_index, sync, rank,
                         [&](int64_t fo, const float* src, int64_t len) { fn(t, fo, src, len); });
    }
}

size_t owned_tensor_count(const Optimizer* opt, const std::vector<FullTensorSpec>& specs) {
  size_t n = 0;
  for (const auto& spec : specs) n += 1 + states_of(spec, opt);
  return n;
}

}  // namespace

uint64_t OwnedSlices::checksum() const {
  uint64_t sum = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Runs& r = tensors[t];
    for (size_t i = 0, v = 0; i < r.len.size(); ++i)
      for (int64_t e = 0; e < r.len[i]; ++e, ++v) sum += element_hash(t, r.full_off[i] + e, r.values[v]);
  }
  return sum;
}

uint64_t owned_checksum(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                        const std::vector<FullTensorSpec>& specs) {
  uint64_t sum = 0;
  for_each_owned(model, opt, sync, world.rank(), specs, [&](size_t t, int64_t fo, const float* src, int64_t len) {
    for (int64_t e = 0; e < len; ++e) sum += element_hash(t, fo + e, src[e]);
  });
  return sum;
}

OwnedSlices copy_owned_slices(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                              const std::vector<FullTensorSpec>& specs) {
  OwnedSlices out;
  out.tensors.resize(owned_tensor_count(opt, specs));
  for_each_owned(model, opt, sync, world.rank(), specs, [&](size_t t, int64_t fo, const float* src, int64_t len) {
    OwnedSlices::Runs& runs = out.tensors[t];
    if (!runs.len.empty() && runs.full_off.back() + runs.len.back() == fo) {
      runs.len.back() += len;  // ZeRO-1 state comes element by element
    } else {
      runs.full_off.push_back(fo);
      runs.len.push_back(len);
    }
    runs.values.insert(runs.values.end(), src, src + len);
  });
  return out;
}

int64_t scatter_owned_slices(Model& model, Optimizer* opt, Communicator& world,
                             const std::vector<FullTensorSpec>& specs, const OwnedSlices& slices,
                             int64_t window_values) {
  SUBDP_ASSERT(window_values > 0);
  auto local = by_name(model);
  const auto opt_index = optimizer_index(model, opt);
  int64_t sent = 0;
  size_t t = 0;
  std::vector<float> window;
  for (const auto& spec : specs)
    for (int k = -1; k < states_of(spec, opt); ++k, ++t) {
      SUBDP_ASSERT(t < slices.tensors.size());
      const OwnedSlices::Runs& mine = slices.tensors[t];
      auto it = local.find(spec.name);
      Param* p = it == local.end() ? nullptr : it->second;
      const bool stores = p && (k < 0 || opt_index.count(p));
      const HostCopy host(stores ? tensor_of(*p, opt, opt_index, k) : Tensor());
      const int64_t numel = shape_numel(spec.shape);
      for (int64_t lo = 0; lo < numel; lo += window_values) {
        const int64_t hi = std::min(numel, lo + window_values);
        // -0.0 is the identity of float addition (x + -0.0 == x bit for bit, +0.0 included),
        // so the sum of the one owner's value and everyone else's filler is that value.
        window.assign(hi - lo, -0.f);
        for (size_t r = 0, v = 0; r < mine.len.size(); v += mine.len[r++]) {
          const int64_t a = std::max(lo, mine.full_off[r]), b = std::min(hi, mine.full_off[r] + mine.len[r]);
          if (a < b)
            std::memcpy(window.data() + (a - lo), mine.values.data() + v + (a - mine.full_off[r]),
                        sizeof(float) * (b - a));
        }
        world.reduce_sum(window.data(), window.data(), hi - lo, 0);
        world.broadcast(window.data(), static_cast<int64_t>(sizeof(float) * (hi - lo)), 0);
        sent += 2 * static_cast<int64_t>(sizeof(float)) * (hi - lo);
        if (!stores) continue;
        for_each_stored_run(*p, k, opt, opt_index, [&](int64_t dst, int64_t fo, int64_t len) {
          const int64_t a = std::max(lo, fo), b = std::min(hi, fo + len);
          if (a < b) std::memcpy(host.f32() + dst + (a - fo), window.data() + (a - lo), sizeof(float) * (b - a));
        });
      }
      if (stores) host.store();
    }
  return sent;
}

}  // namespace subdp
