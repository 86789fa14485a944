// Tests of engine/io/safetensors: round trips (with metadata, scalars, empty
// tensors), every rejected defect of a hand-built file, atomic writes, CRC32, and
// compatibility with a plain json+struct+numpy reader in Python.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace fs = std::filesystem;
using subdp::Error;
using subdp::NamedTensor;

namespace {

/// A fresh temp directory per test, removed afterwards.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("subdp_test_safetensors_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// Names of all entries in the temp directory.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    return names;
  }
  fs::path dir_;
};

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_raw(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

/// A hand-built safetensors file: length prefix (the header's size unless
/// declared_len is given), header text, then `data_bytes` bytes of data.
void write_st(const std::string& p, const std::string& header, size_t data_bytes, int64_t declared_len = -1) {
  const uint64_t len = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  write_raw(p, le64(len) + header + std::string(data_bytes, '\x01'));
}

/// Expects load_safetensors(p) to throw an Error whose message names p and contains `what`.
void expect_load_error(const std::string& p, const std::string& what) {
  try {
    subdp::load_safetensors(p);
    FAIL() << "expected subdp::Error containing '" << what << "' for " << p;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

std::vector<NamedTensor> sample_tensors() {
  std::vector<NamedTensor> ts;
  NamedTensor w{"layer1.weight", {2, 3}, {1.5f, -2.f, 0.f, -0.f, 3.25f, 1e-30f}};
  NamedTensor b{
      "layer1.bias", {3}, {std::numeric_limits<float>::infinity(), -7.f, std::numeric_limits<float>::quiet_NaN()}};
  NamedTensor scalar{"step_scale", {}, {0.125f}};
  NamedTensor empty{"empty", {0, 4}, {}};
  NamedTensor big{"a.big", {17, 5}, {}};
  for (int i = 0; i < 85; ++i) big.data.push_back(static_cast<float>(i) * 0.5f - 3.f);
  ts.push_back(w);
  ts.push_back(b);
  ts.push_back(scalar);
  ts.push_back(empty);
  ts.push_back(big);
  return ts;
}

void expect_same(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(got[i].shape, want[i].shape) << want[i].name;
    ASSERT_EQ(got[i].data.size(), want[i].data.size()) << want[i].name;
    for (size_t j = 0; j < want[i].data.size(); ++j)
      EXPECT_TRUE(same_bits(got[i].data[j], want[i].data[j])) << want[i].name << "[" << j << "]";
  }
}

}  // namespace

TEST_F(Safetensors, RoundTripWithMetadata) {
  const auto ts = sample_tensors();
  const std::map<std::string, std::string> meta{
      {"format", "pt"}, {"step", "1200"}, {"note", "quotes \" and \\ and ünïcode"}};
  const std::string p = path("model.safetensors");
  subdp::save_safetensors(p, ts, meta);

  std::map<std::string, std::string> got_meta{{"stale", "x"}};
  const auto got = subdp::load_safetensors(p, &got_meta);
  expect_same(got, ts);  // same order as written
  EXPECT_EQ(got_meta, meta);

  // Layout: data section 8-byte aligned, padded with spaces, file size exact.
  const std::string bytes = read_all(p);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  size_t floats = 0;
  for (const auto& t : ts) floats += t.data.size();
  EXPECT_EQ(bytes.size(), 8 + n + 4 * floats);
  EXPECT_NE(bytes.find("\"dtype\":\"F32\""), std::string::npos);
  // No temporary file left behind.
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(Safetensors, RoundTripWithoutMetadataClearsOutput) {
  const std::string p = path("m.safetensors");
  subdp::save_safetensors(p, {{"x", {4}, {1, 2, 3, 4}}});
  std::map<std::string, std::string> meta{{"stale", "x"}};
  const auto got = subdp::load_safetensors(p, &meta);
  EXPECT_TRUE(meta.empty());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].data, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(read_all(p).find("__metadata__"), std::string::npos);
}

TEST_F(Safetensors, NoTensorsRoundTrips) {
  const std::string p = path("none.safetensors");
  subdp::save_safetensors(p, {}, {{"k", "v"}});
  std::map<std::string, std::string> meta;
  EXPECT_TRUE(subdp::load_safetensors(p, &meta).empty());
  EXPECT_EQ(meta.at("k"), "v");
}

TEST_F(Safetensors, OverwritesExistingFile) {
  const std::string p = path("m.safetensors");
  subdp::save_safetensors(p, sample_tensors());
  subdp::save_safetensors(p, {{"only", {1}, {9.f}}});
  const auto got = subdp::load_safetensors(p);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "only");
  EXPECT_EQ(listing().size(), 1u);
}

