// GPT model (decoder-only transformer); see models/gpt.cpp. Issue 4.
#pragma once
#include <memory>

#include "models/model.h"

namespace subdp {

/// Units: attention heads and MLP hidden neurons per block (neuron level); whole blocks
/// (block level).
ModelUnits gpt_units(const ModelConfig& c);
std::unique_ptr<Model> make_gpt(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed);

}  // namespace subdp
