#include "scenario/loader.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "faults/registry.h"
#include "scenario/internal.h"

namespace firedrill::scenario {

namespace pb = google::protobuf;
using namespace scenario_internal;  // NOLINT: this library's own helpers

namespace {

// --- YAML positions ----------------------------------------------------------

std::string Where(const std::string& file, const YAML::Mark& m) {
  if (m.is_null()) return file;
  return Str(file, ":", m.line + 1, ":", m.column + 1);
}

std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    default:
      return "nothing";
  }
}

using FD = pb::FieldDescriptor;

// --- YAML -> protobuf --------------------------------------------------------

// Fields whose values the loader fills in itself.
bool Hidden(const FD* f) {
  return f->full_name() == "firedrill.v1.Scenario.source_file" ||
         f->full_name() == "firedrill.v1.ExamSpec.source_file";
}

// A message with `string kind` and a oneof `params` takes its parameters
// under the single YAML key `params`, routed to the oneof member named by kind.
const pb::OneofDescriptor* ParamsOneof(const pb::Descriptor* d) {
  const FD* kind = d->FindFieldByName("kind");
  if (kind == nullptr || kind->cpp_type() != FD::CPPTYPE_STRING) return nullptr;
  return d->FindOneofByName("params");
}

std::vector<std::string> KnownKeys(const pb::Descriptor* d) {
  const pb::OneofDescriptor* params = ParamsOneof(d);
  std::vector<std::string> keys;
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (Hidden(f) || (params != nullptr && f->containing_oneof() == params)) continue;
    keys.push_back(f->name());
  }
  if (params != nullptr) keys.push_back("params");
  return keys;
}

class Mapper {
 public:
  explicit Mapper(std::string file) : file_(std::move(file)) {}

  Status Message(const YAML::Node& n, pb::Message* msg, const std::string& path) {
    marks_.emplace(path, n.Mark());
    if (msg->GetDescriptor() == v1::IntOrDraw::descriptor()) return IntOrDraw(n, msg, path);
    if (msg->GetDescriptor() == v1::RankRef::descriptor()) return RankRef(n, msg, path);
    if (n.IsNull()) return Status::Ok();  // `key:` with nothing: an empty message
    if (!n.IsMap()) return Error(n, path, "expected a mapping (key: value), got " + Describe(n));
    const pb::Descriptor* d = msg->GetDescriptor();
    const pb::Reflection* r = msg->GetReflection();
    const pb::OneofDescriptor* params_oneof = ParamsOneof(d);
    std::map<std::string, YAML::Mark> seen;
    for (const auto& kv : n) {
      const YAML::Node& key = kv.first;
      const YAML::Node& value = kv.second;
      if (!key.IsScalar()) return Error(key, path, "keys must be plain names, got " + Describe(key));
      const std::string& name = key.Scalar();
      auto [it, fresh] = seen.emplace(name, key.Mark());
      if (!fresh) {
        return Error(key, Join(path, name),
                     Str("duplicate key '", name, "' (first given at line ", it->second.line + 1, ")"));
      }
      const std::string child = Join(path, name);
      if (params_oneof != nullptr && name == "params") {
        FD_RETURN_IF_ERROR(Params(n, value, msg, params_oneof, path));
        continue;
      }
      const FD* f = d->FindFieldByName(name);
      if (f == nullptr || Hidden(f) || (params_oneof != nullptr && f->containing_oneof() == params_oneof)) {
        std::string m = "unknown key '" + name + "'; known keys: " + JoinList(KnownKeys(d));
        if (f != nullptr && Hidden(f)) m = "'" + name + "' is set by the loader, not in the file";
        return Error(key, path, m);
      }
      if (const pb::OneofDescriptor* o = f->containing_oneof(); o != nullptr && r->HasOneof(*msg, o)) {
        const std::string other = r->GetOneofFieldDescriptor(*msg, o)->name();
        return Error(key, child, "'" + other + "' and '" + name + "' are alternatives; give only one");
      }
      FD_RETURN_IF_ERROR(Field(value, msg, f, child));
    }
    return Status::Ok();
  }

  const std::map<std::string, YAML::Mark>& marks() const { return marks_; }

 private:
  Status Error(const YAML::Node& n, const std::string& path, const std::string& what) {
    return InvalidArgument(Where(file_, n.Mark()) + ": " + (path.empty() ? "" : path + ": ") + what);
  }

