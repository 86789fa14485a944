// Run configuration: one struct per TOML table of the design brief. Defaults here
// are the documented defaults (configs/README.md). Parsing and validation live in
// engine/cli: config_toml.cpp reads TOML (toml++ is heavy: one translation unit),
// config_schema.cpp lists every key with its rule, config_rules.cpp checks rules between keys.
#pragma once
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace subdp {

// ---- values chosen from a fixed set: enums, with their spellings in the TOML file -----

/// Spellings of a config enum's values in TOML, in the enum's order: Choices<E>::names.
/// The parser (engine/cli/config_toml.cpp) accepts exactly these and writes them back. A
/// table shorter than its enum fails name_of with std::out_of_range, never reads past it.
template <class E>
struct Choices;

/// The TOML spelling of e ("inverse_keep" for MaskScale::inverse_keep).
template <class E>
constexpr const char* name_of(E e) {
  return Choices<E>::names.at(static_cast<size_t>(e));
}

/// The value of E spelled `name` ("forward" for MaskRegime::forward); nullopt when none is.
template <class E>
std::optional<E> choice_named(std::string_view name) {
  const auto& names = Choices<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

#define SUBDP_CHOICES(E, ...)                              \
  template <>                                              \
  struct Choices<E> {                                      \
    static constexpr auto names = std::array{__VA_ARGS__}; \
  }

enum class ModelKind { mlp, resnet, gpt, llama };
SUBDP_CHOICES(ModelKind, "mlp", "resnet", "gpt", "llama");
/// True for the models of token sequences (gpt, llama): (B, T) tokens in, next tokens out.
inline bool is_language_model(ModelKind m) { return m == ModelKind::gpt || m == ModelKind::llama; }
enum class DatasetKind { fashion_mnist, mnist, cifar10, text, token_shards };
SUBDP_CHOICES(DatasetKind, "fashion_mnist", "mnist", "cifar10", "text", "token_shards");
/// True for the token data the language models read (text bytes, llm.c token shards).
inline bool is_token_data(DatasetKind d) { return d == DatasetKind::text || d == DatasetKind::token_shards; }
/// train.nonfinite: what a step whose loss or gradient is not finite does.
enum class NonfinitePolicy { stop, skip };
SUBDP_CHOICES(NonfinitePolicy, "stop", "skip");
/// train.recompute: blocks = each block's activations recomputed from its input in backward.
enum class Recompute { none, blocks };
SUBDP_CHOICES(Recompute, "none", "blocks");
/// train.winograd_tile: the output tile of Winograd convolutions.
enum class WinogradTile { t2x2, t4x4 };
SUBDP_CHOICES(WinogradTile, "2x2", "4x4");
enum class OptimizerKind { sgd, adamw };
SUBDP_CHOICES(OptimizerKind, "sgd", "adamw");
enum class Schedule { cosine, constant };
SUBDP_CHOICES(Schedule, "cosine", "constant");
/// optim.lr_scaling: linear = lr times the world size (Goyal et al. 2017).
enum class LrScaling { none, linear };
SUBDP_CHOICES(LrScaling, "none", "linear");
/// parallel.backend: automatic = nccl for CUDA ranks under mpirun, mpi under mpirun, else local.
enum class CommBackend { automatic, mpi, nccl, local };
SUBDP_CHOICES(CommBackend, "auto", "mpi", "nccl", "local");
/// parallel.shard: what is split over each slice's holders (Rajbhandari et al. 2020).
enum class Sharding {
  none,        // all-reduce every gradient; every holder updates every slice it holds
  optimizer,   // ZeRO-1: reduce-scatter, each holder updates its shard, all-gather the values
  gradients,   // ZeRO-2: ZeRO-1 with each block reduce-scattered right after its backward and
               // only this rank's shard of its gradient kept (ParamLayout::shared_block_grads)
  parameters,  // FSDP (ZeRO-3): ZeRO-2 with each block's values kept as this rank's shard only
               // and all-gathered before the block's forward and backward (shared_block_params)
};
SUBDP_CHOICES(Sharding, "none", "optimizer", "gradients", "parameters");
/// mask.regime: subnetwork masking (forward: dropped parts absent; backward: full forward,
/// gradients of kept parts only) or stochastic depth (whole model, blocks dropped per step).
enum class MaskRegime { none, forward, backward, stochastic };
SUBDP_CHOICES(MaskRegime, "none", "forward", "backward", "stochastic");
/// mask.granularity: whole residual blocks, or neurons / channels / heads inside them.
enum class Granularity { block, neuron };
SUBDP_CHOICES(Granularity, "block", "neuron");
/// mask.scale: inverse_keep = kept parts scaled by 1/keep (inverted dropout).
enum class MaskScale { inverse_keep, none };
SUBDP_CHOICES(MaskScale, "inverse_keep", "none");
enum class DeviceType { cpu, cuda, fenced };
SUBDP_CHOICES(DeviceType, "cpu", "cuda", "fenced");
enum class Precision { fp32, tf32, bf16 };
SUBDP_CHOICES(Precision, "fp32", "tf32", "bf16");
#undef SUBDP_CHOICES

/// Streams print a config enum as its TOML spelling (test failure messages).
template <class E, class = std::void_t<decltype(Choices<E>::names)>>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << name_of(e);
}

/// True for ZeRO-2 and FSDP: each block's gradients are reduce-scattered during the backward
/// pass (and, FSDP, its values gathered around its forward and backward).
inline bool shards_blocks(Sharding s) { return s == Sharding::gradients || s == Sharding::parameters; }

/// True for the regimes that train a subnetwork plan (forward and backward masking).
inline bool masks_subnetworks(MaskRegime r) { return r == MaskRegime::forward || r == MaskRegime::backward; }

/// [model]: architecture and sizes.
struct ModelConfig {
  ModelKind name = ModelKind::mlp;
  // mlp
  std::vector<int> hidden = {1024, 1024};  // hidden layer widths (784 -> hidden... -> classes)
  // resnet
  std::vector<int> widths = {32, 64, 128};  // channels per stage
  int blocks_per_stage = 2;
  // every residual branch starts as 0 (resnet: last BN gamma; gpt: proj and fc2; llama: wo and w2)
  bool zero_init_residual = false;
  // image models
  int in_channels = 1, image_size = 28, classes = 10;
  // gpt and llama
  int vocab = 256, context = 128, width = 256, heads = 8, depth = 6, mlp_ratio = 4;
  // llama: SwiGLU hidden width (0: 8 width / 3 rounded up to a multiple of 64, LLaMA's rule
  // at small sizes), key / value heads for grouped-query attention (0: heads, plain multi-head
  // attention; else a divisor of heads, each shared by heads / kv_heads query heads) and the
  // RoPE base theta
  int ffn_width = 0;
  int kv_heads = 0;
  double rope_theta = 10000.0;
};
/// The LLaMA's key / value heads: kv_heads, or heads when 0 (multi-head attention).
inline int llama_kv_heads(const ModelConfig& c) { return c.kv_heads > 0 ? c.kv_heads : c.heads; }
/// The LLaMA SwiGLU hidden width of `c`: ffn_width, or 8 width / 3 rounded up to a multiple of 64.
inline int llama_ffn_width(const ModelConfig& c) {
  return c.ffn_width > 0 ? c.ffn_width : (8 * c.width / 3 + 63) / 64 * 64;
}

/// [data]: dataset and where it lives.
struct DataConfig {
  DatasetKind name = DatasetKind::fashion_mnist;
  std::string path;           // directory or file; empty = dataset default
  double val_fraction = 0.1;  // text: share of bytes held out for validation
  bool normalize = true;      // images: subtract mean / divide std of the train split
};

/// [train]: loop length, batch and logging cadence.
struct TrainConfig {
  int epochs = 0;          // 0 = use steps
  int64_t steps = 0;       // total optimizer steps when epochs = 0
  int batch_size = 128;    // per rank
  int64_t eval_every = 0;  // steps between evaluations; 0 = once per epoch
  int eval_batches = 64;   // text: validation batches per evaluation
  uint64_t seed = 0;       // weights, data order, sampler
  int threads = 0;         // BLAS/OpenMP threads per rank; 0 = cores / local ranks
  NonfinitePolicy nonfinite = NonfinitePolicy::stop;
  Recompute recompute = Recompute::none;
  int max_skipped_steps = 5;  // skip: at most this many consecutive skipped steps, then stop (non-zero)
  WinogradTile winograd_tile = WinogradTile::t2x2;
  // Signals that stop the run at the end of its step with a checkpoint (engine/train/stop_signals.h).
  std::string stop_signals = "SIGTERM,SIGUSR1";
  bool allow_overcommit = false;  // train even when the plan's bytes exceed the memory available
};

/// The Winograd output tile side train.winograd_tile asks for: 2 or 4.
inline int winograd_tile_side(const TrainConfig& t) { return t.winograd_tile == WinogradTile::t4x4 ? 4 : 2; }

/// [optim]: optimizer and learning-rate schedule.
struct OptimConfig {
  OptimizerKind name = OptimizerKind::sgd;
  double lr = 0.05;  // base learning rate (per reference batch, see lr_scaling)
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t warmup_steps = 0;
  Schedule schedule = Schedule::cosine;
  double min_lr_ratio = 0.0;  // cosine floor as a fraction of lr
  LrScaling lr_scaling = LrScaling::none;
  double grad_clip = 0.0;  // global gradient-norm clip; 0 = off
};

/// [parallel]: layout of ranks.
struct ParallelConfig {
  int subnetworks = 1;  // S; S = 1 is plain DP
  CommBackend backend = CommBackend::automatic;
  double bucket_mb = 25.0;            // largest all-reduce or owner-broadcast message, and the comm buffer's cap, MiB
  double collective_timeout_s = 300;  // watchdog on a collective
  Sharding shard = Sharding::none;
  // all-reduce each block's gradients during the backward pass, on a communication thread
  bool overlap = false;
};

/// [mask]: subnetwork masking regime.
struct MaskConfig {
  MaskRegime regime = MaskRegime::none;
  Granularity granularity = Granularity::block;
  double keep = 1.0;  // keep ratio r; r * S must be whole
  uint64_t seed = 0;  // plan seed
  MaskScale scale = MaskScale::inverse_keep;
  std::vector<int> pinned;   // block indices always kept (block level)
  int64_t redeal_every = 0;  // steps between re-deals of the plan (deal d: deal_seed(seed, d)); 0 = never
};

/// [device]
struct DeviceConfig {
  DeviceType type = DeviceType::cpu;
  Precision precision = Precision::fp32;
};

/// [checkpoint]
struct CheckpointConfig {
  std::string dir;    // empty = no checkpoints
  int64_t every = 0;  // steps between checkpoints; 0 = only at the end (when dir is set)
  int keep_last = 3;
  std::string resume;  // empty, "auto" (newest complete in dir) or a checkpoint path
  /// True for resume = "auto": the newest complete checkpoint in dir.
  bool resumes_newest() const { return resume == "auto"; }
  bool reset_optimizer = false;  // resume: load the weights only; optimizer state starts from zero
};

/// [log]
struct LogConfig {
  int64_t every = 50;           // steps between progress lines
  std::string metrics_file;     // JSON lines; empty = none. "{rank}" is replaced by the rank.
  int64_t alignment_every = 0;  // steps between gradient-alignment probes (masked regimes); 0 = none
};

/// The whole run configuration.
struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  MaskConfig mask;
  DeviceConfig device;
  CheckpointConfig checkpoint;
  LogConfig log;
  std::string source;  // file the config came from (for messages)
};

/// "<source>: ", the prefix of a message about this config's keys found after loading (by the
/// run, against its world size); empty for a config built in code.
inline std::string config_origin(const Config& c) { return c.source.empty() ? std::string() : c.source + ": "; }

/// Loads a TOML file, applies "--set table.key=value" overrides, validates every key
/// (unknown key, wrong type, out-of-range value: subdp::Error naming file and key).
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

/// Parses TOML text (path used only in messages). Same checks as load_config.
Config parse_config(const std::string& text, const std::string& path, const std::vector<std::string>& overrides);

/// Canonical TOML text of a config (every key), stored in checkpoints and hashed across ranks.
std::string config_to_toml(const Config& c);

}  // namespace subdp

/// fmt prints a config enum as its TOML spelling.
template <class E>
struct fmt::formatter<E, char, std::void_t<decltype(subdp::Choices<E>::names)>> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(E e, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(subdp::name_of(e), ctx);
  }
};
