// LLaMA-style decoder (Touvron et al. 2023): token embedding tok_embeddings (vocab, C), blocks of
// pre-RMSNorm
//   h = x + wo(attn(rope(q), rope(k), v));  out = h + w2(silu(w1 n) * w3 n),  n = ffn_norm(h)
// with q, k, v = wqkv(attention_norm(x)) (no biases anywhere), final RMSNorm `norm`, an untied
// head `output` (vocab, C), mean cross-entropy over B*T positions. RoPE in the rotate-half form
// (kernels/cpu/rope.h), base model.rope_theta; SwiGLU hidden width llama_ffn_width(c). Weights
// N(0, 0.02); RMSNorm gains 1. Parameter names follow Meta's reference code, except that
// q, k and v are one packed tensor layers.<i>.attention.wqkv.weight (3C, C) (q rows first),
// which the PyTorch twin (benchmarks/torch_peer.py) splits.
// Grouped-query attention (Ainslie et al. 2023), model.kv_heads < heads: wqkv is
// ((heads + 2 kv_heads) hd, C), the q heads then kv_heads k and kv_heads v heads; query head h
// reads key / value head h / (heads / kv_heads). Block level only (the config refuses neuron
// level: heads are not units then).
// Units (neuron level), two maskable layers per block (ids 2i, 2i+1):
//   heads: head h = its rows of q, k, v and its columns of wo;
//   mlp:   hidden neuron j = row j of w1 and of w3 and column j of w2.
// Dense at neuron level: tok_embeddings, norm, output and each block's two RMSNorm gains.
// Block level: each block with all of its parameters is a unit; every block is droppable. A
// forward-masked dropped block is the identity. Forward masking scales kept units by
// mask.scale (per head before wo, per neuron after SwiGLU), or each kept block's two branch
// outputs (block level), as the GPT does (gpt.h).
#pragma once
#include <memory>

#include "models/model.h"

namespace subdp {

/// Units: attention heads and SwiGLU hidden neurons per block (neuron level); whole blocks
/// (block level). Errors name the [model] key (width not divisible by heads, odd head width,
/// kv_heads not dividing heads).
ModelUnits llama_units(const ModelConfig& c);

/// The LLaMA for `mask` with activations for max_batch sequences of model.context tokens;
/// batches are (B, T) int32 tokens and next tokens. recompute_blocks: train.recompute = "blocks".
std::unique_ptr<Model> make_llama(const ModelConfig& c, const SubnetMask& mask, int max_batch, uint64_t seed,
                                  bool recompute_blocks = false, ParamLayout layout = ParamLayout::per_param);

}  // namespace subdp
