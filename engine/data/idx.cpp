// IDX readers (MNIST / Fashion-MNIST, raw or gzip) and read_file_bytes, the
// shared whole-file reader with incremental gzip decompression (zlib inflate).
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kIdxImagesMagic = 0x00000803;          // unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;          // unsigned byte, 1 dimension
constexpr uint64_t kMaxDecompressed = uint64_t{1} << 34;  // 16 GiB: refuse gzip bombs
constexpr uint32_t kMaxSide = 1u << 16;                   // implausible image side beyond this

/// Raw bytes of a file exactly as stored. Errors name the path.
std::vector<uint8_t> read_raw(const std::string& path) {
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  SUBDP_CHECK(!ec, "{}: {}", path, ec.message());  // a symlink loop, a folder it may not enter: not "not found"
  SUBDP_CHECK(exists, "{}: file not found", path);
  SUBDP_CHECK(!fs::is_directory(path, ec), "{}: is a directory, expected a file", path);
  // A device or FIFO may never end (/dev/zero) or be read once only: refused, not read.
  SUBDP_CHECK(fs::is_regular_file(path, ec), "{}: not a regular file (a device, FIFO or socket); copy it to a file",
              path);
  std::ifstream in(path, std::ios::binary);
  SUBDP_CHECK(in.good(), "{}: cannot open file for reading", path);
  // Read to the end, not to the stat size: procfs and sysfs files report 0 bytes.
  std::vector<uint8_t> bytes;
  bytes.reserve(fs::file_size(path, ec));
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) bytes.insert(bytes.end(), chunk, chunk + in.gcount());
  SUBDP_CHECK(in.eof() && !in.bad(), "{}: read error after {} bytes", path, bytes.size());
  return bytes;
}

bool has_gzip_magic(const uint8_t* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

/// Output buffer to start with: the gzip trailer's size field (mod 2^32, last member) when
/// plausible, else 4x the input. The buffer grows anyway, so this is only a hint.
size_t initial_output_size(const std::vector<uint8_t>& in) {
  const size_t n = in.size();
  const size_t fallback = std::max<size_t>(n * 4, 1 << 16);
  if (n < 18) return fallback;
  const size_t isize = in[n - 4] | (in[n - 3] << 8) | (in[n - 2] << 16) | (size_t{in[n - 1]} << 24);
  return isize + 1 <= n * 16 + (1 << 20) ? std::max<size_t>(isize + 1, 1 << 12) : fallback;
}

/// Inflates one or more concatenated gzip members, growing the output as data arrives.
std::vector<uint8_t> gunzip_bytes(const std::string& path, std::vector<uint8_t>& in) {
  z_stream zs{};
  SUBDP_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "{}: zlib inflateInit failed", path);
  std::vector<uint8_t> out(initial_output_size(in));
  zs.next_in = in.data();
  zs.avail_in = 0;
  size_t in_pos = 0, out_pos = 0;
  int ret = Z_OK;
  while (true) {
    if (zs.avail_in == 0 && in_pos < in.size()) {  // feed at most 1 GiB at a time (uInt)
      zs.next_in = in.data() + in_pos;
      zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - in_pos, 1u << 30));
      in_pos += zs.avail_in;
    }
    if (out_pos == out.size()) {
      if (out.size() >= kMaxDecompressed) break;
      out.resize(std::min<uint64_t>(out.size() * 2, kMaxDecompressed));
    }
    zs.next_out = out.data() + out_pos;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - out_pos, 1u << 30));
    const uInt before = zs.avail_out;
    ret = inflate(&zs, Z_NO_FLUSH);
    out_pos += before - zs.avail_out;
    if (ret == Z_STREAM_END) {
      const size_t left = zs.avail_in + (in.size() - in_pos);
      if (left == 0) break;
      if (!has_gzip_magic(zs.next_in, zs.avail_in)) break;  // trailing padding: ignore
      inflateReset(&zs);
      continue;
    }
    if (ret == Z_BUF_ERROR && zs.avail_in == 0 && in_pos == in.size()) break;  // input ran out
    if (ret != Z_OK && ret != Z_BUF_ERROR) break;
  }
  const std::string msg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  SUBDP_CHECK(out_pos < kMaxDecompressed, "{}: decompressed size exceeds {} bytes", path, kMaxDecompressed);
  SUBDP_CHECK(ret != Z_DATA_ERROR && ret != Z_NEED_DICT && ret != Z_MEM_ERROR,
              "{}: corrupt gzip data ({}) after {} decompressed bytes", path, msg, out_pos);
  SUBDP_CHECK(ret == Z_STREAM_END,
              "{}: truncated gzip stream: compressed data ended after {} decompressed bytes "
              "without the end-of-stream marker",
              path, out_pos);
  out.resize(out_pos);
  out.shrink_to_fit();
  return out;
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

