// Checkpoint file I/O: float32 tensors in the safetensors format, atomic file
// writes (tmp + fsync + rename), and whole-file CRC32 for checkpoint manifests.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace subdp {

/// One tensor as stored in a safetensors file: name, shape (row-major) and
/// float32 values; data.size() must equal the product of shape (1 for shape {}).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Writes tensors as float32 ("F32") in the safetensors format: an 8-byte
/// little-endian header length, a JSON header (dtype / shape / data_offsets per
/// tensor, plus an optional "__metadata__" string-to-string map), padded with
/// spaces to a multiple of 8 bytes, then the raw little-endian data. Header keys
/// and data follow the order of `tensors`. The write is atomic: the file is
/// written to path + ".tmp.<pid>", flushed and fsync'ed, renamed over path, and
/// the directory is fsync'ed. Throws subdp::Error (naming path) on an invalid
/// tensor (empty, duplicate or reserved name; negative dimension; data size not
/// matching shape) or an I/O failure; on failure path is left untouched.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads every tensor of a safetensors file, in data-offset order (which is the
/// order save_safetensors wrote them in). Only F32 is supported: any other dtype
/// is an error naming the tensor and the dtype. Validates that the file exists,
/// is at least 8 bytes, the header length fits the file and is <= 100 MB, the
/// header is a JSON object, every entry has dtype / shape / data_offsets, the
/// offsets lie within the data section, end - begin == product(shape) * 4, and no
/// two tensors overlap. When metadata is non-null it receives "__metadata__"
/// (cleared first; empty when absent). Throws subdp::Error naming the file and
/// the problem, e.g. "ckpt/model.safetensors: truncated: header declares 1234
/// data bytes, file holds 1000".
std::vector<NamedTensor> load_safetensors(const std::string& path,
                                          std::map<std::string, std::string>* metadata = nullptr);

/// CRC32 (zlib polynomial) of the whole file at path, as 8 lower-case hex digits
/// (e.g. "cbf43926"), for checkpoint manifests. Throws subdp::Error if the file
/// cannot be opened or read.
std::string file_crc32(const std::string& path);

/// Atomically replaces path with contents: writes path + ".tmp.<pid>", flushes
/// and fsyncs it, renames it over path and fsyncs the directory. Readers see
/// either the old file or the complete new one. Throws subdp::Error on failure
/// (removing the temporary file).
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace subdp
