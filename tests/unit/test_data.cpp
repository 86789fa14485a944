// Tests of engine/data: IDX / CIFAR-10 / token-shard / text readers (good files and
// every rejected defect), normalisation, EpochSampler, WindowSampler, real Fashion-MNIST.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/hash.h"
#include "engine/config/config.h"
#include "engine/data/data_source.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace fs = std::filesystem;
using subdp::Error;
using Bytes = std::vector<uint8_t>;

namespace {

/// A fresh temp directory per test, removed afterwards.
class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("subdp_test_data_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void put_le32(Bytes& b, int32_t v) {
  for (int s = 0; s < 32; s += 8) b.push_back(static_cast<uint8_t>(static_cast<uint32_t>(v) >> s));
}

/// IDX3 image file: n images of rows x cols, pixel (i, k) = (i * 7 + k) % 256.
Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t k = 0; k < rows * cols; ++k) b.push_back(static_cast<uint8_t>((i * 7 + k) % 256));
  return b;
}

Bytes idx_labels(const std::vector<int>& labels) {
  Bytes b;
  put_be32(b, 0x801);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  for (int l : labels) b.push_back(static_cast<uint8_t>(l));
  return b;
}

/// Runs fn, expects subdp::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected subdp::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what << " lacks " << p;
  }
}

void check_images(const subdp::ImageDataset& d, int n, int rows, int cols) {
  ASSERT_EQ(d.n, n);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.height, rows);
  EXPECT_EQ(d.width, cols);
  ASSERT_EQ(d.images.size(), static_cast<size_t>(n * rows * cols));
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < rows * cols; ++k) ASSERT_FLOAT_EQ(d.images[i * rows * cols + k], ((i * 7 + k) % 256) / 255.0f);
}

/// llm.c shard: header (magic, version, count) then uint16 tokens.
Bytes shard(const std::vector<int>& tokens, int32_t magic = 20240520, int32_t version = 1, int32_t count = -1) {
  Bytes b;
  put_le32(b, magic);
  put_le32(b, version);
  put_le32(b, count < 0 ? static_cast<int32_t>(tokens.size()) : count);
  b.resize(1024, 0);
  for (int t : tokens) {
    b.push_back(static_cast<uint8_t>(t & 0xff));
    b.push_back(static_cast<uint8_t>(t >> 8));
  }
  return b;
}

Bytes cifar_records(int n, int bad_label_at = -1) {
  Bytes b;
  for (int r = 0; r < n; ++r) {
    b.push_back(static_cast<uint8_t>(r == bad_label_at ? 10 : r % 10));
    for (int k = 0; k < 3072; ++k) b.push_back(static_cast<uint8_t>((r + k) % 256));
  }
  return b;
}

}  // namespace

// ---------------------------------------------------------------- IDX

using DataIdx = DataFiles;

TEST_F(DataIdx, RoundTripRaw) {
  write_bytes(path("img"), idx_images(5, 3, 4));
  write_bytes(path("lab"), idx_labels({0, 1, 9, 3, 4}));
  const auto d = subdp::load_idx_pair(path("img"), path("lab"));
  check_images(d, 5, 3, 4);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{0, 1, 9, 3, 4}));
}

TEST_F(DataIdx, RoundTripGzip) {
  write_gz(path("img.gz"), idx_images(300, 28, 28));
  std::vector<int> labels(300);
  for (int i = 0; i < 300; ++i) labels[i] = i % 10;
  write_gz(path("lab.gz"), idx_labels(labels));
  const auto d = subdp::load_idx_pair(path("img.gz"), path("lab.gz"));
  check_images(d, 300, 28, 28);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(d.labels[i], i % 10);
}

TEST_F(DataIdx, MnistDirAcceptsGzipAndRawNames) {
  write_gz(path("train-images-idx3-ubyte.gz"), idx_images(4, 2, 2));
  write_gz(path("train-labels-idx1-ubyte.gz"), idx_labels({1, 2, 3, 4}));
  write_bytes(path("t10k-images-idx3-ubyte"), idx_images(2, 2, 2));
  write_bytes(path("t10k-labels-idx1-ubyte"), idx_labels({5, 6}));
  check_images(subdp::load_mnist_dir(dir_.string(), true), 4, 2, 2);
  check_images(subdp::load_mnist_dir(dir_.string(), false), 2, 2, 2);
}

