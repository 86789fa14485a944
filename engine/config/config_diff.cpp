// Line-by-line comparison of canonical config texts.
#include "engine/config/config_diff.h"

#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace subdp {

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

ConfigDifference first_config_difference(const std::string& a, const std::string& b) {
  const auto la = lines_of(a), lb = lines_of(b);
  std::string table;
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "", y = i < lb.size() ? lb[i] : "";
    if (x == y) {
      if (!x.empty() && x.front() == '[') table = x.substr(1, x.find(']') - 1);
      continue;
    }
    const size_t ex = x.find('='), ey = y.find('=');
    if (ex == std::string::npos || ey == std::string::npos || trimmed(x.substr(0, ex)) != trimmed(y.substr(0, ey)))
      return {fmt::format("line {}", i + 1), x, y};  // different keys: not canonical texts
    const std::string key = trimmed(x.substr(0, ex));
    return {(table.empty() ? "" : table + ".") + key, trimmed(x.substr(ex + 1)), trimmed(y.substr(ey + 1))};
  }
  return {};
}

}  // namespace subdp
