// The config rules that involve more than one key, checked once every key is read.
#include "engine/cli/config_rules.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/train/stop_signals.h"
#include "kernels/shapes.h"

namespace subdp {
namespace {

/// A [model] key set away from its default for a model that does not read it (the LLaMA's
/// mlp_ratio, the GPT's ffn_width, ...) would be ignored without a word: refused, naming the
/// models that read it. (A key set to its default passes: it changes nothing either way.)
void check_model_keys_apply(const ModelConfig& m, const std::string& path) {
  const ModelConfig d;
  auto check = [&](const char* key, bool changed, std::initializer_list<ModelKind> readers) {
    if (!changed || std::find(readers.begin(), readers.end(), m.name) != readers.end()) return;
    throw Error(fmt::format("{}: [model] {} is set, but model.name = \"{}\" does not read it (it applies to {})", path,
                            key, m.name, fmt::join(readers, ", ")));
  };
  check("hidden", m.hidden != d.hidden, {ModelKind::mlp});
  check("widths", m.widths != d.widths, {ModelKind::resnet});
  check("blocks_per_stage", m.blocks_per_stage != d.blocks_per_stage, {ModelKind::resnet});
  for (const auto& [key, changed] : {std::pair{"in_channels", m.in_channels != d.in_channels},
                                     {"image_size", m.image_size != d.image_size},
                                     {"classes", m.classes != d.classes}})
    check(key, changed, {ModelKind::mlp, ModelKind::resnet});
  for (const auto& [key, changed] : {std::pair{"vocab", m.vocab != d.vocab},
                                     {"context", m.context != d.context},
                                     {"width", m.width != d.width},
                                     {"heads", m.heads != d.heads},
                                     {"depth", m.depth != d.depth}})
    check(key, changed, {ModelKind::gpt, ModelKind::llama});
  check("mlp_ratio", m.mlp_ratio != d.mlp_ratio, {ModelKind::gpt});
  check("ffn_width", m.ffn_width != d.ffn_width, {ModelKind::llama});
  check("kv_heads", m.kv_heads != d.kv_heads, {ModelKind::llama});
  check("rope_theta", m.rope_theta != d.rope_theta, {ModelKind::llama});
}

/// The plan, the masks and the holder groups keep a few bytes per structured unit (attention
/// head, MLP neuron) of each block, whatever the regime: a transformer beyond this many units
/// would exhaust host memory in `plan` or at start-up rather than reach the memory check. About
/// 10x the largest published LLaMA (126 blocks x (128 heads + 53,248 neurons) = 6.7M).
constexpr int64_t kMaxTransformerUnits = int64_t{1} << 26;

/// A GPT's or LLaMA's MLP hidden width: SwiGLU's llama_ffn_width, or mlp_ratio x width.
int64_t transformer_hidden(const ModelConfig& m) {
  return m.name == ModelKind::llama ? llama_ffn_width(m) : int64_t{m.mlp_ratio} * m.width;
}

void check_transformer_units(const ModelConfig& m, const std::string& path) {
  if (m.name != ModelKind::gpt && m.name != ModelKind::llama) return;
  const bool llama = m.name == ModelKind::llama;
  const int64_t hidden = transformer_hidden(m);
  const int64_t units = int64_t{m.depth} * (m.heads + hidden);
  SUBDP_CHECK(units <= kMaxTransformerUnits,
              "{}: [model] depth x (heads + {}) = {} x ({} + {}) = {} heads and neurons; subdp plans at most {} "
              "(about 10x the largest published LLaMA's): lower model.depth or the {}",
              path, llama ? "ffn_width" : "mlp_ratio x width", m.depth, m.heads, hidden, units, kMaxTransformerUnits,
              llama ? "ffn_width" : "width or mlp_ratio");
}

/// Sizes the engine's arithmetic holds: GEMM dimensions are 32-bit (BLAS, cuBLAS), and a
/// rank's bytes, summed in int64 by the planner and the tracker, stay far below 2^63. Past
/// these a plan would print wrapped figures and a run would compute on truncated shapes.
constexpr long double kMaxGemmDim = 2147483647.0L;           // INT32_MAX
constexpr long double kMaxRankBytes = 72057594037927936.0L;  // 2^56 bytes (64 PiB): 128x below 2^63

/// A generous upper estimate of one rank's bytes under plain DP, float32 (parameters with
/// gradients and two optimizer moments, every activation kept, attention probabilities
/// stored, im2col columns), in long double so that it cannot overflow: an order-of-magnitude
/// guard, not a plan.
long double estimated_rank_bytes(const Config& c) {
  const ModelConfig& m = c.model;
  const long double B = c.train.batch_size, pixels = static_cast<long double>(m.image_size) * m.image_size;
  long double params = 0, per_sample = 0;
  if (m.name == ModelKind::gpt || m.name == ModelKind::llama) {
    const long double C = m.width, T = m.context, V = m.vocab, L = m.depth, H = m.heads;
    const long double F = transformer_hidden(m);
    params = 2 * V * C + T * C + L * (4 * C * C + 3 * C * F + 4 * C);
    per_sample = T * (2 * V + L * (H * T + 16 * C + 4 * F));
  } else if (m.name == ModelKind::resnet) {
    const long double wmax = *std::max_element(m.widths.begin(), m.widths.end());
    const long double stages = static_cast<long double>(m.widths.size());
    params = 9 * wmax * wmax * 2 * m.blocks_per_stage * stages + 9 * m.in_channels * wmax + wmax * m.classes;
    per_sample = pixels * (m.in_channels + 9 * wmax * (2 + 8 * m.blocks_per_stage * stages));
  } else {
    long double prev = m.in_channels * pixels;
    per_sample = prev;
    for (long double w : m.hidden) {
      params += prev * w + w;
      per_sample += 4 * w;
      prev = w;
    }
    params += prev * m.classes;
    per_sample += 2 * m.classes;
  }
  return 4 * (4 * params + B * per_sample);
}

/// Refuses sizes past the engine's arithmetic (kMaxGemmDim, kMaxRankBytes), naming the keys.
void check_shape_arithmetic(const Config& c, const std::string& path) {
  const ModelConfig& m = c.model;
  if (m.name == ModelKind::gpt || m.name == ModelKind::llama) {
    const long double rows = static_cast<long double>(c.train.batch_size) * m.context;
    SUBDP_CHECK(rows <= kMaxGemmDim,
                "{}: [train] batch_size x [model] context = {} x {} = {:.0f} rows: a GEMM's row count is 32-bit "
                "(at most 2^31 - 1 = 2147483647); lower batch_size or context",
                path, c.train.batch_size, m.context, static_cast<double>(rows));
  }
  if (m.name == ModelKind::resnet) {  // a sample's largest (C, H, W) activation: stage s at image / 2^s
    long double res = m.image_size, sample = static_cast<long double>(m.in_channels) * res * res;
    for (size_t s = 0; s < m.widths.size(); ++s) {
      if (s > 0) res = std::floor((res - 1) / 2) + 1;
      sample = std::max(sample, m.widths[s] * res * res);
    }
    SUBDP_CHECK(sample <= kMaxGemmDim,
                "{}: [model] image_size = {} with widths up to {}: a sample's largest activation holds {:.0f} values, "
                "and per-sample sizes are 32-bit (at most 2^31 - 1); lower image_size or widths",
                path, m.image_size, *std::max_element(m.widths.begin(), m.widths.end()), static_cast<double>(sample));
  }
  const long double bytes = estimated_rank_bytes(c);
  SUBDP_CHECK(
      bytes <= kMaxRankBytes,
      "{}: [model] sizes with [train] batch_size = {} need about {:.3g} bytes per rank, past 2^56 (64 PiB), where "
      "the planner's int64 byte sums are no longer safe (and no device holds it); lower batch_size or the "
      "model's sizes",
      path, c.train.batch_size, static_cast<double>(bytes));
}

/// Rules between [train], [model], [mask] and [parallel]: loop length, model features, coverage.
void check_model_and_masking(const Config& c, const std::string& path) {
  const auto& t = c.train;
  SUBDP_CHECK(!(t.epochs > 0 && t.steps > 0),
              "{}: [train] epochs = {} and steps = {}: give exactly one of epochs > 0 or steps > 0", path, t.epochs,
              t.steps);
  SUBDP_CHECK(t.epochs > 0 || t.steps > 0,
              "{}: [train] epochs and steps are both 0 or missing: give exactly one of "
              "epochs > 0 or steps > 0",
              path);
  SUBDP_CHECK(!c.model.zero_init_residual || c.model.name != ModelKind::mlp,
              "{}: [model] zero_init_residual = true: the MLP has no residual branches "
              "(the key applies to resnet, gpt and llama)",
              path);
  SUBDP_CHECK(c.train.recompute == Recompute::none || c.model.name != ModelKind::mlp,
              "{}: [train] recompute = \"{}\": the MLP has no blocks to recompute (the key applies to resnet, "
              "gpt and llama); use \"none\"",
              path, c.train.recompute);
  SUBDP_CHECK(c.model.width % c.model.heads == 0, "{}: [model] width = {}: must be divisible by heads = {}", path,
              c.model.width, c.model.heads);
  SUBDP_CHECK(c.model.name != ModelKind::llama || (c.model.width / c.model.heads) % 2 == 0,
              "{}: [model] width / heads = {} / {}: llama's rotary embeddings need an even head width", path,
              c.model.width, c.model.heads);
  check_model_keys_apply(c.model, path);
  check_transformer_units(c.model, path);
  const int kv = c.model.kv_heads;
  SUBDP_CHECK(kv == 0 || (kv <= c.model.heads && c.model.heads % kv == 0),
              "{}: [model] kv_heads = {}: must divide heads = {} (each key / value head serves heads / kv_heads "
              "query heads; 0 or heads: multi-head attention)",
              path, kv, c.model.heads);
  // Also under regime = "none": the model registers its heads as units at neuron level.
  SUBDP_CHECK(kv == 0 || kv == c.model.heads || c.mask.granularity == Granularity::block,
              "{}: [model] kv_heads = {} < heads = {} with [mask] granularity = \"neuron\": neuron-level masking "
              "of grouped-query attention is not built yet; use granularity = \"block\" (or kv_heads = 0)",
              path, kv, c.model.heads);
  if (c.mask.regime == MaskRegime::stochastic) {  // name only the settings that are wrong
    std::string wrong;
    if (c.parallel.subnetworks != 1)
      wrong += fmt::format("[parallel] subnetworks = 1 (got {})", c.parallel.subnetworks);
    if (c.mask.granularity != Granularity::block)
      wrong += fmt::format("{}[mask] granularity = \"block\" (got \"{}\")", wrong.empty() ? "" : " and ",
                           c.mask.granularity);
    SUBDP_CHECK(wrong.empty(),
                "{}: [mask] regime = \"stochastic\" (stochastic depth) keeps the whole model on every rank and "
                "drops whole blocks: it needs {}",
                path, wrong);
  }
  const auto& pinned = c.mask.pinned;
  SUBDP_CHECK(pinned.empty() || (c.mask.regime != MaskRegime::none && c.mask.granularity == Granularity::block),
              "{}: [mask] pinned = [{}]: pinned blocks are kept by every subnetwork when whole blocks are dropped; "
              "it needs granularity = \"block\" and regime = \"forward\", \"backward\" or \"stochastic\" (got "
              "granularity \"{}\", regime \"{}\", where it would be ignored)",
              path, fmt::join(pinned, ", "), c.mask.granularity, c.mask.regime);
  for (size_t i = 0; i < pinned.size(); ++i)
    SUBDP_CHECK(std::count(pinned.begin(), pinned.begin() + static_cast<std::ptrdiff_t>(i), pinned[i]) == 0,
                "{}: [mask] pinned = [{}]: block {} is listed twice", path, fmt::join(pinned, ", "), pinned[i]);
  if (masks_subnetworks(c.mask.regime)) {
    double cov = c.mask.keep * c.parallel.subnetworks;
    SUBDP_CHECK(std::fabs(cov - std::round(cov)) < 1e-9,
                "{}: [mask] keep = {}: keep * subnetworks = {} * {} = {:.12g} must be a whole "
                "number (coverage c = r * S)",
                path, c.mask.keep, c.mask.keep, c.parallel.subnetworks, cov);
  }
}

/// Rules of stop signals, gradient alignment, re-dealing, sharding, resume and precision.
void check_features(const Config& c, const std::string& path) {
  try {
    parse_stop_signals(c.train.stop_signals);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
  SUBDP_CHECK(c.log.alignment_every == 0 || masks_subnetworks(c.mask.regime),
              "{}: [log] alignment_every = {}: gradient alignment compares a subnetwork with the full model; it "
              "needs [mask] regime = \"forward\" or \"backward\" (got \"{}\")",
              path, c.log.alignment_every, c.mask.regime);
  SUBDP_CHECK(
      c.mask.redeal_every == 0 || (masks_subnetworks(c.mask.regime) && c.parallel.subnetworks > 1 && c.mask.keep < 1),
      "{}: [mask] redeal_every = {}: re-dealing moves slices between the holders of a subnetwork plan; it "
      "needs [mask] regime = \"forward\" or \"backward\" with keep < 1 and [parallel] subnetworks > 1 "
      "(got regime \"{}\", keep {}, subnetworks {})",
      path, c.mask.redeal_every, c.mask.regime, c.mask.keep, c.parallel.subnetworks);
  SUBDP_CHECK(c.parallel.shard != Sharding::parameters || c.mask.regime != MaskRegime::backward,
              "{}: [parallel] shard = \"parameters\" (FSDP) with [mask] regime = \"backward\": backward masking runs "
              "every block's forward on every rank, so each rank would gather blocks it does not hold; FSDP composes "
              "with \"none\", \"forward\" and \"stochastic\" (use shard = \"gradients\" with backward masking)",
              path);
  SUBDP_CHECK(c.log.alignment_every == 0 || !shards_blocks(c.parallel.shard),
              "{}: [log] alignment_every = {}: gradient alignment reads each block's whole gradient, which [parallel] "
              "shard = \"{}\" frees block by block during the backward pass; use shard = \"optimizer\" or "
              "\"none\" to measure alignment",
              path, c.log.alignment_every, c.parallel.shard);
  SUBDP_CHECK(!c.checkpoint.reset_optimizer || !c.checkpoint.resume.empty(),
              "{}: [checkpoint] reset_optimizer = true: it applies to a resume; set [checkpoint] resume", path);
  SUBDP_CHECK(!c.checkpoint.resumes_newest() || !c.checkpoint.dir.empty(),
              "{}: [checkpoint] resume = \"auto\": needs [checkpoint] dir", path);
  // device.type = "cuda" is checked when the run picks its backend (make_backend): "no CUDA
  // device was found" on a machine without one, rather than a config error.
  SUBDP_CHECK(c.device.precision == Precision::fp32 || c.device.type == DeviceType::cuda,
              "{}: [device] precision = \"{}\": tensor-core GEMMs (TF32, bf16) exist on CUDA devices only "
              "(device.type = \"{}\" computes in fp32); use \"fp32\" or device.type = \"cuda\"",
              path, c.device.precision, c.device.type);
}

/// parallel.overlap: the holder all-reduce of the CPU backend over MPI, or of a CUDA device over
/// NCCL (engine/parallel/overlap.h).
void check_overlap(const Config& c, const std::string& path) {
  if (!c.parallel.overlap) return;
  SUBDP_CHECK(c.parallel.shard == Sharding::none,
              "{}: [parallel] overlap = true with shard = \"{}\": overlap starts the holder all-reduces during the "
              "backward pass; the sharded layouts reduce-scatter instead (ZeRO-2 and FSDP already block by block "
              "during the backward pass); use shard = \"none\" or overlap = false",
              path, c.parallel.shard);
  SUBDP_CHECK(c.device.type != DeviceType::fenced,
              "{}: [parallel] overlap = true with [device] type = \"fenced\": the fenced device's pool is opened by "
              "one thread at a time, and overlap's communication thread would open it during the backward pass; use "
              "type = \"cpu\" or \"cuda\", or overlap = false",
              path);
  SUBDP_CHECK(c.device.type != DeviceType::cuda || c.parallel.backend != CommBackend::mpi,
              "{}: [parallel] overlap = true with [device] type = \"cuda\" and backend = \"{}\": a CUDA device "
              "overlaps through NCCL's streams, and MPI's collectives would block the backward pass; use backend = "
              "\"nccl\" or \"auto\", or overlap = false",
              path, c.parallel.backend);
}

/// The data the model reads, and the CUDA attention's widest head: refused here, naming the
/// file, rather than when the run builds its data source or its first attention layer.
void check_data_and_device(const Config& c, const std::string& path) {
  const bool tokens = is_token_data(c.data.name);
  SUBDP_CHECK(tokens == is_language_model(c.model.name), "{}: [data] name = \"{}\" with [model] name = \"{}\": {}",
              path, c.data.name, c.model.name,
              tokens ? "token data needs model.name = \"gpt\" or \"llama\""
                     : "a language model needs data.name = \"text\" or \"token_shards\"");
  if (c.device.type != DeviceType::cuda || !is_language_model(c.model.name)) return;
  const int hd = c.model.width / c.model.heads;
  SUBDP_CHECK(hd <= kCudaMaxAttentionHeadDim,
              "{}: [model] width / heads = {} / {}: a head of {} columns; the CUDA attention takes at most {} "
              "(more heads, or device.type = \"cpu\")",
              path, c.model.width, c.model.heads, hd, kCudaMaxAttentionHeadDim);
}

}  // namespace

void check_config_rules(const Config& c, const std::string& path) {
  check_model_and_masking(c, path);
  check_shape_arithmetic(c, path);
  check_features(c, path);
  check_overlap(c, path);
  check_data_and_device(c, path);
}

}  // namespace subdp