// A split whose files count 0 images is refused naming it (it gave NaN evaluations, exit 0;
// an empty train split an internal "channel_stats: empty dataset").
TEST_F(DataIdx, AnEmptySplitIsRefusedNamingIt) {
  subdp::Config c;
  c.data.name = subdp::DatasetKind::fashion_mnist;
  c.data.path = dir_.string();
  for (const std::string empty : {"test", "train"}) {
    const bool train_empty = empty == "train";
    write_bytes(path("train-images-idx3-ubyte"), idx_images(train_empty ? 0 : 4, 28, 28));
    write_bytes(path("train-labels-idx1-ubyte"),
                idx_labels(train_empty ? std::vector<int>{} : std::vector<int>{1, 2, 3, 4}));
    write_bytes(path("t10k-images-idx3-ubyte"), idx_images(train_empty ? 2 : 0, 28, 28));
    write_bytes(path("t10k-labels-idx1-ubyte"), idx_labels(train_empty ? std::vector<int>{5, 6} : std::vector<int>{}));
    expect_error([&] { subdp::make_data_source(c, 0, 1); },
                 {"data.path = \"" + dir_.string() + "\"", "the " + empty + " split holds no images",
                  train_empty ? "train-*" : "t10k-*"});
  }
}

TEST_F(DataIdx, MnistDirMissingFiles) {
  expect_error([&] { subdp::load_mnist_dir(dir_.string(), true); }, {dir_.string(), "train-images-idx3-ubyte.gz"});
  expect_error([&] { subdp::load_mnist_dir(path("nope"), true); }, {"nope", "not found"});
}

TEST_F(DataIdx, WrongMagic) {
  write_gz(path("train-images-idx3-ubyte.gz"), idx_images(2, 2, 2, 0x801));
  write_bytes(path("lab"), idx_labels({0, 1}));
  expect_error([&] { subdp::load_idx_pair(path("train-images-idx3-ubyte.gz"), path("lab")); },
               {"train-images-idx3-ubyte.gz", "wrong magic 0x00000801", "expected 0x00000803"});
  expect_error([&] { subdp::load_idx_pair(path("lab"), path("lab")); }, {"lab", "wrong magic"});
}

TEST_F(DataIdx, TruncatedImages) {
  Bytes b = idx_images(5, 3, 4);
  b.resize(b.size() - 3);
  write_bytes(path("img"), b);
  write_bytes(path("lab"), idx_labels({0, 1, 2, 3, 4}));
  expect_error([&] { subdp::load_idx_pair(path("img"), path("lab")); }, {"img", "truncated", "5 images of 3x4"});
  write_bytes(path("short"), Bytes{0, 0, 8, 3, 0});  // right magic, header cut
  expect_error([&] { subdp::load_idx_pair(path("short"), path("lab")); }, {"short", "too short"});
}

TEST_F(DataIdx, HugeHeaderCountIsRejectedBeforeAllocating) {
  Bytes b;
  put_be32(b, 0x803);
  put_be32(b, 0xffffffffu);
  put_be32(b, 28);
  put_be32(b, 28);
  write_bytes(path("img"), b);
  write_bytes(path("lab"), idx_labels({0}));
  expect_error([&] { subdp::load_idx_pair(path("img"), path("lab")); }, {"img", "truncated", "4294967295 images"});
  b.resize(8);
  put_be32(b, 0xffffffffu);
  put_be32(b, 0xffffffffu);
  write_bytes(path("img"), b);
  expect_error([&] { subdp::load_idx_pair(path("img"), path("lab")); }, {"img", "implausible"});
}