  Status Field(const YAML::Node& n, pb::Message* msg, const FD* f, const std::string& path) {
    const pb::Reflection* r = msg->GetReflection();
    const bool is_msg = f->cpp_type() == FD::CPPTYPE_MESSAGE;
    if (!f->is_repeated()) {
      if (is_msg) return Message(n, r->MutableMessage(msg, f), path);
      return Scalar(n, msg, f, path);
    }
    marks_.emplace(path, n.Mark());
    if (n.IsNull()) return Status::Ok();
    if (!n.IsSequence()) return Error(n, path, "expected a sequence ([a, b] or - items), got " + Describe(n));
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string item = Indexed(path, static_cast<int>(i));
      if (is_msg) {
        FD_RETURN_IF_ERROR(Message(n[i], r->AddMessage(msg, f), item));
      } else {
        FD_RETURN_IF_ERROR(Scalar(n[i], msg, f, item));
      }
    }
    return Status::Ok();
  }

  Status Scalar(const YAML::Node& n, pb::Message* msg, const FD* f, const std::string& path) {
    marks_.emplace(path, n.Mark());
    if (!n.IsScalar()) return Error(n, path, "expected " + faults::ExpectedValue(f) + ", got " + Describe(n));
    if (auto bad = faults::SetScalar(msg, f, n.Scalar())) return Error(n, path, *bad);
    return Status::Ok();
  }

  // `3` or `{draw: [lo, hi]}`.
  Status IntOrDraw(const YAML::Node& n, pb::Message* msg, const std::string& path) {
    auto* v = static_cast<v1::IntOrDraw*>(msg);
    const std::string want = "expected an integer or {draw: [lo, hi]}, got ";
    if (n.IsScalar()) {
      auto x = faults::ParseInt(n.Scalar(), INT64_MIN, INT64_MAX);
      if (!x) return Error(n, path, want + Describe(n));
      v->set_value(*x);
      return Status::Ok();
    }
    if (!n.IsMap()) return Error(n, path, want + Describe(n));
    for (const auto& kv : n) {
      if (!kv.first.IsScalar() || kv.first.Scalar() != "draw") {
        return Error(kv.first, path, "unknown key " + Describe(kv.first) + "; known keys: draw");
      }
    }
    const YAML::Node range = n["draw"];
    if (!range) return Error(n, path, want + "an empty mapping");
    const std::string dpath = path + ".draw";
    marks_.emplace(dpath, range.Mark());
    if (!range.IsSequence() || range.size() != 2) {
      const std::string got =
          range.IsSequence() ? std::to_string(range.size()) + " item(s)" : Describe(range);
      return Error(range, dpath, "expected [lo, hi] with exactly two integers, got " + got);
    }
    int64_t bounds[2];
    for (int i = 0; i < 2; ++i) {
      marks_.emplace(Indexed(dpath, i), range[i].Mark());
      auto x = range[i].IsScalar() ? faults::ParseInt(range[i].Scalar(), INT64_MIN, INT64_MAX) : std::nullopt;
      if (!x) return Error(range[i], Indexed(dpath, i), "expected an integer, got " + Describe(range[i]));
      bounds[i] = *x;
    }
    if (bounds[0] > bounds[1]) {
      return Error(range, dpath, Str("lo (", bounds[0], ") must be <= hi (", bounds[1], ")"));
    }
    v->mutable_draw()->set_lo(bounds[0]);
    v->mutable_draw()->set_hi(bounds[1]);
    return Status::Ok();
  }

  // `2` or `$faults.0.target.rank`; the reference itself is checked later.
  Status RankRef(const YAML::Node& n, pb::Message* msg, const std::string& path) {
    auto* v = static_cast<v1::RankRef*>(msg);
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (!s.empty() && s[0] == '$') {
        v->set_ref(s);
        return Status::Ok();
      }
      if (auto x = faults::ParseInt(s, 0, INT32_MAX)) {
        v->set_rank(static_cast<int32_t>(*x));
        return Status::Ok();
      }
    }
    return Error(
        n, path,
        "expected a rank (an integer >= 0) or a reference like $faults.0.target.rank, got " + Describe(n));
  }

  // `params:` goes into the oneof member named by the sibling `kind`.
  Status Params(const YAML::Node& parent, const YAML::Node& n, pb::Message* msg,
                const pb::OneofDescriptor* oneof, const std::string& parent_path) {
    const std::string path = Join(parent_path, "params");
    const YAML::Node kind_node = parent["kind"];
    if (!kind_node || !kind_node.IsScalar())
      return Error(n, path, "needs a 'kind' beside it to say whose params");
    const std::string kind = kind_node.Scalar();
    const FD* f = nullptr;
    for (int i = 0; i < oneof->field_count(); ++i) {
      if (oneof->field(i)->name() == kind) f = oneof->field(i);
    }
    if (faults::FindFaultKind(kind) == nullptr) {
      return Error(kind_node, Join(parent_path, "kind"),
                   "unknown fault kind '" + kind + "'; known kinds: " + JoinList(faults::FaultKindNames()));
    }
    if (f == nullptr) return Error(n, path, "fault kind '" + kind + "' takes no params");
    return Message(n, msg->GetReflection()->MutableMessage(msg, f), path);
  }

  std::string file_;
  std::map<std::string, YAML::Mark> marks_;
};

}  // namespace

