// "Did you mean" for unknown names, by edit distance.
#include "engine/cli/suggest.h"

#include <algorithm>

#include <fmt/format.h>

namespace subdp {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string suggestion(std::string_view unknown, const std::vector<std::string>& valid) {
  for (const auto& v : valid)
    if (edit_distance(unknown, v) <= 2) return fmt::format(" (did you mean '{}'?)", v);
  return "";
}

}  // namespace subdp
