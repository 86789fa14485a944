// Gradient alignment (issue 25, log.alignment_every): the cosine similarity between a
// subnetwork's gradient and the full model's gradient restricted to the same slices, per
// unit kind. The SDP paper's explanation of why block level beats neuron level.
#pragma once
#include <map>
#include <string>

#include "engine/subnet/plan.h"
#include "models/model.h"

namespace subdp {

/// Sums over the kept slices of one unit kind: sub . full, |sub|^2, |full|^2 (float64).
struct AlignmentSums {
  double dot = 0, sub = 0, full = 0;
  /// dot / (|sub| |full|); NaN when either gradient is zero on these slices.
  double cosine() const;
};

/// Unit kind of the gradient run of p at local unit position pos: "block" (a dealt block at
/// block level), "head", "neuron" or "channel" (units at neuron level, from the layer's
/// name in `units`), "dense" (everything every subnetwork holds).
std::string unit_kind(const Param& p, int pos, const ModelUnits& units, const SubnetworkPlan& plan);

/// Per unit kind, the sums of `sub`'s held gradients (its local layout) against `full`'s
/// gradients of the same parameters (the full model: same names, full layout). Both models'
/// gradients must come from the same batch.
std::map<std::string, AlignmentSums> gradient_alignment(Model& sub, Model& full, const ModelUnits& units,
                                                        const SubnetworkPlan& plan);

}  // namespace subdp
