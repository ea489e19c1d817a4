// One table of a job file ([train], [data], ...) as its parsers read it: typed getters whose
// errors are one-line ConfigErrors naming the file and the field, a record of the keys allowed so
// that leftovers are reported as unknown, and the choice of a name among a table of them.
// Internal to libs/config's job parsers (job_spec.cpp, compression_spec.cpp).
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "libs/base/config_error.h"
#include "libs/base/nearest_name.h"
#include "libs/base/printable.h"
#include "libs/config/job/ravnest_vocabulary.h"
#include "libs/config/job/trainer_vocabulary.h"

namespace ravnest::config::job_section {

inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

inline std::string in_quotes(const std::string& text) { return "'" + text + "'"; }

inline const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// Why `key` is not among `known`: Ravnest's or another trainer's word gets its equivalent here,
// a typo the nearest known key, anything else the list.
inline std::string unknown_key_text(const std::string& key, const std::vector<std::string>& known) {
  if (auto equivalent = ravnest_equivalent(key)) return "unknown key; " + *equivalent;
  if (auto equivalent = trainer_equivalent(key)) return "unknown key; " + *equivalent;
  if (auto near = base::nearest_name(key, known)) {
    return "unknown key; did you mean " + in_quotes(*near) + "? (" + join(known) + ")";
  }
  return "unknown key (" + join(known) + ")";
}

inline std::string format_number(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// One table of the job ([train], [data], ...): typed getters whose errors name the field, and a
// record of the keys read so that leftovers can be reported as unknown.
class Section {
 public:
  Section(const toml::table* table, std::string name, const std::string& origin)
      : table_(table), name_(std::move(name)), origin_(origin) {}

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    // Keys and values of the file appear in both: printable() keeps the message one line.
    throw base::ConfigError(origin_ + ": " + base::printable(field(key), 200) + ": " + base::printable(message, 300));
  }

  std::string field(const std::string& key) const { return name_ + "." + key; }

  bool has(const std::string& key) const { return table_ && table_->get(key) != nullptr; }

  const toml::node* node(const std::string& key) const {
    return table_ ? table_->get(key) : nullptr;
  }

  // Every key present must be in `known`.
  void check_known(const std::vector<std::string>& known) const {
    if (!table_) return;
    for (const auto& [key, value] : *table_) {
      const std::string name(key.str());
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        fail(name, unknown_key_text(name, known));
      }
    }
  }

  // Keys present that the chosen variant does not take.
  void check_applicable(const std::vector<std::string>& allowed, const std::string& variant) const {
    if (!table_) return;
    for (const auto& [key, value] : *table_) {
      const std::string name(key.str());
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        fail(name, "not an option of " + variant + " (" + join(allowed) + ")");
      }
    }
  }

  std::optional<std::string> string(const std::string& key) const {
    const toml::node* n = node(key);
    if (!n) return std::nullopt;
    if (const auto* s = n->as_string()) return s->get();
    fail(key, std::string("must be a string, got ") + type_name(*n));
  }

  std::optional<bool> boolean(const std::string& key) const {
    const toml::node* n = node(key);
    if (!n) return std::nullopt;
    if (const auto* b = n->as_boolean()) return b->get();
    fail(key, std::string("must be true or false, got ") + type_name(*n));
  }

  std::optional<int64_t> integer(const std::string& key, int64_t min, int64_t max = INT64_MAX) const {
    const toml::node* n = node(key);
    if (!n) return std::nullopt;
    const auto* i = n->as_integer();
    if (!i) fail(key, std::string("must be an integer, got ") + type_name(*n));
    const int64_t value = i->get();
    if (value < min || value > max) fail(key, range_text(min, max) + ", got " + std::to_string(value));
    return value;
  }

  // An integer or a float; finite and >= min (or > min when `exclusive`).
  std::optional<double> number(const std::string& key, double min = -INFINITY, bool exclusive = false,
                               double max = INFINITY) const {
    const toml::node* n = node(key);
    if (!n) return std::nullopt;
    return check_number(key, *n, min, exclusive, max);
  }

  double check_number(const std::string& key, const toml::node& n, double min, bool exclusive,
                      double max) const {
    double value;
    if (const auto* i = n.as_integer()) {
      value = static_cast<double>(i->get());
    } else if (const auto* f = n.as_floating_point()) {
      value = f->get();
    } else {
      fail(key, std::string("must be a number, got ") + type_name(n));
    }
    if (!std::isfinite(value)) fail(key, "must be a finite number, got " + format_number(value));
    if (exclusive ? !(value > min) : !(value >= min)) {
      fail(key, std::string("must be ") + (exclusive ? "> " : ">= ") + format_number(min) + ", got " +
                    format_number(value));
    }
    if (value > max) fail(key, "must be <= " + format_number(max) + ", got " + format_number(value));
    return value;
  }

  const toml::array* array(const std::string& key) const {
    const toml::node* n = node(key);
    if (!n) return nullptr;
    const auto* a = n->as_array();
    if (!a) fail(key, std::string("must be an array, got ") + type_name(*n));
    return a;
  }

 private:
  static std::string range_text(int64_t min, int64_t max) {
    if (max == INT64_MAX) return "must be >= " + std::to_string(min);
    return "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }

  const toml::table* table_;
  std::string name_;
  const std::string& origin_;
};

template <typename Enum>
Enum choose(const Section& section, const std::string& key, const std::string& value,
            const std::vector<std::pair<std::string, Enum>>& choices, const std::string& what) {
  std::vector<std::string> names;
  for (const auto& [name, choice] : choices) {
    if (name == value) return choice;
    names.push_back(name);
  }
  if (auto equivalent = trainer_equivalent(value)) {
    section.fail(key, "unknown " + what + " " + in_quotes(value) + "; " + *equivalent);
  }
  if (auto near = base::nearest_name(value, names)) {
    section.fail(key, "unknown " + what + " " + in_quotes(value) + "; did you mean " + in_quotes(*near) +
                          "? (" + join(names) + ")");
  }
  section.fail(key, "unknown " + what + " " + in_quotes(value) + " (" + join(names) + ")");
}

template <typename Enum>
const char* name_of(Enum value, const std::vector<std::pair<std::string, Enum>>& choices) {
  for (const auto& [name, choice] : choices) {
    if (choice == value) return name.c_str();
  }
  return "?";
}

}  // namespace ravnest::config::job_section
