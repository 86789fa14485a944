// Datasets held in host memory: labelled images (Fashion-MNIST, MNIST, CIFAR-10)
// and byte / token streams (text, llm.c token shards). Readers validate every
// header and size and throw subdp::Error naming the file on any problem.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace subdp {

/// Whole file as bytes. With `gunzip`, a gzip stream (magic 1f 8b, one or more members) is
/// decompressed incrementally; otherwise the bytes are returned as stored.
/// Errors: missing or unreadable file, a directory, a device / FIFO / socket (read to the end,
/// so procfs files of stat size 0 are read whole), corrupt or truncated gzip stream.
std::vector<uint8_t> read_file_bytes(const std::string& path, bool gunzip);

/// Labelled images, float32 NCHW in [0, 1] (or normalised), labels in [0, classes).
struct ImageDataset {
  int64_t n = 0;
  int channels = 0, height = 0, width = 0,
      classes = 10;             // CIFAR-10: its format's 10; IDX: 1 + the largest label the file holds
  std::vector<float> images;    // (n, channels, height, width)
  std::vector<int32_t> labels;  // (n)
  /// Files the labels came from: (path, index of its first label), in order.
  std::vector<std::pair<std::string, int64_t>> label_files;
  int64_t sample_size() const { return static_cast<int64_t>(channels) * height * width; }
  /// The file holding label i (for messages).
  std::string label_file(int64_t i) const;
};

/// Throws unless every label is in [0, classes): the message names the label file, the
/// label, its example and `[model] classes`. Checked when the data loads, not at a batch.
void check_labels(const ImageDataset& d, int classes, const std::string& split);

/// Reads an IDX image file and its IDX label file (gzip-compressed or raw, detected by magic).
/// Errors: missing file, wrong magic (expects 0x00000803 / 0x00000801), truncated data,
/// count mismatch between images and labels, label out of range.
ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path);

/// Fashion-MNIST or MNIST split from a directory holding the four standard
/// *-idx?-ubyte(.gz) files (train-*, t10k-*).
ImageDataset load_mnist_dir(const std::string& dir, bool train);

/// CIFAR-10 binary batches (data_batch_1..5.bin / test_batch.bin) from dir.
/// Errors: missing batch, size not a multiple of 3073 bytes, label > 9.
ImageDataset load_cifar10_dir(const std::string& dir, bool train);

/// Per-channel statistics of a dataset for normalisation: mean and population standard
/// deviation (over n H W values) of each channel, written into `mean` and `stddev` (resized to
/// the channel count). Errors: an empty dataset, or images.size() != n C H W.
void channel_stats(const ImageDataset& d, std::vector<float>& mean, std::vector<float>& stddev);
/// x = (x - mean[c]) / std[c] in place. Errors: mean or stddev not one value per channel, a
/// stddev <= 0, images.size() != n C H W.
void normalize(ImageDataset& d, const std::vector<float>& mean, const std::vector<float>& stddev);

/// A token stream: bytes of a text file (vocab 256) or the tokens of token shards.
struct TokenStream {
  /// 2 bytes a token (vocab <= 65536, llm.c's shard format): the whole stream is held per rank.
  std::vector<uint16_t> tokens;
  int vocab = 256;
  /// Index of the first token of a held-out validation stream that the data names itself
  /// (llm.c's *_val_* shards), or -1: the source then splits by data.val_fraction.
  int64_t val_begin = -1;
};

/// Whole file as bytes (tokens 0..255). Errors: missing or empty file.
TokenStream load_text_bytes(const std::string& path);

/// llm.c token shard: 256 x int32 header (magic 20240520, version 1, token count), then
/// uint16 tokens. Errors: short header, wrong magic/version, size != header count,
/// token >= vocab. `path` may be one file or a directory of *.bin shards (sorted by name). In a
/// directory, shards whose name holds "_val_" (llm.c's layout: fineweb_val_000000.bin) come
/// after all the others and start the validation stream (val_begin), so none of them is trained on.
TokenStream load_token_shards(const std::string& path, int vocab);

/// Deterministic sampler over n examples for rank `rank` of `world`: each epoch draws a
/// seeded permutation of all n (same on every rank), and rank w takes batch slots
/// w, w + world, ... so shares are disjoint. steps_per_epoch() = floor(n / (batch * world)),
/// identical on every rank whatever the data size.
class EpochSampler {
 public:
  /// Errors: batch <= 0, rank outside [0, world), n < 0.
  EpochSampler(int64_t n, int batch, int rank, int world, uint64_t seed);
  /// Errors ("dataset too small", naming train.batch_size) when n < batch x world.
  int64_t steps_per_epoch() const;
  /// Example indices (batch) of this rank at (epoch, step within epoch). Errors: epoch < 0,
  /// step outside [0, steps_per_epoch()).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t step) const;

 private:
  int64_t n_;
  int batch_, rank_, world_;
  uint64_t seed_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> perm_;
};

/// Random windows of T+1 tokens from a stream, from a seeded generator whose stream is
/// disjoint per rank: window starts for (step, rank) depend only on (seed, step, rank), so
/// resuming at a step reproduces the same batches.
class WindowSampler {
 public:
  /// Errors: T or batch <= 0, rank < 0, a stream shorter than T + 2 tokens.
  WindowSampler(int64_t n_tokens, int T, int batch, int rank, uint64_t seed);
  /// Start offsets (batch) of windows for this rank at global step `step`.
  std::vector<int64_t> starts(int64_t step) const;

 private:
  int64_t n_tokens_;
  int T_, batch_, rank_;
  uint64_t seed_;
};

}  // namespace subdp
