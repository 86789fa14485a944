// Token streams: raw text bytes (vocab 256) and llm.c token shards
// (256 x int32 header: magic 20240520, version 1, token count; then uint16 tokens).
#include <algorithm>
#include <filesystem>

#include "engine/data/dataset.h"
#include "engine/core/error.h"

namespace subdp {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kHeaderBytes = 256 * 4;

int32_t read_le32(const uint8_t* p) {
  return static_cast<int32_t>(uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
}

/// llm.c names its validation shards *_val_*.bin.
bool is_val_shard(const std::string& path) {
  return fs::path(path).filename().string().find("_val_") != std::string::npos;
}

/// The shard files named by path: the file itself, or the *.bin files of a directory by name.
std::vector<std::string> shard_paths(const std::string& path) {
  SUBDP_CHECK(fs::exists(path), "{}: token shard file or directory not found", path);
  if (!fs::is_directory(path)) return {path};
  std::vector<std::string> paths;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".bin") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  SUBDP_CHECK(!paths.empty(), "{}: directory holds no *.bin token shards", path);
  std::stable_partition(paths.begin(), paths.end(), [](const std::string& p) { return !is_val_shard(p); });
  return paths;
}

/// Validates one shard and appends its tokens to out.
void append_shard(const std::string& path, int vocab, std::vector<uint16_t>& out) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, false);
  SUBDP_CHECK(bytes.size() >= kHeaderBytes, "{}: short header: {} bytes, expected at least {}", path, bytes.size(),
              kHeaderBytes);
  const int32_t magic = read_le32(&bytes[0]), version = read_le32(&bytes[4]);
  const int32_t count = read_le32(&bytes[8]);
  SUBDP_CHECK(magic == kShardMagic, "{}: wrong magic {}, expected {} (llm.c token shard)", path, magic, kShardMagic);
  SUBDP_CHECK(version == kShardVersion, "{}: unsupported version {}, expected {}", path, version, kShardVersion);
  const uint64_t have = bytes.size() - kHeaderBytes;
  SUBDP_CHECK(count >= 0 && have == 2 * static_cast<uint64_t>(count),
              "{}: header says {} tokens ({} bytes) but {} bytes follow the header", path, count,
              2 * static_cast<int64_t>(count), have);
  const size_t base = out.size();
  out.resize(base + count);
  for (int32_t i = 0; i < count; ++i) {
    const uint8_t* p = &bytes[kHeaderBytes + 2 * static_cast<size_t>(i)];
    const int32_t tok = p[0] | (p[1] << 8);
    SUBDP_CHECK(tok < vocab, "{}: token {} at position {} is >= vocab {}", path, tok, i, vocab);
    out[base + i] = static_cast<uint16_t>(tok);
  }
}

}  // namespace

TokenStream load_text_bytes(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, false);
  SUBDP_CHECK(!bytes.empty(), "{}: text file is empty", path);
  TokenStream s;
  s.vocab = 256;
  s.tokens.assign(bytes.begin(), bytes.end());
  return s;
}

TokenStream load_token_shards(const std::string& path, int vocab) {
  SUBDP_CHECK(vocab > 0 && vocab <= 65536, "{}: vocab {} out of range (1..65536 for uint16 tokens)", path, vocab);
  TokenStream s;
  s.vocab = vocab;
  const std::vector<std::string> shards = shard_paths(path);
  // A folder's *_val_* shards are held out: one alone would leave nothing to train on.
  SUBDP_CHECK(shards.size() > 1 || !fs::is_directory(path) || !is_val_shard(shards[0]),
              "{}: its only *.bin shard, {}, is a validation shard (*_val_*), which a folder's shards hold out; add "
              "training shards, or name the file itself as data.path to split it by data.val_fraction",
              path, shards[0]);
  for (const auto& shard : shards) {
    if (s.val_begin < 0 && shards.size() > 1 && is_val_shard(shard))
      s.val_begin = static_cast<int64_t>(s.tokens.size());
    append_shard(shard, vocab, s.tokens);
  }
  SUBDP_CHECK(!s.tokens.empty(), "{}: token shards hold no tokens", path);
  return s;
}

}  // namespace subdp