TEST_F(Safetensors, LoadsInDataOffsetOrder) {
  // Header order differs from data order (as in files from other writers).
  const std::string p = path("order.safetensors");
  const std::string header = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string data;
  float va = 1.f, vb = 2.f;
  data.append(reinterpret_cast<const char*>(&va), 4);
  data.append(reinterpret_cast<const char*>(&vb), 4);
  write_raw(p, le64(header.size()) + header + data);
  const auto got = subdp::load_safetensors(p);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "a");
  EXPECT_EQ(got[0].data[0], 1.f);
  EXPECT_EQ(got[1].name, "b");
  EXPECT_EQ(got[1].data[0], 2.f);
}

TEST_F(Safetensors, TruncatedData) {
  const std::string p = path("trunc.safetensors");
  subdp::save_safetensors(p, sample_tensors());
  fs::resize_file(p, fs::file_size(p) - 4);
  expect_load_error(p, "truncated: header declares");
}

TEST_F(Safetensors, TooSmallFile) {
  const std::string p = path("tiny.safetensors");
  write_raw(p, "abc");
  expect_load_error(p, "truncated");
  write_raw(p, "");
  expect_load_error(p, "truncated");
}

TEST_F(Safetensors, HeaderLengthLargerThanFile) {
  const std::string p = path("hdr.safetensors");
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_st(p, header, 4, 1000);
  expect_load_error(p, "header length is 1000");
}

TEST_F(Safetensors, HeaderLengthOverLimit) {
  // A sparse 101 MB file whose header claims 100 MB + 1 byte.
  const std::string p = path("huge.safetensors");
  write_st(p, "{}", 0, 100'000'001);
  fs::resize_file(p, 101'000'000);
  expect_load_error(p, "exceeds the 100000000 byte limit");
}

TEST_F(Safetensors, GarbageJson) {
  const std::string p = path("garbage.safetensors");
  write_st(p, "{\"x\": [1, 2,, garbage", 16);
  expect_load_error(p, "header is not valid JSON");
}

TEST_F(Safetensors, HeaderNotObject) {
  const std::string p = path("array.safetensors");
  write_st(p, "[1, 2, 3]", 0);
  expect_load_error(p, "header is not a JSON object");
}

TEST_F(Safetensors, WrongDtype) {
  const std::string p = path("f16.safetensors");
  write_st(p, R"({"half_w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4);
  expect_load_error(p, "tensor 'half_w': unsupported dtype F16");
}

TEST_F(Safetensors, MissingField) {
  const std::string p = path("missing.safetensors");
  write_st(p, R"({"w":{"dtype":"F32","shape":[1]}})", 4);
  expect_load_error(p, "tensor 'w': header entry has no \"data_offsets\"");
  write_st(p, R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4);
  expect_load_error(p, "has no \"dtype\"");
  write_st(p, R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4);
  expect_load_error(p, "has no \"shape\"");
  write_st(p, R"({"w":[1,2]})", 4);
  expect_load_error(p, "not a JSON object");
}

TEST_F(Safetensors, DataOffsetsOutOfRange) {
  const std::string p = path("range.safetensors");
  // End beyond the data section.
  write_st(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16);
  expect_load_error(p, "truncated: header declares 24 data bytes, file holds 16");
  // Reversed offsets.
  write_st(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 16);
  expect_load_error(p, "data_offsets [8, 4]");
  // Negative offset.
  write_st(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 16);
  expect_load_error(p, "non-negative integer");
  // Not a pair.
  write_st(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 16);
  expect_load_error(p, "[begin, end]");
}

TEST_F(Safetensors, ShapeOffsetMismatch) {
  const std::string p = path("mismatch.safetensors");
  write_st(p, R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24);
  expect_load_error(p, "shape [2, 3] needs 24 bytes");
  write_st(p, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 24);
  expect_load_error(p, "non-negative integer");
  write_st(p, R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 24);
  expect_load_error(p, "non-negative integer");
  write_st(p, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 24);
  expect_load_error(p, "too many elements");
}

TEST_F(Safetensors, OverlappingTensors) {
  const std::string p = path("overlap.safetensors");
  write_st(p,
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           12);
  expect_load_error(p, "overlap");
}

TEST_F(Safetensors, BadMetadata) {
  const std::string p = path("meta.safetensors");
  write_st(p, R"({"__metadata__":{"step":12}})", 0);
  expect_load_error(p, "\"__metadata__\" value for 'step' is not a string");
  write_st(p, R"({"__metadata__":"x"})", 0);
  expect_load_error(p, "\"__metadata__\" is not a JSON object");
}