TEST_F(DataIdx, TruncatedGzipStream) {
  write_gz(path("full.gz"), idx_images(50, 28, 28));
  const Bytes gz = read_bytes(path("full.gz"));
  write_bytes(path("lab"), idx_labels(std::vector<int>(50, 1)));
  for (size_t keep : {gz.size() / 2, gz.size() - 4, size_t{12}}) {
    write_bytes(path("cut.gz"), Bytes(gz.begin(), gz.begin() + static_cast<long>(keep)));
    expect_error([&] { subdp::load_idx_pair(path("cut.gz"), path("lab")); }, {"cut.gz"});
  }
  write_bytes(path("cut.gz"), Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  expect_error([&] { subdp::load_idx_pair(path("cut.gz"), path("lab")); }, {"cut.gz", "truncated gzip stream"});
}

TEST_F(DataIdx, CorruptGzipStream) {
  write_gz(path("full.gz"), idx_images(50, 28, 28));
  Bytes gz = read_bytes(path("full.gz"));
  for (size_t i = 20; i < 60; ++i) gz[i] ^= 0x5a;
  write_bytes(path("bad.gz"), gz);
  write_bytes(path("lab"), idx_labels(std::vector<int>(50, 1)));
  expect_error([&] { subdp::load_idx_pair(path("bad.gz"), path("lab")); }, {"bad.gz"});
}

TEST_F(DataIdx, LabelCountMismatch) {
  write_bytes(path("img"), idx_images(3, 2, 2));
  write_bytes(path("labels-file"), idx_labels({0, 1}));
  expect_error([&] { subdp::load_idx_pair(path("img"), path("labels-file")); },
               {"labels-file", "2 labels", "3 images"});
  Bytes b = idx_labels({0, 1, 2});
  b.pop_back();
  write_bytes(path("labels-file"), b);
  expect_error([&] { subdp::load_idx_pair(path("img"), path("labels-file")); },
               {"labels-file", "truncated", "3 labels"});
}

// IDX labels are any byte (EMNIST has 47 classes): [model] classes decides which are valid
// (the reader refused labels >= 10, blaming the file, whatever classes said).
TEST_F(DataIdx, LabelsAreCheckedAgainstTheModelsClasses) {
  write_bytes(path("train-images-idx3-ubyte"), idx_images(3, 28, 28));
  write_bytes(path("train-labels-idx1-ubyte"), idx_labels({0, 46, 2}));
  write_bytes(path("t10k-images-idx3-ubyte"), idx_images(2, 28, 28));
  write_bytes(path("t10k-labels-idx1-ubyte"), idx_labels({1, 45}));
  subdp::Config c;
  c.data.name = subdp::DatasetKind::mnist;
  c.data.path = dir_.string();
  c.model.classes = 47;
  EXPECT_NO_THROW(subdp::make_data_source(c, 0, 1));
  c.model.classes = 10;
  expect_error([&] { subdp::make_data_source(c, 0, 1); },
               {"train-labels-idx1-ubyte", "label 46", "[model] classes = 10", "this dataset has 47 classes"});
}

// Images of another size than the model's: a wider train split segfaulted at the first batch,
// a larger test split at the evaluation, and a smaller one gave a meaningless accuracy, exit 0.
TEST_F(DataIdx, ImagesOfAnotherSizeAreRefusedNamingTheSplit) {
  struct Case {
    uint32_t train_rows, train_cols, test_side;
    std::string split, sizes;
  };
  for (const Case& k : {Case{28, 56, 28, "train", "1x28x56"}, Case{28, 28, 56, "test", "1x56x56"},
                        Case{28, 28, 14, "test", "1x14x14"}}) {
    write_bytes(path("train-images-idx3-ubyte"), idx_images(4, k.train_rows, k.train_cols));
    write_bytes(path("train-labels-idx1-ubyte"), idx_labels({1, 2, 3, 4}));
    write_bytes(path("t10k-images-idx3-ubyte"), idx_images(2, k.test_side, k.test_side));
    write_bytes(path("t10k-labels-idx1-ubyte"), idx_labels({5, 6}));
    subdp::Config c;
    c.data.name = subdp::DatasetKind::fashion_mnist;
    c.data.path = dir_.string();
    expect_error([&] { subdp::make_data_source(c, 0, 1); },
                 {"data.path = \"" + dir_.string() + "\"", "the " + k.split + " split has " + k.sizes + " images",
                  "expects 1x28x28", "image_size = 28"});
  }
}

TEST_F(DataIdx, MissingFile) {
  write_bytes(path("lab"), idx_labels({0}));
  expect_error([&] { subdp::load_idx_pair(path("absent-images.gz"), path("lab")); }, {"absent-images.gz", "not found"});
}

// ---------------------------------------------------------------- CIFAR-10

using DataCifar = DataFiles;

TEST_F(DataCifar, GoodTestBatch) {
  write_bytes(path("test_batch.bin"), cifar_records(12));
  const auto d = subdp::load_cifar10_dir(dir_.string(), false);
  ASSERT_EQ(d.n, 12);
  EXPECT_EQ(d.channels, 3);
  EXPECT_EQ(d.height, 32);
  EXPECT_EQ(d.width, 32);
  ASSERT_EQ(d.images.size(), size_t{12} * 3072);
  for (int r = 0; r < 12; ++r) {
    EXPECT_EQ(d.labels[r], r % 10);
    EXPECT_FLOAT_EQ(d.images[r * 3072 + 1025], ((r + 1025) % 256) / 255.0f);
  }
}

TEST_F(DataCifar, GoodTrainBatches) {
  for (int i = 1; i <= 5; ++i) write_bytes(path("data_batch_" + std::to_string(i) + ".bin"), cifar_records(i));
  const auto d = subdp::load_cifar10_dir(dir_.string(), true);
  EXPECT_EQ(d.n, 15);
  EXPECT_EQ(d.labels.size(), 15u);
}

TEST_F(DataCifar, BadSize) {
  Bytes b = cifar_records(3);
  b.pop_back();
  write_bytes(path("test_batch.bin"), b);
  expect_error([&] { subdp::load_cifar10_dir(dir_.string(), false); }, {"test_batch.bin", "3073"});
}

TEST_F(DataCifar, BadLabel) {
  write_bytes(path("test_batch.bin"), cifar_records(4, 2));
  expect_error([&] { subdp::load_cifar10_dir(dir_.string(), false); }, {"test_batch.bin", "label 10", "record 2"});
}

TEST_F(DataCifar, ShortBatchWarnsWithFileAndCount) {
  // Issue 22: a batch file short by whole records was accepted silently.
  write_bytes(path("test_batch.bin"), cifar_records(7));
  ::testing::internal::CaptureStderr();
  const auto d = subdp::load_cifar10_dir(dir_.string(), false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(d.n, 7);
  EXPECT_NE(err.find("test_batch.bin holds 7 records; a standard CIFAR-10 batch file holds 10000"), std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;  // one line
}

TEST_F(DataCifar, LabelsBeyondTheModelsClassesNameFileLabelAndKey) {
  // Issue 22: model.classes = 5 failed at the first batch with "target 9 out of range".
  for (int i = 1; i <= 5; ++i) write_bytes(path("data_batch_" + std::to_string(i) + ".bin"), cifar_records(i));
  ::testing::internal::CaptureStderr();
  const auto d = subdp::load_cifar10_dir(dir_.string(), true);
  ::testing::internal::GetCapturedStderr();
  subdp::check_labels(d, 10, "train");
  // Labels are r % 10 per file; data_batch_5.bin's record 4 (example 14) is the first 4 >= 4.
  expect_error([&] { subdp::check_labels(d, 4, "train"); },
               {"data_batch_5.bin", "label 4 of train example 14", "[model] classes = 4", "[0, 4)"});
}

TEST_F(DataCifar, MissingBatch) {
  for (int i = 1; i <= 4; ++i) write_bytes(path("data_batch_" + std::to_string(i) + ".bin"), cifar_records(1));
  expect_error([&] { subdp::load_cifar10_dir(dir_.string(), true); }, {"data_batch_5.bin", "not found"});
}

// ---------------------------------------------------------------- token shards and text

using DataTokens = DataFiles;

TEST_F(DataTokens, GoodFileAndDirectory) {
  write_bytes(path("b_shard.bin"), shard({3, 4, 50256}));
  write_bytes(path("a_shard.bin"), shard({1, 2}));
  write_bytes(path("notes.txt"), Bytes{1, 2, 3});
  const auto one = subdp::load_token_shards(path("b_shard.bin"), 50257);
  EXPECT_EQ(one.tokens, (std::vector<uint16_t>{3, 4, 50256}));
  EXPECT_EQ(one.vocab, 50257);
  const auto all = subdp::load_token_shards(dir_.string(), 50257);
  EXPECT_EQ(all.tokens, (std::vector<uint16_t>{1, 2, 3, 4, 50256}));
}

// llm.c's layout: the *_val_* shards come after every training shard, whatever their names,
// and start the validation stream; a single shard or a folder without them has no split.
TEST_F(DataTokens, ValShardsStartTheValidationStream) {
  write_bytes(path("web_val_000000.bin"), shard({7, 8, 9}));
  write_bytes(path("web_train_000001.bin"), shard({1, 2}));
  write_bytes(path("zz_train_000002.bin"), shard({3}));
  const auto all = subdp::load_token_shards(dir_.string(), 100);
  EXPECT_EQ(all.tokens, (std::vector<uint16_t>{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(all.val_begin, 3);
  EXPECT_EQ(subdp::load_token_shards(path("web_val_000000.bin"), 100).val_begin, -1);
  fs::remove(path("web_val_000000.bin"));
  EXPECT_EQ(subdp::load_token_shards(dir_.string(), 100).val_begin, -1);
}

TEST_F(DataTokens, BadMagic) {
  write_bytes(path("s.bin"), shard({1}, 12345));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "wrong magic 12345", "20240520"});
}

TEST_F(DataTokens, BadVersion) {
  write_bytes(path("s.bin"), shard({1}, 20240520, 2));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "version 2"});
}

TEST_F(DataTokens, SizeMismatch) {
  write_bytes(path("s.bin"), shard({1, 2, 3}, 20240520, 1, 4));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "4 tokens"});
  write_bytes(path("s.bin"), shard({1, 2, 3}, 20240520, 1, 0x7fffffff));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "2147483647"});
  write_bytes(path("s.bin"), Bytes(100, 0));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "short header"});
}

