// The first difference between two canonical config texts (config_to_toml), for the error
// that ranks started with different configs print.
#pragma once
#include <string>

namespace subdp {

/// One differing key: its dotted name ("train.seed") and its value in each text.
struct ConfigDifference {
  std::string key, a, b;  // key empty: no difference
};

/// The first key whose line differs between two canonical TOML texts (same tables and keys
/// in the same order, as config_to_toml writes them). Texts that are not canonical give
/// "line N" as the key and the two whole lines.
ConfigDifference first_config_difference(const std::string& a, const std::string& b);

}  // namespace subdp