namespace scenario_internal {

Status MapYamlText(const std::string& yaml_text, const std::string& filename, const std::string& what,
                   pb::Message* msg, std::map<std::string, YAML::Mark>* marks) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(Where(filename, e.mark) + ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) {
    if (root.IsNull()) return InvalidArgument(filename + ": the " + what + " is empty");
    return InvalidArgument(Where(filename, root.Mark()) + ": expected a mapping at the top level, got " +
                           Describe(root));
  }
  Mapper mapper(filename);
  try {
    FD_RETURN_IF_ERROR(mapper.Message(root, msg, ""));
  } catch (const YAML::Exception& e) {  // defensive: the mapper only reads nodes
    return InvalidArgument(Where(filename, e.mark) + ": " + e.msg);
  }
  *marks = mapper.marks();
  return Status::Ok();
}

Status LocateProblem(const std::string& filename, const std::map<std::string, YAML::Mark>& marks,
                     const Problem& p) {
  // Point at the offending node, or at the nearest enclosing one that exists
  // in the file (a missing key is reported at its parent mapping).
  std::string at = p.locate.empty() ? p.path : p.locate;
  if (!marks.count(at)) at = p.path;
  while (!at.empty() && !marks.count(at)) {
    const std::size_t cut = at.find_last_of(".[");
    at = cut == std::string::npos ? "" : at.substr(0, cut);
  }
  const std::string where = at.empty() ? filename : Where(filename, marks.at(at));
  return InvalidArgument(FormatProblem(where, p));
}

}  // namespace scenario_internal

StatusOr<v1::Scenario> ParseScenario(const std::string& yaml_text, const std::string& filename) {
  v1::Scenario s;
  std::map<std::string, YAML::Mark> marks;
  FD_RETURN_IF_ERROR(MapYamlText(yaml_text, filename, "scenario file", &s, &marks));
  s.set_source_file(filename);
  if (Check p = CheckScenario(s)) return LocateProblem(filename, marks, *p);
  return s;
}

StatusOr<v1::Scenario> LoadScenarioFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open scenario file");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseScenario(text.str(), path);
}

StatusOr<std::vector<v1::Scenario>> LoadScenarioDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a scenario directory");
  std::vector<std::string> files;
  // The error_code forms throughout: a vanished entry must not throw.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string ext = it->path().extension().string();
    if (it->is_regular_file(ec) && (ext == ".yaml" || ext == ".yml")) files.push_back(it->path().string());
  }
  if (ec) return Unavailable(dir + ": " + ec.message());
  std::sort(files.begin(), files.end());  // deterministic "first bad file"
  std::vector<v1::Scenario> out;
  std::map<std::string, std::string> by_id;
  for (const auto& f : files) {
    auto s = LoadScenarioFile(f);
    if (!s.ok()) return s.status();
    auto [it, fresh] = by_id.emplace(s->id(), f);
    if (!fresh)
      return InvalidArgument(f + ": duplicate scenario id '" + s->id() + "', also used by " + it->second);
    out.push_back(std::move(s).value());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id() < b.id(); });
  return out;
}

StatusOr<std::vector<v1::Scenario>> LoadScenarioDirs(const std::vector<std::string>& dirs) {
  std::vector<v1::Scenario> out;
  std::map<std::string, std::string> by_id;
  std::string where;
  for (const auto& dir : dirs) {
    auto some = LoadScenarioDir(dir);
    if (!some.ok()) return some.status();
    for (auto& sc : *some) {
      auto [it, fresh] = by_id.emplace(sc.id(), sc.source_file());
      if (!fresh)
        return InvalidArgument(sc.source_file() + ": duplicate scenario id '" + sc.id() + "', also used by " +
                               it->second);
      out.push_back(std::move(sc));
    }
    where += (where.empty() ? "" : ", ") + dir;
  }
  if (out.empty()) return NotFound("no scenario files (*.yaml) in " + (where.empty() ? "no folder" : where));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id() < b.id(); });
  return out;
}

}  // namespace firedrill::scenario
