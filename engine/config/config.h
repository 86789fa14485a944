// Run configuration: one struct per TOML table of the design brief. Defaults here
// are the documented defaults (configs/README.md). Parsing and validation live in
// engine/cli/config_toml.cpp (toml++ is heavy: one translation unit).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace subdp {

/// [model]: architecture and sizes.
struct ModelConfig {
  std::string name = "mlp";           // mlp, resnet, gpt
  // mlp
  std::vector<int> hidden = {1024, 1024};  // hidden layer widths (784 -> hidden... -> classes)
  // resnet
  std::vector<int> widths = {32, 64, 128};  // channels per stage
  int blocks_per_stage = 2;
  // every residual branch starts as 0 (resnet: last BN gamma; gpt: proj and fc2 weights)
  bool zero_init_residual = false;
  // image models
  int in_channels = 1, image_size = 28, classes = 10;
  // gpt
  int vocab = 256, context = 128, width = 256, heads = 8, depth = 6, mlp_ratio = 4;
};

/// [data]: dataset and where it lives.
struct DataConfig {
  std::string name = "fashion_mnist";  // fashion_mnist, mnist, cifar10, text, token_shards
  std::string path;                    // directory or file; empty = dataset default
  double val_fraction = 0.1;           // text: share of bytes held out for validation
  bool normalize = true;               // images: subtract mean / divide std of the train split
};

/// [train]: loop length, batch and logging cadence.
struct TrainConfig {
  int epochs = 0;           // 0 = use steps
  int64_t steps = 0;        // total optimizer steps when epochs = 0
  int batch_size = 128;     // per rank
  int64_t eval_every = 0;   // steps between evaluations; 0 = once per epoch (text: every 200)
  int eval_batches = 64;    // text: validation batches per evaluation
  uint64_t seed = 0;        // weights, data order, sampler
  int threads = 0;          // BLAS/OpenMP threads per rank; 0 = cores / local ranks
  std::string nonfinite = "stop";  // stop or skip a step whose loss/gradient is not finite
  std::string recompute = "none";  // none, or blocks: activations recomputed block by block in backward (GPT)
  int max_skipped_steps = 5;       // skip: at most this many consecutive skipped steps, then stop (non-zero)
  std::string winograd_tile = "2x2";  // 2x2 or 4x4: output tile of Winograd convolutions
  // Signals that stop the run at the end of its step with a checkpoint (engine/train/stop_signals.h).
  std::string stop_signals = "SIGTERM,SIGUSR1";
  bool allow_overcommit = false;  // train even when the plan's bytes exceed the memory available
};

/// The Winograd output tile side train.winograd_tile asks for: 2 or 4.
inline int winograd_tile_side(const TrainConfig& t) { return t.winograd_tile == "4x4" ? 4 : 2; }

/// [optim]: optimizer and learning-rate schedule.
struct OptimConfig {
  std::string name = "sgd";  // sgd, adamw
  double lr = 0.05;          // base learning rate (per reference batch, see lr_scaling)
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t warmup_steps = 0;
  std::string schedule = "cosine";  // cosine, constant
  double min_lr_ratio = 0.0;        // cosine floor as a fraction of lr
  std::string lr_scaling = "none";  // none, linear (Goyal et al. 2017: lr * world size)
  double grad_clip = 0.0;           // global gradient-norm clip; 0 = off
};

/// [parallel]: layout of ranks.
struct ParallelConfig {
  int subnetworks = 1;               // S; S = 1 is plain DP
  std::string backend = "auto";      // auto, mpi, nccl, local
  double bucket_mb = 25.0;           // largest all-reduce or owner-broadcast message, and the comm buffer's cap, MiB
  double collective_timeout_s = 300; // watchdog on a collective
  std::string shard = "none";        // none, optimizer (ZeRO-1: optimizer state split over each slice's holders)
};

/// [mask]: subnetwork masking regime.
struct MaskConfig {
  std::string regime = "none";        // none, forward, backward
  std::string granularity = "block";  // block, neuron
  double keep = 1.0;                  // keep ratio r; r * S must be whole
  uint64_t seed = 0;                  // plan seed
  std::string scale = "inverse_keep"; // inverse_keep, none
  std::vector<int> pinned;            // block indices always kept (block level)
  int64_t redeal_every = 0;           // steps between re-deals of the plan (deal d: seed + d); 0 = never
};

/// [device]
struct DeviceConfig {
  std::string type = "cpu";         // cpu, cuda
  std::string precision = "fp32";   // fp32, bf16
};

/// [checkpoint]
struct CheckpointConfig {
  std::string dir;        // empty = no checkpoints
  int64_t every = 0;      // steps between checkpoints; 0 = only at the end (when dir is set)
  int keep_last = 3;
  std::string resume;     // empty, "auto" (newest complete in dir) or a checkpoint path
  bool reset_optimizer = false;  // resume: load the weights only; optimizer state starts from zero
};

/// [log]
struct LogConfig {
  int64_t every = 50;        // steps between progress lines
  std::string metrics_file;  // JSON lines; empty = none. "{rank}" is replaced by the rank.
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

/// Loads a TOML file, applies "--set table.key=value" overrides, validates every key
/// (unknown key, wrong type, out-of-range value: subdp::Error naming file and key).
Config load_config(const std::string& path, const std::vector<std::string>& overrides);

/// Parses TOML text (path used only in messages). Same checks as load_config.
Config parse_config(const std::string& text, const std::string& path,
                    const std::vector<std::string>& overrides);

/// Canonical TOML text of a config (every key), stored in checkpoints and hashed across ranks.
std::string config_to_toml(const Config& c);

}  // namespace subdp
