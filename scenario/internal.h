// Private to fd_scenario: helpers shared by the YAML mapper
// (loader.cc) and the semantic checks / `fix --set`
// (validate.cc). Not part of the API; include loader.h.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/status.h"
#include "faults/job_setting.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::scenario::scenario_internal {

// --- paths and messages ------------------------------------------------------

inline std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
inline std::string Indexed(const std::string& prefix, int i) {
  return prefix + "[" + std::to_string(i) + "]";
}

inline std::string JoinList(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

template <typename... A>
std::string Str(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

// A semantic problem found after mapping. `locate` is the path whose YAML
// position best points at it (defaults to `path`).
struct Problem {
  std::string path;
  std::string message;
  std::string locate;
};
using Check = std::optional<Problem>;
inline Check Fail(std::string path, std::string message, std::string locate = "") {
  return Problem{std::move(path), std::move(message), std::move(locate)};
}

inline std::string FormatProblem(const std::string& where, const Problem& p) {
  std::string out = where;
  if (!p.path.empty()) out += (out.empty() ? "" : ": ") + p.path;
  return out + (out.empty() ? "" : ": ") + p.message;
}

// --- YAML -> protobuf (loader.cc; scenario and exam files alike) ------

// Maps a YAML file's text onto `msg` by field name: unknown and duplicate
// keys, wrong types and enum values are errors at file:line:column. `what`
// names the file in messages ("scenario file"). `marks` receives each
// dotted path's position, for LocateProblem.
Status MapYamlText(const std::string& yaml_text, const std::string& filename, const std::string& what,
                   google::protobuf::Message* msg, std::map<std::string, YAML::Mark>* marks);
// A semantic problem as InvalidArgument at the position of its path (or of
// the nearest enclosing node the file has).
Status LocateProblem(const std::string& filename, const std::map<std::string, YAML::Mark>& marks,
                     const Problem& p);

// --- semantic checks (validate.cc) -----------------------------------

Check CheckScenario(const v1::Scenario& s);

}  // namespace firedrill::scenario::scenario_internal
