// The config schema: every key of every table once, with where its value lives in Config and
// the rule it must satisfy (config_schema.cpp). Internal to the config parser (config_toml.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/config.h"

namespace subdp::schema {

/// A key whose value is one of a config enum's spellings (Choices<E>): reads and writes the
/// enum through its index.
struct ChoiceRef {
  const char* const* names;
  size_t count;
  std::function<size_t()> get;
  std::function<void(size_t)> set;
  /// The enum's spellings in index order (error messages list them).
  std::vector<std::string> spellings() const { return {names, names + count}; }
};

/// The ChoiceRef of enum field e (Choices<E> spells it); e must outlive the ChoiceRef.
template <class E>
ChoiceRef choice(E& e) {
  const auto& names = Choices<E>::names;
  return {names.data(), names.size(), [&e] { return static_cast<size_t>(e); },
          [&e](size_t i) { e = static_cast<E>(i); }};
}

using Target = std::variant<int*, int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<int>*, ChoiceRef>;

/// What a value (or each element of a list) must satisfy.
struct Rule {
  std::optional<double> lo, hi;  // numeric bounds
  bool lo_open = false, hi_open = false;
  bool nonempty = false;  // lists: at least one element
};

/// No constraint.
Rule any();
/// value >= lo.
Rule at_least(double lo);
/// value > lo.
Rule above(double lo);
/// lo <= value <= hi, each end excluded when its *_open flag is set.
Rule range(double lo, double hi, bool lo_open, bool hi_open);
/// lo <= value <= hi. The upper bounds on sizes are sanity limits far above any model this
/// engine trains; with the cross-key size rules (config_rules.cpp: 32-bit GEMM rows and
/// per-sample sizes, a rank's bytes below 2^56) they keep the shape arithmetic from overflowing.
Rule between(double lo, double hi);
/// A list of at least one element, each satisfying `element`.
Rule nonempty_list(Rule element);

/// One key: table.key in TOML (and --set), the Config member it writes, its rule.
struct Field {
  const char* table;
  const char* key;
  Target target;
  Rule rule;
};

/// The registry: every key of every table, in canonical order.
std::vector<Field> fields(Config& c);

}  // namespace subdp::schema
