// The config rules that involve more than one key (config_rules.cpp).
#pragma once
#include <string>

#include "engine/config/config.h"

namespace subdp {

/// Checks every rule between keys of a parsed config (epochs or steps, masking and
/// coverage, stochastic depth, alignment, re-dealing, sharding, resume, precision, stop
/// signals). Errors: subdp::Error "<path>: [table] key = value: <what is expected>".
void check_config_rules(const Config& config, const std::string& path);

}  // namespace subdp