TEST_F(DataTokens, TokenOutOfVocab) {
  write_bytes(path("s.bin"), shard({1, 99, 100}));
  expect_error([&] { subdp::load_token_shards(path("s.bin"), 100); }, {"s.bin", "token 100", "position 2"});
}

TEST_F(DataTokens, MissingAndEmptyDirectory) {
  expect_error([&] { subdp::load_token_shards(path("absent.bin"), 100); }, {"absent.bin"});
  expect_error([&] { subdp::load_token_shards(dir_.string(), 100); }, {dir_.string(), "*.bin"});
}

using DataText = DataFiles;

TEST_F(DataText, BytesAndEmptyFile) {
  write_bytes(path("t.txt"), Bytes{'h', 'i', 0xff});
  const auto s = subdp::load_text_bytes(path("t.txt"));
  EXPECT_EQ(s.tokens, (std::vector<uint16_t>{'h', 'i', 255}));
  EXPECT_EQ(s.vocab, 256);
  write_bytes(path("empty.txt"), Bytes{});
  expect_error([&] { subdp::load_text_bytes(path("empty.txt")); }, {"empty.txt", "empty"});
  expect_error([&] { subdp::load_text_bytes(path("absent.txt")); }, {"absent.txt", "not found"});
}

// procfs reports size 0 for files that hold bytes: they are read to the end. A device that
// never ends is refused before reading, not read forever.
TEST_F(DataText, ProcFileReadWholeDeviceRefused) {
  const auto s = subdp::load_text_bytes("/proc/self/cmdline");
  EXPECT_GT(s.tokens.size(), 0u);
  expect_error([&] { subdp::load_text_bytes("/dev/zero"); }, {"/dev/zero", "not a regular file"});
  expect_error([&] { subdp::load_text_bytes(dir_.string()); }, {"is a directory"});
}

