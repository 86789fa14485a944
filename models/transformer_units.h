// What the GPT (gpt.h) and the LLaMA (llama.h) share of their subnetwork layout and
// initialisation: each block's two maskable layers (its heads, then its MLP neurons), the
// widths a mask leaves a block, and the N(0, 0.02) weights both draw. Internal to models/.
#pragma once
#include <cstdint>
#include <utility>

#include "engine/core/backend.h"
#include "engine/core/tensor.h"
#include "engine/subnet/param.h"
#include "engine/subnet/plan.h"

namespace subdp {

/// Weights of GPT-2 and of the LLaMA reference code: N(0, 0.02); and the zero initialiser.
constexpr InitSpec kTransformerWeight{InitSpec::normal, 0.02f};
constexpr InitSpec kZeroInit{InitSpec::constant, 0.f};

/// Maskable layer ids of block b at neuron level: its attention heads, then its MLP neurons.
inline int heads_layer(int block) { return 2 * block; }
inline int mlp_layer(int block) { return 2 * block + 1; }

/// Local MLP hidden width and attention width (floats per row) of block `index` for a model of
/// width C, `heads` heads and MLP width H, as ParamSet shapes them: 0 for an absent block, the
/// kept units under forward neuron masking, else H and C.
inline std::pair<int64_t, int64_t> local_block_widths(const SubnetMask& mask, int index, int64_t H, int C, int heads) {
  if (mask.skips_block(index)) return {0, 0};
  if (!(mask.forward_masked() && mask.granularity == Granularity::neuron)) return {H, C};
  return {mask.layers.at(mlp_layer(index)).kept, int64_t{mask.layers.at(heads_layer(index)).kept} * (C / heads)};
}

/// The storage of the activations a block keeps in bf16 under [device] precision = "bf16"
/// for its backward, float32 otherwise: the MLP pre-activations (the GPT's fc_pre, the
/// LLaMA's gate and up) and attention's q, k, v. Half their bytes; the forward computes from
/// the rounded values, as PyTorch's autocast keeps a bf16 linear's output.
inline DType kept_activation_dtype() { return backend().precision() == Precision::bf16 ? DType::bf16 : DType::f32; }

/// A block's stored activation (rows, width): a view of `area` (the model's one shared set
/// under recompute, already of the right type) or, with area null, a tensor of its own of `type`.
inline Tensor stored_activation(const Tensor* area, int64_t rows, int64_t width, DType type = DType::f32) {
  return area ? area->slice0(0, rows * width).view({rows, width})
              : Tensor::empty({rows, width}, MemCategory::activations, type);
}

/// The storage of attention's kept q, k, v: kept_activation_dtype(), but float32 under
/// recompute. bf16 q, k, v cost the model one float32 copy (B, T, 3C) in its shared scratch for
/// the attention kernels (AttentionScratch::qkv_f32), which saves in bytes what bf16 saves on
/// 2 blocks; recompute keeps one block's set.
inline DType kept_qkv_dtype(bool recompute) { return recompute ? DType::f32 : kept_activation_dtype(); }

}  // namespace subdp
