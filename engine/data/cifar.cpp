// CIFAR-10 binary reader: data_batch_1..5.bin (train) or test_batch.bin (test),
// 3073-byte records (label, then 3x32x32 pixels in CHW order).
#include <cstdio>
#include <filesystem>

#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

namespace fs = std::filesystem;

constexpr int kSide = 32, kChannels = 3, kClasses = 10;
constexpr size_t kPixels = size_t{kChannels} * kSide * kSide;
constexpr size_t kRecord = 1 + kPixels;     // 3073
constexpr size_t kStandardRecords = 10000;  // per batch file of the published dataset

/// The batch files of a split, in order. Accepts dir or dir/cifar-10-batches-bin.
std::vector<std::string> batch_paths(const std::string& dir, bool train) {
  SUBDP_CHECK(fs::is_directory(dir), "{}: CIFAR-10 directory not found", dir);
  fs::path root(dir);
  const std::string first = train ? "data_batch_1.bin" : "test_batch.bin";
  if (!fs::exists(root / first) && fs::exists(root / "cifar-10-batches-bin" / first)) root /= "cifar-10-batches-bin";
  if (!train) return {(root / "test_batch.bin").string()};
  std::vector<std::string> paths;
  for (int i = 1; i <= 5; ++i) paths.push_back((root / fmt::format("data_batch_{}.bin", i)).string());
  return paths;
}

/// Appends the records of one batch file to d.
void append_batch(const std::string& path, ImageDataset& d) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, false);
  SUBDP_CHECK(!bytes.empty() && bytes.size() % kRecord == 0,
              "{}: size {} bytes is not a positive multiple of the {}-byte CIFAR-10 record", path, bytes.size(),
              kRecord);
  const size_t records = bytes.size() / kRecord;
  if (records != kStandardRecords)  // whole records missing (or extra): readable, but not the standard set
    std::fprintf(stderr, "subdp: warning: %s holds %zu records; a standard CIFAR-10 batch file holds %zu\n",
                 path.c_str(), records, kStandardRecords);
  const size_t base = d.labels.size();
  d.label_files.emplace_back(path, static_cast<int64_t>(base));
  d.labels.resize(base + records);
  d.images.resize((base + records) * kPixels);
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * kRecord;
    SUBDP_CHECK(rec[0] < kClasses, "{}: label {} in record {} out of range [0, {})", path, int{rec[0]}, r, kClasses);
    d.labels[base + r] = rec[0];
    float* dst = d.images.data() + (base + r) * kPixels;
    for (size_t i = 0; i < kPixels; ++i) dst[i] = rec[1 + i] * (1.0f / 255.0f);
  }
}

}  // namespace

ImageDataset load_cifar10_dir(const std::string& dir, bool train) {
  ImageDataset d;
  d.channels = kChannels;
  d.height = d.width = kSide;
  d.classes = kClasses;
  for (const auto& path : batch_paths(dir, train)) append_batch(path, d);
  d.n = static_cast<int64_t>(d.labels.size());
  return d;
}

}  // namespace subdp