// A folder whose only shard is a validation shard: it trained on 90 % of the held-out shard.
// Named itself, the file is split by data.val_fraction as any single shard.
TEST_F(DataTokens, AFolderOfOneValidationShardIsRefused) {
  write_bytes(path("web_val_000000.bin"), shard({7, 8, 9}));
  expect_error([&] { subdp::load_token_shards(dir_.string(), 100); },
               {"its only *.bin shard", "web_val_000000.bin", "is a validation shard"});
  EXPECT_EQ(subdp::load_token_shards(path("web_val_000000.bin"), 100).tokens.size(), 3u);
}

// A symlink loop was "file not found", and in a folder of shards std::filesystem's own error
// without the data.path key.
TEST_F(DataTokens, SymlinkLoopsAreNamedWithTheKey) {
  fs::create_symlink(path("loop1"), path("loop2"));
  fs::create_symlink(path("loop2"), path("loop1"));
  expect_error([&] { subdp::load_text_bytes(path("loop1")); }, {"loop1", "symbolic links"});
  write_bytes(path("a_train.bin"), shard({1, 2, 3}));
  subdp::Config c;
  c.model.name = subdp::ModelKind::gpt;
  c.data.name = subdp::DatasetKind::token_shards;
  c.data.path = dir_.string();
  expect_error([&] { subdp::make_data_source(c, 0, 1); }, {"data.path: ", "symbolic links"});
}

