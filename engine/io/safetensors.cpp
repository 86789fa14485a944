// safetensors reader / writer (float32 only), atomic file writes and whole-file
// CRC32. See engine/io/safetensors.h for the contracts.
#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "engine/core/error.h"

namespace subdp {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O writes host float32 bytes; a big-endian host needs byte swaps");
static_assert(sizeof(float) == 4, "float must be IEEE-754 binary32");

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;  // 100 MB, as the reference reader

std::string errno_text() { return std::strerror(errno); }

/// Closes a FILE* on scope exit.
struct FileCloser {
  FILE* f;
  ~FileCloser() {
    if (f) std::fclose(f);
  }
};

/// fsyncs the directory holding path so that a rename into it is durable.
void fsync_parent_dir(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  SUBDP_CHECK(fd >= 0, "{}: cannot open directory {} to fsync it: {}", path, dir.string(), errno_text());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems do not support fsync on directories (EINVAL); nothing more to do there.
  SUBDP_CHECK(rc == 0 || err == EINVAL, "{}: cannot fsync directory {}: {}", path, dir.string(), std::strerror(err));
}

/// Writes path atomically: `body` writes the contents to an open FILE* (returning
/// false on a short write), then flush + fsync + rename + directory fsync. The
/// temporary file is removed on any failure.
void atomic_write(const std::string& path, const std::function<bool(FILE*)>& body) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  SUBDP_CHECK(f != nullptr, "{}: cannot create temporary file {}: {}", path, tmp, errno_text());
  auto fail = [&](const std::string& what) {
    std::string msg = fmt::format("{}: {} {}: {}", path, what, tmp, errno_text());
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw Error(msg);
  };
  errno = 0;
  if (!body(f)) fail("cannot write");
  if (std::fflush(f) != 0) fail("cannot flush");
  if (::fsync(::fileno(f)) != 0) fail("cannot fsync");
  int rc = std::fclose(f);
  f = nullptr;
  if (rc != 0) fail("cannot close");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string msg = fmt::format("{}: cannot rename {} over it: {}", path, tmp, errno_text());
    std::remove(tmp.c_str());
    throw Error(msg);
  }
  fsync_parent_dir(path);
}

bool write_all(FILE* f, const void* data, size_t n) { return n == 0 || std::fwrite(data, 1, n, f) == n; }

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

/// Number of elements of shape, or throws when a dimension is negative or the
/// count overflows. `what` prefixes the message.
uint64_t element_count(const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    SUBDP_CHECK(d >= 0, "{}: negative dimension in shape {}", what, shape_str(shape));
    if (d == 0) zero = true;
  }
  if (zero) return 0;
  for (int64_t d : shape) {
    const auto ud = static_cast<uint64_t>(d);
    SUBDP_CHECK(n <= std::numeric_limits<uint64_t>::max() / 4 / ud, "{}: shape {} has too many elements", what,
                shape_str(shape));
    n *= ud;
  }
  return n;
}

/// A header entry after validation.
struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
  size_t order = 0;  // position in the header, to keep ties stable
};

/// Reads a non-negative integer from a JSON value, or throws with `what`.
uint64_t json_uint(const ordered_json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  SUBDP_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, "{} must be a non-negative integer, got {}", what,
              v.dump());
  return static_cast<uint64_t>(v.get<int64_t>());
}

