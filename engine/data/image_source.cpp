// Image classification data source (Fashion-MNIST, MNIST, CIFAR-10).
#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "engine/data/dataset.h"
#include "engine/data/data_source.h"
#include "engine/core/error.h"

namespace subdp {

std::unique_ptr<DataSource> make_text_source(const Config& config, int rank, int world);

namespace {

std::string default_path(DatasetKind name) {
  if (name == DatasetKind::fashion_mnist) return "/usr/share/datasets/fashion-mnist";
  if (name == DatasetKind::mnist) return "/usr/share/datasets/mnist";
  return "data/cifar-10-batches-bin";
}

class ImageSource : public DataSource {
 public:
  ImageSource(const Config& c, int rank, int world)
      : config_(c), name_(c.data.name), batch_size_(c.train.batch_size), sampler_(0, 1, 0, 1, 0) {
    const std::string dir = c.data.path.empty() ? default_path(c.data.name) : c.data.path;
    const bool cifar = c.data.name == DatasetKind::cifar10;
    with_data_path_key(c, [&] {
      train_ = cifar ? load_cifar10_dir(dir, true) : load_mnist_dir(dir, true);
      test_ = cifar ? load_cifar10_dir(dir, false) : load_mnist_dir(dir, false);
    });
    // An empty split (its files' counts 0) would make every evaluation NaN, or the
    // normalisation's statistics a division by zero.
    for (const auto& [split, d, files] : {std::tuple{"train", &train_, cifar ? "data_batch_*.bin" : "train-*"},
                                          std::tuple{"test", &test_, cifar ? "test_batch.bin" : "t10k-*"}})
      SUBDP_CHECK(d->n > 0,
                  "data.path = \"{}\": the {} split holds no images (its files {} count 0); a run needs "
                  "both splits",
                  dir, split, files);
    // Each split, every side: a batch holds in_channels x image_size^2 floats a sample, and a
    // sample of another size would be copied past it (or leave part of it stale).
    const int side = c.model.image_size;
    for (const auto& [split, d] : {std::pair{"train", &train_}, std::pair{"test", &test_}})
      SUBDP_CHECK(d->channels == c.model.in_channels && d->height == side && d->width == side,
                  "data.path = \"{}\": the {} split has {}x{}x{} images (channels x height x width), but the model "
                  "expects {}x{}x{} ([model] in_channels = {}, image_size = {})",
                  dir, split, d->channels, d->height, d->width, c.model.in_channels, side, side, c.model.in_channels,
                  side);
    check_labels(train_, c.model.classes, "train");
    check_labels(test_, c.model.classes, "test");
    if (c.data.normalize) {
      std::vector<float> mean, stddev;
      channel_stats(train_, mean, stddev);  // train statistics, applied to both splits
      with_data_path_key(c, [&] {
        normalize(train_, mean, stddev);
        normalize(test_, mean, stddev);
      });
    }
    sampler_ = EpochSampler(train_.n, batch_size_, rank, world, c.train.seed);
  }
  int64_t steps_per_epoch() const override { return sampler_.steps_per_epoch(); }
  Batch make_batch() const override { return allocate_batch(config_); }
  void train_batch(int64_t epoch, int64_t step, Batch& b) override {
    fill(train_, sampler_.batch_indices(epoch, step), b);
  }
  int64_t eval_batches(int share_rank, int shares) const override {
    const int64_t n = share_size(share_rank, shares);
    return (n + batch_size_ - 1) / batch_size_;
  }
  void eval_batch(int64_t i, int share_rank, int shares, Batch& b) override {
    // Share r holds test examples r, r + shares, ...; batch i covers its i-th chunk.
    const int64_t n = share_size(share_rank, shares);
    std::vector<int64_t> idx;
    for (int64_t k = i * batch_size_; k < std::min(n, (i + 1) * batch_size_); ++k)
      idx.push_back(k * shares + share_rank);
    fill(test_, idx, b);
  }
  uint32_t content_crc32() const override {
    uint32_t crc = 0;
    for (const ImageDataset* d : {&train_, &test_}) {
      crc = crc32_bytes(crc, d->images.data(), d->images.size() * sizeof(float));
      crc = crc32_bytes(crc, d->labels.data(), d->labels.size() * sizeof(int32_t));
    }
    return crc;
  }
  std::string describe() const override {
    return fmt::format("{}: {} train / {} test, {}x{}x{}", name_, train_.n, test_.n, train_.channels, train_.height,
                       train_.width);
  }

 private:
  int64_t share_size(int r, int shares) const { return (test_.n - r + shares - 1) / shares; }
  static void fill(const ImageDataset& d, const std::vector<int64_t>& idx, Batch& b) {
    const int64_t per = d.sample_size();
    float* x = b.x_host.f32();
    int32_t* y = b.y_host.i32();
    for (size_t k = 0; k < idx.size(); ++k) {
      std::memcpy(x + k * per, d.images.data() + idx[k] * per, sizeof(float) * per);
      y[k] = d.labels[idx[k]];
    }
    b.n = static_cast<int64_t>(idx.size());
    b.upload();
  }
  Config config_;
  DatasetKind name_;
  int batch_size_;
  ImageDataset train_, test_;
  EpochSampler sampler_;
};

}  // namespace

std::unique_ptr<DataSource> make_data_source(const Config& c, int rank, int world) {
  if (is_token_data(c.data.name)) return make_text_source(c, rank, world);
  SUBDP_CHECK(!is_language_model(c.model.name),
              "model.name = \"{}\" needs data.name = \"text\" or \"token_shards\", not \"{}\"", c.model.name,
              c.data.name);
  return std::make_unique<ImageSource>(c, rank, world);
}

}  // namespace subdp
