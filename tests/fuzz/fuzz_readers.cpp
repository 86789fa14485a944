// libFuzzer target for every file reader and the config parser: the input is written to a
// temporary file and read back; a subdp::Error is the expected outcome of bad input, any
// crash, leak or sanitizer report is a bug. SUBDP_FUZZ_TARGET selects the reader.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/config/config.h"
#include "engine/data/dataset.h"
#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace {

std::string temp_path() {
  static const std::string path = "/tmp/subdp-fuzz-" + std::to_string(getpid());
  return path;
}

void write_input(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string target = SUBDP_FUZZ_TARGET;
  try {
    if (target == "config") {
      subdp::parse_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml", {});
      return 0;
    }
    if (target == "cifar") {
      mkdir((temp_path() + ".d").c_str(), 0700);
      write_input(temp_path() + ".d/test_batch.bin", data, size);
      subdp::load_cifar10_dir(temp_path() + ".d", false);
      return 0;
    }
    write_input(temp_path(), data, size);
    if (target == "idx") {
      subdp::load_idx_pair(temp_path(), temp_path());
    } else if (target == "tokens") {
      subdp::load_token_shards(temp_path(), 65536);
    } else if (target == "text") {
      subdp::load_text_bytes(temp_path());
    } else if (target == "safetensors") {
      subdp::load_safetensors(temp_path());
    }
  } catch (const subdp::Error&) {
    // Expected: bad input is refused with a clear error.
  }
  return 0;
}
