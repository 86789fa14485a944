// "Did you mean" for unknown names (config tables and keys).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace subdp {

/// Levenshtein distance between a and b (insertions, deletions, substitutions).
size_t edit_distance(std::string_view a, std::string_view b);

/// " (did you mean 'x'?)" when a valid name is within edit distance 2 of the unknown one, else "".
std::string suggestion(std::string_view unknown, const std::vector<std::string>& valid);

}  // namespace subdp
