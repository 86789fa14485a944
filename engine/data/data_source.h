// Batches for training and evaluation, built from the [data] config: each rank reads its
// own disjoint share of the training split; evaluation walks the held-out split.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/core/batch.h"

namespace subdp {

class DataSource {
 public:
  virtual ~DataSource() = default;
  /// Optimizer steps per epoch (identical on every rank).
  virtual int64_t steps_per_epoch() const = 0;
  /// Fills `batch` with this rank's training batch at (epoch, step within epoch).
  virtual void train_batch(int64_t epoch, int64_t step, Batch& batch) = 0;
  /// Number of evaluation batches of the held-out split (share = rank's part when world > 1).
  virtual int64_t eval_batches(int share_rank, int shares) const = 0;
  /// Fills `batch` with evaluation batch i of a share.
  virtual void eval_batch(int64_t i, int share_rank, int shares, Batch& batch) = 0;
  /// Allocates a batch buffer of the right shapes for batch_size examples.
  virtual Batch make_batch() const = 0;
  /// Short description ("fashion_mnist: 60000 train / 10000 test, 1x28x28").
  virtual std::string describe() const = 0;
  /// CRC32 of every value the source loaded (both splits, labels included): each rank reads
  /// data.path itself, and the ranks compare this at start-up (a partial or stale node-local
  /// copy would otherwise train on other data, or fail later in a misleading collective).
  virtual uint32_t content_crc32() const = 0;
};

/// zlib's CRC32 of n bytes at p, continuing `crc` (0 to start); any n.
uint32_t crc32_bytes(uint32_t crc, const void* p, size_t n);

/// Builds the source named in config.data for rank `rank` of `world`. Errors reading the
/// files (missing, empty, corrupt) name the key: "data.path: <path>: <what>" (or
/// "data.path (default for <name>)" when the key is empty).
std::unique_ptr<DataSource> make_data_source(const Config& config, int rank, int world);

/// The batch buffers (inputs, targets) a data source allocates for config.train.batch_size:
/// (B, T) int32 tokens and targets for gpt and llama, else (N, C, H, W) float32 images and (N) int32 labels.
Batch allocate_batch(const Config& config);

/// Runs load(); an Error or std::filesystem error it throws is rethrown as an Error with the
/// data.path key in front.
template <class Load>
auto with_data_path_key(const Config& c, Load&& load) -> decltype(load()) {
  const auto keyed = [&](const char* what) {
    return Error((c.data.path.empty() ? std::string("data.path (default for ") + name_of(c.data.name) + "): "
                                      : std::string("data.path: ")) +
                 what);
  };
  try {
    return load();
  } catch (const Error& e) {
    throw keyed(e.what());
  } catch (const std::filesystem::filesystem_error& e) {  // a symlink loop in a shard folder, ...
    throw keyed(e.what());
  }
}

}  // namespace subdp
