// Gradient alignment between a subnetwork and the full model.
#include "engine/train/alignment.h"

#include <cmath>

#include "engine/core/error.h"

namespace subdp {

double AlignmentSums::cosine() const { return sub > 0 && full > 0 ? dot / std::sqrt(sub * full) : std::nan(""); }

std::string unit_kind(const Param& p, int pos, const ModelUnits& units, const SubnetworkPlan& plan) {
  if (plan.granularity == Granularity::neuron && p.unit.layer >= 0 && pos >= 0) {
    const std::string& layer = units.layers.at(p.unit.layer).name;
    if (layer.find(".heads") != std::string::npos) return "head";
    if (layer.find(".channels") != std::string::npos) return "channel";
    return "neuron";
  }
  if (plan.granularity == Granularity::block && p.block >= 0 && plan.block_group.at(p.block) >= 0) return "block";
  return "dense";
}

std::map<std::string, AlignmentSums> gradient_alignment(Model& sub, Model& full, const ModelUnits& units,
                                                        const SubnetworkPlan& plan) {
  std::map<std::string, Param*> full_params;
  for (Param* p : full.params().trainable()) full_params[p->name] = p;
  std::map<std::string, AlignmentSums> sums;
  for (Param* p : sub.params().trainable()) {
    if (!p->grad.defined()) continue;  // a block or unit this subnetwork does not train
    const Param* f = full_params.at(p->name);
    SUBDP_ASSERT(f->grad.defined() && f->grad.numel() == shape_numel(p->full_shape));
    const HostCopy sub_grad(p->grad), full_grad(f->grad);
    const float* gs = sub_grad.f32();
    const float* gf = full_grad.f32();
    for_each_value_run_at(*p, [&](int64_t lo, int64_t fo, int64_t len, int pos) {
      if (p->unit.layer >= 0 && pos >= p->mask->kept) return;  // no gradient held for this unit
      AlignmentSums& s = sums[unit_kind(*p, pos, units, plan)];
      const float* a = gs + grad_offset_of(*p, lo, pos);
      const float* b = gf + fo;
      for (int64_t i = 0; i < len; ++i) {
        s.dot += static_cast<double>(a[i]) * b[i];
        s.sub += static_cast<double>(a[i]) * a[i];
        s.full += static_cast<double>(b[i]) * b[i];
      }
    });
  }
  return sums;
}

}  // namespace subdp
