// Gather to / scatter from the full model layout.
#include "engine/assemble.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

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

std::vector<NamedTensor> gather_full(Model& model, Optimizer* opt, const GradientSync& sync, Communicator& world,
                                     const std::vector<FullTensorSpec>& specs, bool to_all) {
  auto local = by_name(model);
  const auto opt_index = optimizer_index(model, opt);
  const int states = opt ? opt->num_states() : 0;
  std::vector<NamedTensor> out;
  const int rank = world.rank();
  for (const auto& spec : specs) {
    for (int k = -1; k < (spec.trainable ? states : 0); ++k) {
      // k = -1: values; k >= 0: optimizer state k.
      std::vector<float> full(shape_numel(spec.shape), 0.f);
      auto it = local.find(spec.name);
      if (it != local.end()) {
        const Param& p = *it->second;
        const bool block_held = p.grad.defined() || !p.trainable;
        // The tensor's elements on the host (its own memory on a host backend).
        const HostCopy host(k < 0 ? p.value : opt_index.count(&p) ? *opt->state(opt_index.at(&p))[k] : Tensor());
        const float* src = host.f32();
        if (src && k >= 0 && opt->sharded()) {
          // ZeRO-1: each state element lives on exactly one holder, the owner of its shard.
          for (const StateRun& r : opt->state_runs(opt_index.at(&p)))
            for (int64_t t = 0; t < r.len; ++t) full[full_offset_of_grad(p, r.grad_off + t)] = src[r.state_off + t];
          src = nullptr;
        }
        for_each_value_run_at(p, [&](int64_t lo, int64_t fo, int64_t len, int pos) {
          if (!src) return;
          const bool unit_held = p.unit.layer < 0 || pos < p.mask->kept;
          const int owner = sync.owner_of_group(sync.group_of(p, pos));
          const bool writes = unit_held && owner == rank && (k < 0 || block_held);
          if (!writes) return;
          const float* from = k < 0 ? src + lo : src + grad_offset_of(p, lo, pos);
          std::memcpy(full.data() + fo, from, sizeof(float) * len);
        });
      }
      world.reduce_sum(full.data(), full.data(), static_cast<int64_t>(full.size()), 0);
      if (to_all) world.broadcast(full.data(), static_cast<int64_t>(sizeof(float) * full.size()), 0);
      if (rank == 0 || to_all) out.push_back({k < 0 ? spec.name : spec.name + "::" + std::to_string(k), spec.shape, std::move(full)});
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
    const int states = opt && spec.trainable ? opt->num_states() : 0;
    for (int k = -1; k < states; ++k) {
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
      const HostCopy host(k < 0 ? p.value : *opt->state(opt_index.at(&p))[k]);
      float* dst = host.f32();
      if (k >= 0 && opt->sharded()) {  // ZeRO-1: this rank's shard pieces only
        for (const StateRun& r : opt->state_runs(opt_index.at(&p)))
          for (int64_t t = 0; t < r.len; ++t) dst[r.state_off + t] = buf[full_offset_of_grad(p, r.grad_off + t)];
      } else {
        for_each_value_run_at(p, [&](int64_t lo, int64_t fo, int64_t len, int pos) {
          if (k < 0) std::memcpy(dst + lo, buf.data() + fo, sizeof(float) * len);
          else if (p.unit.layer < 0 || pos < p.mask->kept)
            std::memcpy(dst + grad_offset_of(p, lo, pos), buf.data() + fo, sizeof(float) * len);
        });
      }
      host.store();
    }
  }
}

}  // namespace subdp
