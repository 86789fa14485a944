// TOML run configs: parsing, validation, "--set" overrides and canonical output.
// toml++ is heavy: it is included in this translation unit only.
//
// Every key is registered once in fields() (config_schema.cpp) with a pointer to its Config
// member and a rule; parsing, validation, override checks and config_to_toml all walk that list.
#include <toml++/toml.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <utility>
#include <set>
#include <sstream>
#include <variant>

#include <fmt/ranges.h>

#include "engine/config/config.h"
#include "engine/core/error.h"
#include "engine/cli/config_rules.h"
#include "engine/cli/config_schema.h"
#include "engine/cli/suggest.h"

namespace subdp {
namespace {

using schema::ChoiceRef;
using schema::Field;
using schema::fields;
using schema::Rule;

// ---------------------------------------------------------------- names and text

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::vector<std::string> table_names(const std::vector<Field>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs)
    if (out.empty() || out.back() != f.table) out.push_back(f.table);
  return out;
}

std::vector<std::string> keys_of(const std::vector<Field>& fs, std::string_view table) {
  std::vector<std::string> out;
  for (const auto& f : fs)
    if (table == f.table) out.push_back(f.key);
  return out;
}

const Field* find_field(const std::vector<Field>& fs, std::string_view table, std::string_view key) {
  for (const auto& f : fs)
    if (table == f.table && key == f.key) return &f;
  return nullptr;
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

/// The code point of the UTF-8 sequence that starts at s[i] and its length in bytes; length 0
/// where the bytes there are not UTF-8 (RFC 3629: no overlong forms, surrogates or code points
/// past U+10FFFF).
std::pair<char32_t, int> utf8_at(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned lead = byte(i);
  const int n = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 && lead <= 0xDF ? 2 : 0;
  if (n == 0 || lead > 0xF4) return {0, 0};
  char32_t cp = lead & (0x7Fu >> n);
  for (int k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return {0, 0};
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0, 0};
  return {cp, n};
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const int n = static_cast<unsigned char>(s[i]) < 0x80 ? 1 : utf8_at(s, i).second;
    if (n == 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

/// s as a TOML basic string of ASCII only: other characters as \uXXXX or \UXXXXXXXX escapes,
/// so that the canonical config text a checkpoint keeps parses again (configs must be ASCII:
/// check_ascii). s must be UTF-8 (parse_override_value checks a --set value's).
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      out += {'\\', static_cast<char>(ch)};
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch < 0x20 || ch == 0x7f) {
      out += fmt::format("\\u{:04X}", ch);
    } else if (ch >= 0x80) {
      const auto [cp, n] = utf8_at(s, i);
      SUBDP_ASSERT(n > 0);
      out += cp <= 0xFFFF ? fmt::format("\\u{:04X}", static_cast<uint32_t>(cp))
                          : fmt::format("\\U{:08X}", static_cast<uint32_t>(cp));
      i += static_cast<size_t>(n - 1);
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string show(const toml::node& n) {
  if (n.is_table()) return "{...}";
  if (n.is_string()) return quote(n.as_string()->get());
  if (n.is_array()) {
    std::vector<std::string> items;
    for (const toml::node& e : *n.as_array()) items.push_back(show(e));
    return "[" + join(items) + "]";
  }
  std::ostringstream os;
  n.visit([&](const auto& x) { os << x; });
  return os.str();
}

std::string format_number(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a TOML float
  return s;
}

std::string describe(const Rule& r) {
  const char* open = r.lo_open ? "(" : "[";
  const char* close = r.hi_open ? ")" : "]";
  if (r.lo && r.hi) return fmt::format("must be in {}{}, {}{}", open, *r.lo, *r.hi, close);
  if (r.lo) return fmt::format("must be {} {}", r.lo_open ? ">" : ">=", *r.lo);
  if (r.hi) return fmt::format("must be {} {}", r.hi_open ? "<" : "<=", *r.hi);
  return "";
}

bool satisfies(const Rule& r, double x) {
  if (r.lo && (r.lo_open ? !(x > *r.lo) : !(x >= *r.lo))) return false;
  if (r.hi && (r.hi_open ? !(x < *r.hi) : !(x <= *r.hi))) return false;
  return true;
}

// ---------------------------------------------------------------- reading values

/// Where a value came from, for messages: "configs/x.toml: [train] batch_size = -3".
struct Where {
  std::string path, table, key;
  const toml::node& node;
  bool from_override;
  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(fmt::format("{}: [{}] {} = {}{}: {}", path, table, key, show(node),
                            from_override ? " (from --set)" : "", problem));
  }
};

int64_t read_integer(const toml::node& n, const Rule& rule, const Where& w, int64_t lo, int64_t hi) {
  if (!n.is_integer()) w.fail("expected an integer, found " + type_name(n));
  int64_t v = n.as_integer()->get();
  if (!satisfies(rule, static_cast<double>(v))) w.fail(describe(rule));
  if (v < lo || v > hi) w.fail(fmt::format("does not fit (range {} .. {})", lo, hi));
  return v;
}

void read(const toml::node& n, int* out, const Rule& r, const Where& w) {
  *out = static_cast<int>(read_integer(n, r, w, INT_MIN, INT_MAX));
}
void read(const toml::node& n, int64_t* out, const Rule& r, const Where& w) {
  *out = read_integer(n, r, w, INT64_MIN, INT64_MAX);
}
void read(const toml::node& n, uint64_t* out, const Rule& r, const Where& w) {
  *out = static_cast<uint64_t>(read_integer(n, r, w, 0, INT64_MAX));
}

void read(const toml::node& n, double* out, const Rule& r, const Where& w) {
  if (!n.is_number()) w.fail("expected a number, found " + type_name(n));
  double v = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
  if (!std::isfinite(v)) w.fail("must be finite");
  // The engine computes in float32: a value it cannot hold would overflow to inf or vanish.
  if (std::fabs(v) > FLT_MAX) w.fail("must be representable in float32 (|x| <= 3.4e38)");
  // The rule first: a value it forbids is named with the rule (keep = 1e-45 is not "0 or ...").
  if (!satisfies(r, v)) w.fail(describe(r));
  if (v != 0 && std::fabs(v) < FLT_MIN)
    w.fail(satisfies(r, 0.0) ? "must be 0 or a normal float32 (|x| >= 1.2e-38)"
                             : "must be a normal float32 (|x| >= 1.2e-38)");
  *out = v;
}

void read(const toml::node& n, bool* out, const Rule&, const Where& w) {
  if (!n.is_boolean()) w.fail("expected a boolean (true or false), found " + type_name(n));
  *out = n.as_boolean()->get();
}

void read(const toml::node& n, std::string* out, const Rule&, const Where& w) {
  if (!n.is_string()) w.fail("expected a string, found " + type_name(n));
  *out = n.as_string()->get();
}

void read(const toml::node& n, ChoiceRef out, const Rule&, const Where& w) {
  if (!n.is_string()) w.fail("expected a string, found " + type_name(n));
  const std::string& v = n.as_string()->get();
  for (size_t i = 0; i < out.count; ++i)
    if (v == out.names[i]) return out.set(i);
  w.fail("must be one of " + join(out.spellings()));
}

void read(const toml::node& n, std::vector<int>* out, const Rule& r, const Where& w) {
  if (!n.is_array()) w.fail("expected an array of integers, found " + type_name(n));
  const toml::array& a = *n.as_array();
  if (r.nonempty && a.empty()) w.fail("must not be empty");
  std::vector<int> v;
  for (const toml::node& e : a) {
    if (!e.is_integer()) w.fail("expected an array of integers, found " + type_name(e) + " " + show(e));
    int64_t x = e.as_integer()->get();
    if (!satisfies(r, static_cast<double>(x)) || x > INT_MAX)
      w.fail(fmt::format("element {}: {}", x, x > INT_MAX ? "too large" : describe(r)));
    v.push_back(static_cast<int>(x));
  }
  *out = std::move(v);
}

// ---------------------------------------------------------------- document checks

/// Every table and key of the document must be registered.
void check_known(const toml::table& root, const std::vector<Field>& fs, const std::string& path) {
  auto tables = table_names(fs);
  for (const auto& [name, node] : root) {
    std::string t(name.str());
    if (std::find(tables.begin(), tables.end(), t) == tables.end())
      throw Error(
          fmt::format("{}: unknown table [{}]{}; valid tables: {}", path, t, suggestion(t, tables), join(tables)));
    if (!node.is_table())
      throw Error(fmt::format("{}: {} = {}: expected a table [{}], found {}", path, t, show(node), t, type_name(node)));
    auto keys = keys_of(fs, t);
    for (const auto& [kname, knode] : *node.as_table()) {
      std::string k(kname.str());
      if (!find_field(fs, t, k))
        throw Error(fmt::format("{}: unknown key {}.{}{}; valid keys of [{}]: {}", path, t, k, suggestion(k, keys), t,
                                join(keys)));
    }
  }
}

void read_fields(const toml::table& root, const std::vector<Field>& fs, const std::string& path,
                 const std::set<std::string>& overridden) {
  for (const Field& f : fs) {
    const toml::node* n = root.at_path(std::string(f.table) + "." + f.key).node();
    if (!n) continue;
    std::string dotted = std::string(f.table) + "." + f.key;
    Where w{path, f.table, f.key, *n, overridden.count(dotted) > 0};
    std::visit([&](auto target) { read(*n, target, f.rule, w); }, f.target);
  }
}

// ---------------------------------------------------------------- overrides

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

/// The TOML value of an override's text; bare words (and anything for a string key
/// that is not a quoted TOML string) become strings.
// toml++ 3.3 (Debian) reaches __builtin_unreachable (undefined behaviour) on some non-ASCII
// input, in strings as well (found by fuzzing, e.g. U+FE7F near a parse error). Configs are
// refused if they hold any non-ASCII byte, before toml++ sees them.
void check_ascii(const std::string& text, const std::string& path) {
  int line = 1;
  for (char ch : text) {
    if (ch == '\n') ++line;
    if (static_cast<unsigned char>(ch) >= 0x80)
      throw subdp::Error(
          fmt::format("{}:{}: non-ASCII byte in the config: subdp configs must be ASCII "
                      "(a limitation of the TOML parser it uses); write other characters in a string as "
                      "\\uXXXX escapes (\"m\\u00E9triques.jsonl\")",
                      path, line));
  }
}

toml::table parse_override_value(const std::string& text, bool string_key, const std::string& spec) {
  bool quoted = !text.empty() && (text[0] == '"' || text[0] == '\'');
  if (!string_key || quoted) {
    try {
      check_ascii("v = " + text, "--set");
      toml::table t = toml::parse("v = " + text);
      if (t.size() == 1 && t.contains("v")) return t;
    } catch (const toml::parse_error&) {
      // Digits TOML cannot hold (beyond 64 bits) are a number out of range, not a bare word.
      const size_t digits = text[0] == '+' || text[0] == '-' ? 1 : 0;
      const bool integer = text.size() > digits && text.find_first_not_of("0123456789_", digits) == std::string::npos;
      SUBDP_CHECK(!integer, "--set {}: {} is an integer out of the 64-bit range", spec, text);
      // A number TOML refuses (1e400, .5, 5.) would otherwise be "found a string".
      const bool numeric = text.find_first_not_of("0123456789+-.eE_", digits) == std::string::npos &&
                           text.find_first_of("0123456789") != std::string::npos;
      SUBDP_CHECK(!numeric,
                  "--set {}: {} is not a TOML number (floats as 0.5, 5.0 or 1e-3, digits on both sides of '.', "
                  "within +-1.8e308)",
                  spec, text);
    }
  }
  // A bare word is kept as it is: any UTF-8 (a path of José's), written back as escapes.
  SUBDP_CHECK(valid_utf8(text), "--set {}: the value is not valid UTF-8", spec);
  toml::table t;
  t.insert_or_assign("v", text);
  return t;
}

/// Applies "table.key=value" to the document; returns the dotted key.
std::string apply_override(toml::table& root, const std::vector<Field>& fs, const std::string& spec) {
  auto eq = spec.find('=');
  SUBDP_CHECK(eq != std::string::npos, "--set {}: expected table.key=value (e.g. train.batch_size=64)", spec);
  std::string dotted = trim(spec.substr(0, eq)), text = trim(spec.substr(eq + 1));
  auto dot = dotted.find('.');
  SUBDP_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < dotted.size(),
              "--set {}: key '{}' must be table.key (e.g. train.batch_size=64)", spec, dotted);
  std::string table = dotted.substr(0, dot), key = dotted.substr(dot + 1);
  auto tables = table_names(fs);
  SUBDP_CHECK(std::find(tables.begin(), tables.end(), table) != tables.end(),
              "--set {}: unknown table [{}] in key {}{}; valid tables: {}", spec, table, dotted,
              suggestion(table, tables), join(tables));
  const Field* f = find_field(fs, table, key);
  auto keys = keys_of(fs, table);
  SUBDP_CHECK(f, "--set {}: unknown key {}{}; valid keys of [{}]: {}", spec, dotted, suggestion(key, keys), table,
              join(keys));
  bool string_key = std::holds_alternative<std::string*>(f->target) || std::holds_alternative<ChoiceRef>(f->target);
  toml::table value = parse_override_value(text, string_key, spec);
  if (!root.contains(table) || !root[table].is_table()) root.insert_or_assign(table, toml::table{});
  toml::table& dst = *root[table].as_table();
  value.get("v")->visit([&](const auto& v) { dst.insert_or_assign(key, v); });
  return dotted;
}

// ---------------------------------------------------------------- output

std::string to_text(const int* v) { return std::to_string(*v); }
std::string to_text(const int64_t* v) { return std::to_string(*v); }
std::string to_text(const uint64_t* v) { return std::to_string(*v); }
std::string to_text(const double* v) { return format_number(*v); }
std::string to_text(const bool* v) { return *v ? "true" : "false"; }
std::string to_text(const std::string* v) { return quote(*v); }
std::string to_text(const ChoiceRef& v) { return quote(v.names[v.get()]); }
std::string to_text(const std::vector<int>* v) { return "[" + fmt::format("{}", fmt::join(*v, ", ")) + "]"; }

}  // namespace

Config parse_config(const std::string& text, const std::string& path, const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    check_ascii(text, path);
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw Error(fmt::format("{}:{}:{}: invalid TOML: {}", path, at.line, at.column, e.description()));
  }
  Config c;
  c.source = path;
  auto fs = fields(c);
  check_known(root, fs, path);
  std::set<std::string> overridden;
  for (const auto& spec : overrides) overridden.insert(apply_override(root, fs, spec));
  read_fields(root, fs, path, overridden);
  check_config_rules(c, path);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  SUBDP_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a config file (expected a TOML file)",
              path);
  SUBDP_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_regular_file(path, ec),
              "{}: not a regular file (expected a TOML file)", path);
  std::ifstream in(path, std::ios::binary);
  SUBDP_CHECK(in, "{}: cannot open config file", path);
  std::stringstream buf;
  buf << in.rdbuf();
  SUBDP_CHECK(!in.bad(), "{}: cannot read config file", path);
  return parse_config(buf.str(), path, overrides);
}

std::string config_to_toml(const Config& config) {
  Config copy = config;
  std::string out, table;
  for (const Field& f : fields(copy)) {
    if (table != f.table) {
      out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", f.table);
      table = f.table;
    }
    out += fmt::format("{} = {}\n", f.key, std::visit([](const auto& v) { return to_text(v); }, f.target));
  }
  return out;
}

}  // namespace subdp