Entry parse_entry(const std::string& path, const std::string& name, const ordered_json& v) {
  const std::string where = fmt::format("{}: tensor '{}'", path, name);
  SUBDP_CHECK(v.is_object(), "{}: header entry is not a JSON object", where);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    SUBDP_CHECK(v.contains(key), "{}: header entry has no \"{}\"", where, key);
  const auto& dtype = v.at("dtype");
  SUBDP_CHECK(dtype.is_string(), "{}: \"dtype\" is not a string", where);
  const auto dt = dtype.get<std::string>();
  SUBDP_CHECK(dt == "F32", "{}: unsupported dtype {} (only F32 is supported)", where, dt);

  Entry e;
  e.name = name;
  const auto& shape = v.at("shape");
  SUBDP_CHECK(shape.is_array(), "{}: \"shape\" is not an array", where);
  for (const auto& d : shape) {
    uint64_t ud = json_uint(d, where + ": shape dimension");
    SUBDP_CHECK(ud <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "{}: shape dimension {} is too large",
                where, ud);
    e.shape.push_back(static_cast<int64_t>(ud));
  }
  const auto& offs = v.at("data_offsets");
  SUBDP_CHECK(offs.is_array() && offs.size() == 2, "{}: \"data_offsets\" must be an array [begin, end], got {}", where,
              offs.dump());
  e.begin = json_uint(offs[0], where + ": data_offsets begin");
  e.end = json_uint(offs[1], where + ": data_offsets end");
  SUBDP_CHECK(e.begin <= e.end, "{}: data_offsets [{}, {}] end before they begin", where, e.begin, e.end);
  const uint64_t nbytes = element_count(e.shape, where) * 4;
  SUBDP_CHECK(e.end - e.begin == nbytes, "{}: shape {} needs {} bytes of F32 but data_offsets [{}, {}] span {}", where,
              shape_str(e.shape), nbytes, e.begin, e.end, e.end - e.begin);
  return e;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    SUBDP_CHECK(!t.name.empty(), "{}: cannot save a tensor with an empty name", path);
    SUBDP_CHECK(t.name != "__metadata__", "{}: tensor name \"__metadata__\" is reserved", path);
    SUBDP_CHECK(seen.insert(t.name).second, "{}: duplicate tensor name '{}'", path, t.name);
    const std::string where = fmt::format("{}: tensor '{}'", path, t.name);
    const uint64_t n = element_count(t.shape, where);
    SUBDP_CHECK(n == t.data.size(), "{}: shape {} holds {} elements but data has {}", where, shape_str(t.shape), n,
                t.data.size());
    const uint64_t nbytes = n * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: cannot encode header (tensor names and metadata must be UTF-8): {}", path, e.what()));
  }
  // Pad with spaces so that the data section starts 8-byte aligned, as the reference does.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(len >> (8 * i));

  atomic_write(path, [&](FILE* f) {
    if (!write_all(f, len_bytes, 8) || !write_all(f, text.data(), text.size())) return false;
    for (const auto& t : tensors)
      if (!write_all(f, t.data.data(), t.data.size() * sizeof(float))) return false;
    return true;
  });
}

namespace {

/// Reads the 8-byte length and the JSON header of an open safetensors file of file_size
/// bytes; sets header_len. Errors name the path.
ordered_json read_header(FILE* f, const std::string& path, uint64_t file_size, uint64_t& header_len) {
  SUBDP_CHECK(file_size >= 8,
              "{}: truncated: {} bytes, too small for a safetensors file (needs an 8-byte "
              "header length)",
              path, file_size);
  unsigned char len_bytes[8];
  SUBDP_CHECK(std::fread(len_bytes, 1, 8, f) == 8, "{}: cannot read header length", path);
  header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  SUBDP_CHECK(header_len <= file_size - 8,
              "{}: truncated: header length is {} bytes, file holds {} after the length field", path, header_len,
              file_size - 8);
  SUBDP_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} exceeds the {} byte limit (corrupt file?)", path,
              header_len, kMaxHeaderBytes);
  std::string text(header_len, '\0');
  SUBDP_CHECK(header_len == 0 || std::fread(text.data(), 1, header_len, f) == header_len,
              "{}: cannot read the {}-byte header", path, header_len);
  ordered_json header;
  try {
    header = ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: header is not valid JSON: {}", path, e.what()));
  }
  SUBDP_CHECK(header.is_object(), "{}: header is not a JSON object", path);
  return header;
}