TEST_F(Safetensors, MissingFile) {
  const std::string p = path("does_not_exist.safetensors");
  expect_load_error(p, "cannot open");
}

TEST_F(Safetensors, SaveRejectsInvalidTensorsAndKeepsOldFile) {
  const std::string p = path("m.safetensors");
  subdp::save_safetensors(p, {{"keep", {1}, {5.f}}});
  const std::string before = read_all(p);
  auto expect_save_error = [&](const std::vector<NamedTensor>& ts, const std::string& what) {
    try {
      subdp::save_safetensors(p, ts);
      FAIL() << "expected save error: " << what;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_save_error({{"w", {2, 2}, {1, 2, 3}}}, "holds 4 elements but data has 3");
  expect_save_error({{"w", {1}, {1}}, {"w", {1}, {2}}}, "duplicate tensor name 'w'");
  expect_save_error({{"", {1}, {1}}}, "empty name");
  expect_save_error({{"__metadata__", {1}, {1}}}, "reserved");
  expect_save_error({{"w", {-1}, {}}}, "negative dimension");
  EXPECT_EQ(read_all(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"m.safetensors"});
}

TEST_F(Safetensors, SaveIntoMissingDirectoryFails) {
  const std::string p = path("no/such/dir/m.safetensors");
  EXPECT_THROW(subdp::save_safetensors(p, {{"w", {1}, {1.f}}}), Error);
  EXPECT_TRUE(listing().empty());
}

TEST_F(Safetensors, WriteFileAtomicLeavesNoTmp) {
  const std::string p = path("manifest.json");
  subdp::write_file_atomic(p, "{\"a\": 1}\n");
  EXPECT_EQ(read_all(p), "{\"a\": 1}\n");
  subdp::write_file_atomic(p, "second");
  EXPECT_EQ(read_all(p), "second");
  subdp::write_file_atomic(p, "");
  EXPECT_EQ(read_all(p), "");
  EXPECT_EQ(listing(), std::vector<std::string>{"manifest.json"});
  EXPECT_FALSE(fs::exists(p + ".tmp." + std::to_string(getpid())));
}

TEST_F(Safetensors, WriteFileAtomicErrorNamesPath) {
  const std::string p = path("missing_dir/manifest.json");
  try {
    subdp::write_file_atomic(p, "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(Safetensors, FileCrc32) {
  const std::string p = path("check.txt");
  write_raw(p, "123456789");
  EXPECT_EQ(subdp::file_crc32(p), "cbf43926");  // the standard CRC-32 check value
  write_raw(p, "");
  EXPECT_EQ(subdp::file_crc32(p), "00000000");
  // Larger than one read chunk (1 MiB): matches the CRC of the same bytes built in two parts.
  std::string big(3 * (1 << 20) + 17, 'z');
  write_raw(p, big);
  const std::string crc = subdp::file_crc32(p);
  EXPECT_EQ(crc.size(), 8u);
  big[5] = 'y';
  write_raw(p, big);
  EXPECT_NE(subdp::file_crc32(p), crc);
  const std::string missing = path("nope.bin");
  try {
    subdp::file_crc32(missing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST_F(Safetensors, ReadableByPlainNumpyReader) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const std::string p = path("py.safetensors");
  std::vector<NamedTensor> ts = {
      {"w", {2, 3}, {1.5f, -2.f, 0.f, 4.f, 3.25f, 1e-3f}},
      {"b", {3}, {-1.f, 0.5f, 7.f}},
      {"s", {}, {42.f}},
  };
  subdp::save_safetensors(p, ts, {{"step", "7"}});
  const std::string script = path("check.py");
  write_raw(script, R"PY(
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert (8 + n) % 8 == 0, n
header = json.loads(raw[8:8 + n].decode("utf-8"))
data = raw[8 + n:]
assert header["__metadata__"] == {"step": "7"}, header
want = {"w": ([2, 3], [1.5, -2, 0, 4, 3.25, 1e-3]), "b": ([3], [-1, 0.5, 7]), "s": ([], [42])}
assert set(k for k in header if k != "__metadata__") == set(want), header
for name, (shape, vals) in want.items():
    e = header[name]
    assert e["dtype"] == "F32" and e["shape"] == shape, e
    b, end = e["data_offsets"]
    arr = np.frombuffer(data[b:end], dtype="<f4").reshape(shape)
    assert np.array_equal(arr, np.array(vals, dtype=np.float32).reshape(shape)), (name, arr)
print("ok")
)PY");
  const std::string cmd = "/usr/bin/python3 " + script + " " + p;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}
