// Small helpers the trainer's files share: step timing (engine/core/clock.h) and how bytes are printed.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/core/clock.h"
#include "engine/core/memory.h"

namespace subdp {

/// "12.3 MiB" (bytes / 2^20, one decimal).
inline std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

/// {category name: bytes} for a per-category byte array (metrics lines).
inline nlohmann::json memory_json(const std::array<int64_t, kNumMemCategories>& bytes) {
  nlohmann::json j;
  for (int c = 0; c < kNumMemCategories; ++c) j[category_name(static_cast<MemCategory>(c))] = bytes[c];
  return j;
}

}  // namespace subdp