// 30 bytes with context 16: "raise data.val_fraction", which could not help.
TEST_F(DataText, TooShortForBothSplitsSaysWhatItNeeds) {
  write_bytes(path("t.txt"), Bytes(30, 'a'));
  subdp::Config c;
  c.model.name = subdp::ModelKind::gpt;
  c.model.context = 16;
  c.data.name = subdp::DatasetKind::text;
  c.data.path = path("t.txt");
  expect_error([&] { subdp::make_data_source(c, 0, 1); }, {"t.txt: 30 tokens", "at least 2 x (context + 2) = 36"});
}

// Images of one value everywhere: "normalize: stddev of channel 0 is 0" without the key or a way out.
TEST_F(DataIdx, ConstantImagesNameTheKeyAndTheWayOut) {
  Bytes flat = idx_images(0, 28, 28);
  flat[7] = 4;  // 4 images (big-endian count), every pixel 0
  flat.resize(flat.size() + 4 * 28 * 28, 0);
  write_bytes(path("train-images-idx3-ubyte"), flat);
  write_bytes(path("train-labels-idx1-ubyte"), idx_labels({1, 2, 3, 4}));
  write_bytes(path("t10k-images-idx3-ubyte"), idx_images(2, 28, 28));
  write_bytes(path("t10k-labels-idx1-ubyte"), idx_labels({5, 6}));
  subdp::Config c;
  c.data.name = subdp::DatasetKind::fashion_mnist;
  c.data.path = dir_.string();
  expect_error([&] { subdp::make_data_source(c, 0, 1); },
               {"data.path: normalize: stddev of channel 0 is 0", "data.normalize = false"});
  c.data.normalize = false;
  EXPECT_NO_THROW(subdp::make_data_source(c, 0, 1));
}

// ---------------------------------------------------------------- normalisation

TEST(DataNormalize, StatsThenNormalizeGivesZeroMeanUnitStd) {
  subdp::ImageDataset d;
  d.n = 4;
  d.channels = 2;
  d.height = d.width = 3;
  for (int i = 0; i < 4 * 2 * 9; ++i) d.images.push_back(static_cast<float>((i * 37) % 11) / 10.0f);
  d.labels.assign(4, 0);
  std::vector<float> mean, sd;
  subdp::channel_stats(d, mean, sd);
  ASSERT_EQ(mean.size(), 2u);
  subdp::normalize(d, mean, sd);
  std::vector<float> m2, s2;
  subdp::channel_stats(d, m2, s2);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(m2[c], 0.0f, 1e-5);
    EXPECT_NEAR(s2[c], 1.0f, 1e-4);
  }
  EXPECT_THROW(subdp::normalize(d, {0.0f}, {1.0f}), Error);
  EXPECT_THROW(subdp::normalize(d, {0.0f, 0.0f}, {1.0f, 0.0f}), Error);
}

// ---------------------------------------------------------------- samplers

TEST(DataSampler, DisjointSharesAcrossRanksWithinEpoch) {
  const int64_t n = 103;
  const int batch = 4, world = 3;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<int64_t> seen;
    int64_t total = 0;
    for (int rank = 0; rank < world; ++rank) {
      subdp::EpochSampler s(n, batch, rank, world, 42);
      for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
        for (int64_t i : s.batch_indices(epoch, step)) {
          ASSERT_GE(i, 0);
          ASSERT_LT(i, n);
          seen.insert(i);
          ++total;
        }
      }
    }
    EXPECT_EQ(total, 8 * batch * world);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), total) << "ranks overlap in epoch " << epoch;
  }
}

TEST(DataSampler, DeterministicAndEpochsDiffer) {
  subdp::EpochSampler a(1000, 8, 1, 2, 7), b(1000, 8, 1, 2, 7), c(1000, 8, 1, 2, 8);
  EXPECT_EQ(a.batch_indices(0, 5), b.batch_indices(0, 5));
  EXPECT_EQ(a.batch_indices(3, 0), b.batch_indices(3, 0));
  EXPECT_EQ(a.batch_indices(0, 5), b.batch_indices(0, 5));  // after the cache moved on
  EXPECT_NE(a.batch_indices(0, 0), a.batch_indices(1, 0));
  EXPECT_NE(a.batch_indices(0, 0), c.batch_indices(0, 0));
  // Whole epoch orders differ between epochs.
  std::vector<int64_t> e0, e1;
  for (int64_t s = 0; s < a.steps_per_epoch(); ++s) {
    for (auto i : a.batch_indices(0, s)) e0.push_back(i);
    for (auto i : a.batch_indices(1, s)) e1.push_back(i);
  }
  EXPECT_NE(e0, e1);
}

