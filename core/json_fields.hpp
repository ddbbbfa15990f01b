#pragma once
// Reading the fields of a small JSON description (a model's config.json, a GPU's description):
// each error starts with `origin` (the file, or the Lua field) and names the field.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace duet::json_fields {

using nlohmann::json;

// The text of a file that must be a regular file (`what` names it in errors, `expected` says
// what a directory should have been).
// Whether a model's or GPU's name names a file: a .json name, or a path with a folder. A bare name
// is a built-in's, even when a file of that name sits in the working directory.
inline bool names_a_file(const std::string& name_or_path) {
  return (name_or_path.size() > 5 && name_or_path.ends_with(".json")) ||
         name_or_path.find('/') != std::string::npos;
}

inline std::string read_file(const std::string& path, const std::string& what, const std::string& expected) {
  if (std::filesystem::is_directory(path))
    throw Error(path + ": is a directory, not a " + expected + " file");
  // A device such as /dev/zero never ends: refused, not read until memory runs out (a pipe is read once).
  if (std::filesystem::is_character_file(path) || std::filesystem::is_block_file(path))
    throw Error(path + ": a device, not a " + expected + " file");
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open " + what);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// JSON text as duet reads every file: a key given twice in one object is an error naming it, where
// the parser alone keeps the last silently (an edited file would then mean something other than it
// says). Throws json::exception for text that is not JSON, and Error for a repeated key.
inline json parse_unique_keys(std::string_view text) {
  std::vector<std::set<std::string>> open;  // the keys of each object being read
  std::optional<std::string> repeated;      // "" is a key too
  const json::parser_callback_t note = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open.emplace_back();
    else if (event == json::parse_event_t::object_end) open.pop_back();
    else if (event == json::parse_event_t::key && !repeated &&
             !open.back().insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text.begin(), text.end(), note);
  if (repeated) throw Error("key \"" + *repeated + "\" appears twice in one object");
  return j;
}

// The same, with `origin` (the file) in front of either error.
inline json parse(std::string_view text, const std::string& origin) {
  try {
    return parse_unique_keys(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  }
}

// The text as a JSON object.
inline json parse_object(const std::string& text, const std::string& origin) {
  json j = parse(text, origin);
  if (!j.is_object()) throw Error(origin + ": expected a JSON object");
  return j;
}

// Whether the field is given: present and not null (a null field stands for its default).
inline bool has_field(const json& j, const char* field) {
  auto it = j.find(field);
  return it != j.end() && !it->is_null();
}

// Every field of the object is one of `known` (a misspelt one would be a setting silently left out);
// the error lists them in the given order.
inline void check_known_fields(const json& j, const std::vector<std::string>& known,
                               const std::string& origin) {
  for (const auto& item : j.items()) {
    if (std::find(known.begin(), known.end(), item.key()) != known.end()) continue;
    std::string valid;
    for (const std::string& k : known) valid += (valid.empty() ? "" : ", ") + k;
    throw Error(origin + ": unknown field '" + item.key() + "' (valid: " + valid + ")");
  }
}

inline const json& require(const json& j, const char* field, const std::string& origin) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) throw Error(origin + ": missing field '" + field + "'");
  return *it;
}

inline std::int64_t require_int64(const json& j, const char* field, const std::string& origin) {
  const json& v = require(j, field, origin);
  if (!v.is_number_integer())
    throw Error(origin + ": field '" + field + "' must be an integer, got " + v.dump());
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    throw Error(origin + ": field '" + field + "' is out of range: " + v.dump());
  return v.get<std::int64_t>();
}

inline int require_int(const json& j, const char* field, const std::string& origin) {
  const std::int64_t wide = require_int64(j, field, origin);
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
    throw Error(origin + ": field '" + field + "' is out of range: " + require(j, field, origin).dump());
  return static_cast<int>(wide);
}

inline std::string require_string(const json& j, const char* field, const std::string& origin) {
  const json& v = require(j, field, origin);
  if (!v.is_string()) throw Error(origin + ": field '" + field + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

inline std::string optional_string(const json& j, const char* field, const std::string& origin) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_string()) throw Error(origin + ": field '" + field + "' must be a string, got " + it->dump());
  return it->get<std::string>();
}

inline double require_number(const json& j, const char* field, const std::string& origin) {
  const json& v = require(j, field, origin);
  if (!v.is_number()) throw Error(origin + ": field '" + field + "' must be a number, got " + v.dump());
  return v.get<double>();
}

// A list of numbers, each entry checked: "field 'log_slowdown' entry 18 must be a number, got null".
inline std::vector<double> require_numbers(const json& j, const char* field, const std::string& origin) {
  const json& v = require(j, field, origin);
  if (!v.is_array())
    throw Error(origin + ": field '" + field + "' must be a list of numbers, got " + v.dump());
  std::vector<double> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number())
      throw Error(origin + ": field '" + field + "' entry " + std::to_string(i + 1) +
                  " must be a number, got " + v[i].dump());
    out.push_back(v[i].get<double>());
  }
  return out;
}

template <typename T, typename F>
T optional_field(const json& j, const char* field, T fallback, F get) {
  auto it = j.find(field);
  return (it == j.end() || it->is_null()) ? fallback : get(*it);
}

}  // namespace duet::json_fields
