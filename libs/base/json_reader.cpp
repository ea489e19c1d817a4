#include "libs/base/json_reader.h"

#include <limits>

#include "libs/base/config_error.h"
#include "libs/base/json_error.h"
#include "libs/base/printable.h"

namespace ravnest::base {

JsonReader::json JsonReader::parse_object(const std::string& text) const {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond what a double holds (1e999)
    throw json_syntax_error(origin_, e.what());
  }
  if (!root.is_object()) fail("(top level)", "must be an object, got " + kind(root));
  return root;
}

void JsonReader::fail(const std::string& field, const std::string& problem) const {
  throw ConfigError(origin_ + ": " + printable(field, 200) + ": " + printable(problem, 300));
}

const JsonReader::json& JsonReader::member(const json& object, const std::string& path,
                                           const std::string& key) const {
  const std::string field = join(path, key);
  if (!object.is_object()) fail(path.empty() ? "(top level)" : path, "must be an object");
  const auto it = object.find(key);
  if (it == object.end()) fail(field, "is missing");
  return *it;
}

std::string JsonReader::string(const json& object, const std::string& path,
                               const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_string()) fail(join(path, key), "must be a string, got " + kind(v));
  return v.get<std::string>();
}

int64_t JsonReader::int64(const json& v, const std::string& field) const {
  if (!v.is_number_integer()) fail(field, "must be an integer, got " + kind(v));
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    fail(field, "is out of range");
  }
  return v.get<int64_t>();
}

int JsonReader::integer(const json& v, const std::string& field) const {
  const int64_t x = int64(v, field);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    fail(field, "is out of range");
  }
  return static_cast<int>(x);
}

int JsonReader::integer(const json& object, const std::string& path, const std::string& key) const {
  return integer(member(object, path, key), join(path, key));
}

int64_t JsonReader::int64(const json& object, const std::string& path,
                          const std::string& key) const {
  return int64(member(object, path, key), join(path, key));
}

uint64_t JsonReader::uint64(const json& object, const std::string& path,
                            const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_number_integer()) fail(join(path, key), "must be an integer, got " + kind(v));
  if (!v.is_number_unsigned() && v.get<int64_t>() < 0) fail(join(path, key), "must be >= 0");
  return v.get<uint64_t>();
}

double JsonReader::number(const json& object, const std::string& path,
                          const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_number()) fail(join(path, key), "must be a number, got " + kind(v));
  return v.get<double>();
}

bool JsonReader::boolean(const json& object, const std::string& path,
                         const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_boolean()) fail(join(path, key), "must be true or false, got " + kind(v));
  return v.get<bool>();
}

const JsonReader::json& JsonReader::array(const json& object, const std::string& path,
                                          const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_array()) fail(join(path, key), "must be an array, got " + kind(v));
  return v;
}

const JsonReader::json& JsonReader::object(const json& object, const std::string& path,
                                           const std::string& key) const {
  const json& v = member(object, path, key);
  if (!v.is_object()) fail(join(path, key), "must be an object, got " + kind(v));
  return v;
}

std::vector<int> JsonReader::int_list(const json& object, const std::string& path,
                                      const std::string& key) const {
  const json& a = array(object, path, key);
  std::vector<int> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(integer(a[i], index(join(path, key), i)));
  return out;
}

std::vector<int> JsonReader::int_list(const json& a, const std::string& field) const {
  if (!a.is_array()) fail(field, "must be an array, got " + kind(a));
  std::vector<int> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(integer(a[i], index(field, i)));
  return out;
}

std::vector<std::string> JsonReader::string_list(const json& object, const std::string& path,
                                                 const std::string& key) const {
  const json& a = array(object, path, key);
  std::vector<std::string> out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_string()) fail(index(join(path, key), i), "must be a string, got " + kind(a[i]));
    out.push_back(a[i].get<std::string>());
  }
  return out;
}

std::string JsonReader::join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string JsonReader::index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string JsonReader::kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_float: return "a fractional number";
    default: return "a number";
  }
}

}  // namespace ravnest::base