TEST(DataSampler, StepsPerEpochIdenticalAcrossRanks) {
  for (int world : {1, 2, 3, 7}) {
    const int64_t expect = 1001 / (16 * world);
    for (int rank = 0; rank < world; ++rank)
      EXPECT_EQ(subdp::EpochSampler(1001, 16, rank, world, 1).steps_per_epoch(), expect);
  }
}

TEST(DataSampler, RejectsBadArguments) {
  subdp::EpochSampler placeholder(0, 1, 0, 1, 0);  // may exist; using it throws
  expect_error([] { subdp::EpochSampler(10, 4, 0, 3, 1).steps_per_epoch(); },
               {"too small", "10 examples", "4 x world 3"});
  EXPECT_THROW(subdp::EpochSampler(10, 4, 0, 3, 1).batch_indices(0, 0), Error);
  EXPECT_THROW(subdp::EpochSampler(100, 4, 3, 3, 1), Error);
  EXPECT_THROW(subdp::EpochSampler(100, 0, 0, 1, 1), Error);
  subdp::EpochSampler s(100, 10, 0, 2, 1);
  EXPECT_THROW(s.batch_indices(0, 5), Error);
  EXPECT_THROW(s.batch_indices(-1, 0), Error);
}

TEST(DataSampler, Mix64IsSplitmix64) {
  // Reference values of splitmix64 seeded with 0 (first two outputs).
  EXPECT_EQ(subdp::mix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(subdp::mix64(0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);
}

TEST(DataWindowSampler, DeterministicAndInRange) {
  const int64_t n = 1000;
  const int T = 64, batch = 32;
  subdp::WindowSampler a(n, T, batch, 0, 5), b(n, T, batch, 0, 5), r1(n, T, batch, 1, 5);
  int64_t lo = n, hi = -1;
  for (int64_t step = 0; step < 200; ++step) {
    const auto s = a.starts(step);
    ASSERT_EQ(s.size(), static_cast<size_t>(batch));
    EXPECT_EQ(s, b.starts(step));
    EXPECT_NE(s, r1.starts(step));
    for (int64_t x : s) {
      ASSERT_GE(x, 0);
      ASSERT_LE(x + T, n - 1);  // window of T + 1 tokens fits
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  }
  EXPECT_NE(a.starts(0), a.starts(1));
  EXPECT_LT(lo, 20);
  EXPECT_GT(hi, n - T - 20);
}

TEST(DataWindowSampler, SmallestStreamAndTooShort) {
  subdp::WindowSampler s(10, 8, 50, 0, 1);  // n = T + 2: starts are 0 or 1
  for (int64_t x : s.starts(3)) EXPECT_TRUE(x == 0 || x == 1);
  expect_error([] { subdp::WindowSampler(9, 8, 1, 0, 1); }, {"9 tokens", "T + 2 = 10"});
}

// ---------------------------------------------------------------- real data

TEST(DataFashionMnist, LoadsRealFiles) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is absent (apt package dataset-fashion-mnist)";
  for (bool train : {true, false}) {
    const auto d = subdp::load_mnist_dir(dir, train);
    EXPECT_EQ(d.n, train ? 60000 : 10000);
    EXPECT_EQ(d.channels, 1);
    EXPECT_EQ(d.height, 28);
    EXPECT_EQ(d.width, 28);
    ASSERT_EQ(d.images.size(), static_cast<size_t>(d.n) * 784);
    ASSERT_EQ(d.labels.size(), static_cast<size_t>(d.n));
    std::vector<int64_t> per_class(10, 0);
    for (int32_t l : d.labels) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, 10);
      ++per_class[l];
    }
    for (int64_t c : per_class) EXPECT_EQ(c, d.n / 10);  // Fashion-MNIST is balanced
    const auto [mn, mx] = std::minmax_element(d.images.begin(), d.images.end());
    EXPECT_GE(*mn, 0.0f);
    EXPECT_LE(*mx, 1.0f);
  }
}