/// The header's tensor entries in header order, and its "__metadata__" strings into meta.
std::vector<Entry> parse_entries(const std::string& path, const ordered_json& header,
                                 std::map<std::string, std::string>& meta) {
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      SUBDP_CHECK(it.value().is_object(), "{}: \"__metadata__\" is not a JSON object", path);
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        SUBDP_CHECK(m.value().is_string(), "{}: \"__metadata__\" value for '{}' is not a string", path, m.key());
        meta[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    Entry e = parse_entry(path, it.key(), it.value());
    e.order = entries.size();
    entries.push_back(std::move(e));
  }
  return entries;
}

/// Checks that the entries fit in the data section of data_bytes and do not overlap; sorts
/// them by offset (header order among equal offsets).
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_bytes) {
  uint64_t declared = 0;
  const Entry* last = nullptr;
  for (const auto& e : entries)
    if (e.end > declared) declared = e.end, last = &e;
  SUBDP_CHECK(declared <= data_bytes,
              "{}: truncated: header declares {} data bytes, file holds {} (tensor '{}' has "
              "data_offsets [{}, {}])",
              path, declared, data_bytes, last ? last->name : "", last ? last->begin : 0, last ? last->end : 0);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.order) < std::tie(b.begin, b.end, b.order);
  });
  const Entry* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const auto& e : entries) {
    if (e.begin == e.end) continue;  // empty tensors occupy no bytes
    SUBDP_CHECK(prev == nullptr || e.begin >= prev->end,
                "{}: tensors '{}' (data_offsets [{}, {}]) and '{}' (data_offsets [{}, {}]) "
                "overlap",
                path, prev ? prev->name : "", prev ? prev->begin : 0, prev ? prev->end : 0, e.name, e.begin, e.end);
    prev = &e;
  }
}

/// Reads each entry's bytes from the data section, which starts at data_start.
std::vector<NamedTensor> read_tensors(FILE* f, const std::string& path, const std::vector<Entry>& entries,
                                      uint64_t data_start) {
  std::vector<NamedTensor> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    NamedTensor t;
    t.name = e.name;
    t.shape = e.shape;
    const uint64_t nbytes = e.end - e.begin;
    t.data.resize(nbytes / 4);
    if (nbytes > 0) {
      SUBDP_CHECK(::fseeko(f, static_cast<off_t>(data_start + e.begin), SEEK_SET) == 0,
                  "{}: cannot seek to tensor '{}': {}", path, e.name, errno_text());
      SUBDP_CHECK(std::fread(t.data.data(), 1, nbytes, f) == nbytes,
                  "{}: cannot read the {} bytes of tensor '{}' (file changed or unreadable)", path, nbytes, e.name);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::vector<NamedTensor> load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  FILE* f = std::fopen(path.c_str(), "rb");
  SUBDP_CHECK(f != nullptr, "{}: cannot open: {}", path, errno_text());
  FileCloser closer{f};
  struct stat st {};
  SUBDP_CHECK(::fstat(::fileno(f), &st) == 0, "{}: cannot stat: {}", path, errno_text());
  SUBDP_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  uint64_t header_len = 0;
  const ordered_json header = read_header(f, path, file_size, header_len);
  std::map<std::string, std::string> meta;
  std::vector<Entry> entries = parse_entries(path, header, meta);
  // Offsets are relative to the data section, which starts right after the header.
  check_layout(path, entries, file_size - 8 - header_len);
  std::vector<NamedTensor> out = read_tensors(f, path, entries, 8 + header_len);
  if (metadata) *metadata = std::move(meta);
  return out;
}

std::string file_crc32(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  SUBDP_CHECK(f != nullptr, "{}: cannot open for CRC32: {}", path, errno_text());
  FileCloser closer{f};
  std::vector<unsigned char> buf(1 << 20);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f);
    if (n > 0) crc = ::crc32(crc, buf.data(), static_cast<uInt>(n));
    if (n < buf.size()) {
      SUBDP_CHECK(!std::ferror(f), "{}: read error while computing CRC32", path);
      break;
    }
  }
  return fmt::format("{:08x}", static_cast<uint32_t>(crc));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  atomic_write(path, [&](FILE* f) { return write_all(f, contents.data(), contents.size()); });
}

}  // namespace subdp