/// Checks the IDX magic (first, so a swapped file reads as such) and the header length.
void check_header(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t expected, const char* what,
                  size_t header_bytes) {
  if (bytes.size() >= 4) {
    const uint32_t magic = read_be32(bytes.data());
    SUBDP_CHECK(magic == expected, "{}: wrong magic {:#010x}, expected {:#010x} ({})", path, magic, expected, what);
  }
  SUBDP_CHECK(bytes.size() >= header_bytes, "{}: too short for an {} header: {} bytes, expected {}", path, what,
              bytes.size(), header_bytes);
}

/// Decodes an IDX3 image file into d (n, 1, rows, cols) scaled to [0, 1].
void decode_images(const std::string& path, const std::vector<uint8_t>& bytes, ImageDataset& d) {
  check_header(path, bytes, kIdxImagesMagic, "IDX images", 16);
  const uint64_t n = read_be32(&bytes[4]), rows = read_be32(&bytes[8]), cols = read_be32(&bytes[12]);
  SUBDP_CHECK(rows > 0 && cols > 0 && rows <= kMaxSide && cols <= kMaxSide,
              "{}: implausible image size {}x{} in header", path, rows, cols);
  const uint64_t have = bytes.size() - 16, need = n * rows * cols;
  SUBDP_CHECK(have >= need,
              "{}: truncated: header says {} images of {}x{} ({} bytes) but only {} "
              "bytes follow",
              path, n, rows, cols, need, have);
  SUBDP_CHECK(have == need,
              "{}: header says {} images of {}x{} ({} bytes) but {} bytes follow "
              "({} extra)",
              path, n, rows, cols, need, have, have - need);
  d.n = static_cast<int64_t>(n);
  d.channels = 1;
  d.height = static_cast<int>(rows);
  d.width = static_cast<int>(cols);
  d.images.resize(need);
  for (uint64_t i = 0; i < need; ++i) d.images[i] = bytes[16 + i] * (1.0f / 255.0f);
}

/// Decodes an IDX1 label file into d.labels; counts must match the images.
void decode_labels(const std::string& path, const std::vector<uint8_t>& bytes, ImageDataset& d) {
  check_header(path, bytes, kIdxLabelsMagic, "IDX labels", 8);
  const uint64_t n = read_be32(&bytes[4]), have = bytes.size() - 8;
  SUBDP_CHECK(have == n, "{}: {}: header says {} labels but {} bytes follow", path,
              have < n ? "truncated" : "size mismatch", n, have);
  SUBDP_CHECK(static_cast<int64_t>(n) == d.n, "{}: {} labels but the image file has {} images", path, n, d.n);
  // Any byte is a label (EMNIST has 47 classes, 62 in its by-class split): check_labels
  // compares them with [model] classes once both splits are read.
  d.labels.assign(bytes.begin() + 8, bytes.end());
  d.classes = n > 0 ? 1 + *std::max_element(d.labels.begin(), d.labels.end()) : 0;
}

/// First existing file among dir/prefix + suffixes; error lists what was tried.
std::string find_one(const std::string& dir, const std::string& prefix, const std::vector<std::string>& names) {
  std::string tried;
  for (const auto& name : names) {
    const std::string p = (fs::path(dir) / (prefix + name)).string();
    if (fs::is_regular_file(p)) return p;
    tried += (tried.empty() ? "" : ", ") + prefix + name;
  }
  throw Error(fmt::format("{}: none of the expected files found (tried {})", dir, tried));
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path, bool gunzip) {
  std::vector<uint8_t> bytes = read_raw(path);
  if (!gunzip || !has_gzip_magic(bytes.data(), bytes.size())) return bytes;
  return gunzip_bytes(path, bytes);
}

ImageDataset load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  ImageDataset d;
  decode_images(images_path, read_file_bytes(images_path, true), d);
  decode_labels(labels_path, read_file_bytes(labels_path, true), d);
  d.label_files = {{labels_path, 0}};
  return d;
}

std::string ImageDataset::label_file(int64_t i) const {
  std::string file = "(labels)";
  for (const auto& [path, first] : label_files)
    if (first <= i) file = path;
  return file;
}

void check_labels(const ImageDataset& d, int classes, const std::string& split) {
  for (size_t i = 0; i < d.labels.size(); ++i)
    SUBDP_CHECK(d.labels[i] >= 0 && d.labels[i] < classes,
                "{}: label {} of {} example {} is not a class of the model: [model] classes = {} allows labels in "
                "[0, {}) (this dataset has {} classes)",
                d.label_file(static_cast<int64_t>(i)), d.labels[i], split, i, classes, classes, d.classes);
}

ImageDataset load_mnist_dir(const std::string& dir, bool train) {
  SUBDP_CHECK(fs::is_directory(dir), "{}: dataset directory not found", dir);
  const std::string prefix = train ? "train" : "t10k";
  const std::string images =
      find_one(dir, prefix, {"-images-idx3-ubyte.gz", "-images-idx3-ubyte", "-images.idx3-ubyte"});
  const std::string labels =
      find_one(dir, prefix, {"-labels-idx1-ubyte.gz", "-labels-idx1-ubyte", "-labels.idx1-ubyte"});
  return load_idx_pair(images, labels);
}

}  // namespace subdp
