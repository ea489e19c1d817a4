// JsonReader: strict reading of a JSON file (node files, plan.json, a .pt2's exported program):
// every field named, every type checked, and an error is one ConfigError line naming the file and
// the field's path, "<origin>: <path>: <problem>" (e.g. "nodes/node_3.json: rings[0].peers[1].node:
// must be an integer, got a string"). Keys and values come from a file, so both are made
// printable. Stateless but for the origin: copyable, usable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ravnest::base {

class JsonReader {
 public:
  using json = nlohmann::json;

  explicit JsonReader(std::string origin) : origin_(std::move(origin)) {}

  // `text` parsed, which must be a JSON object at its top level; throws ConfigError naming the
  // origin (a syntax error's place, or "(top level): must be an object").
  json parse_object(const std::string& text) const;

  // Throws ConfigError "<origin>: <field>: <problem>".
  [[noreturn]] void fail(const std::string& field, const std::string& problem) const;

  // `object`'s member `key`; `path` is the object's own path ("" at the top level).
  const json& member(const json& object, const std::string& path, const std::string& key) const;
  std::string string(const json& object, const std::string& path, const std::string& key) const;
  int integer(const json& object, const std::string& path, const std::string& key) const;
  int64_t int64(const json& object, const std::string& path, const std::string& key) const;
  uint64_t uint64(const json& object, const std::string& path, const std::string& key) const;
  double number(const json& object, const std::string& path, const std::string& key) const;
  bool boolean(const json& object, const std::string& path, const std::string& key) const;
  const json& array(const json& object, const std::string& path, const std::string& key) const;
  const json& object(const json& object, const std::string& path, const std::string& key) const;
  std::vector<int> int_list(const json& object, const std::string& path,
                            const std::string& key) const;
  std::vector<std::string> string_list(const json& object, const std::string& path,
                                       const std::string& key) const;

  // The same checks on a value already at hand, `field` its whole path.
  int integer(const json& value, const std::string& field) const;
  int64_t int64(const json& value, const std::string& field) const;
  std::vector<int> int_list(const json& value, const std::string& field) const;

  // "path.key" ("key" at the top level), "path[i]", and a value's kind for messages ("a string").
  static std::string join(const std::string& path, const std::string& key);
  static std::string index(const std::string& path, size_t i);
  static std::string kind(const json& value);

 private:
  std::string origin_;
};

}  // namespace ravnest::base
