// Reading a JSON document that may have come from a file (a result, a
// report): a missing key or a value of another type reads as empty and never
// throws, unlike nlohmann's operator[] on a const object or value().
#pragma once

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace firedrill::controller::json_read {

using json = nlohmann::json;

inline const json& Field(const json& j, const char* key) {
  static const json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}
inline const json& List(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json& f = Field(j, key);
  return f.is_array() ? f : kEmpty;
}
inline std::string Str(const json& j, const char* key) {
  const json& f = Field(j, key);
  return f.is_string() ? f.get<std::string>() : "";
}
// Integers, doubles (truncated) and protobuf JSON's int64 strings.
inline int64_t Int(const json& j, const char* key) {
  const json& f = Field(j, key);
  if (f.is_number_integer()) return f.get<int64_t>();
  if (f.is_number()) return static_cast<int64_t>(f.get<double>());
  if (f.is_string()) return std::atoll(f.get<std::string>().c_str());
  return 0;
}
inline double Num(const json& j, const char* key) {
  const json& f = Field(j, key);
  return f.is_number() ? f.get<double>() : 0.0;
}
inline bool Bool(const json& j, const char* key) {
  const json& f = Field(j, key);
  return f.is_boolean() && f.get<bool>();
}
// A value as text: a string as is, anything else as JSON.
inline std::string Text(const json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace firedrill::controller::json_read
