#include "controller/scenario_loader.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

namespace pb = google::protobuf;

namespace {

// --- paths and messages ----------------------------------------------------

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
std::string Indexed(const std::string& prefix, int i) { return prefix + "[" + std::to_string(i) + "]"; }

std::string JoinList(const std::vector<std::string>& items) {
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

// A semantic problem found after mapping. `locate` is the path whose YAML
// position best points at it (defaults to `path`).
struct Problem {
  std::string path;
  std::string message;
  std::string locate;
};
using Check = std::optional<Problem>;
Check Fail(std::string path, std::string message, std::string locate = "") {
  return Problem{std::move(path), std::move(message), std::move(locate)};
}
#define FD_CHECK(expr)               \
  do {                               \
    if (auto _p = (expr)) return _p; \
  } while (0)

std::string FormatProblem(const std::string& where, const Problem& p) {
  std::string out = where;
  if (!p.path.empty()) out += (out.empty() ? "" : ": ") + p.path;
  return out + (out.empty() ? "" : ": ") + p.message;
}

// --- scalars (shared by the YAML mapper and ApplyJobSetting) -----------------

using FD = pb::FieldDescriptor;

std::string Expected(const FD* f) {
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
    case FD::CPPTYPE_INT64:
      return "an integer";
    case FD::CPPTYPE_DOUBLE:
    case FD::CPPTYPE_FLOAT:
      return "a number";
    case FD::CPPTYPE_BOOL:
      return "true or false";
    case FD::CPPTYPE_STRING:
      return "a string";
    case FD::CPPTYPE_ENUM: {
      std::vector<std::string> names;
      for (int i = 0; i < f->enum_type()->value_count(); ++i)
        names.push_back(f->enum_type()->value(i)->name());
      return "one of " + JoinList(names);
    }
    default:
      return Str("a value of a type scenario files do not support (", f->type_name(), ")");
  }
}

// Whole-string integer parse: no spaces, no trailing garbage, no overflow.
std::optional<int64_t> ParseInt(const std::string& s, int64_t lo, int64_t hi) {
  if (s.empty() || s.find_first_not_of("+-0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(const std::string& s) {
  // The charset check rejects what strtod would also take: inf, nan, hex.
  if (s.empty() || s.find_first_not_of("+-.0123456789eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Sets (or appends to, when repeated) a scalar field from text. Returns what
// was expected on failure, e.g. "expected an integer, got 'abc'".
std::optional<std::string> SetScalar(pb::Message* msg, const FD* f, const std::string& text) {
  const pb::Reflection* r = msg->GetReflection();
  const std::string bad = "expected " + Expected(f) + ", got '" + text + "'";
#define FD_PUT(Type, v) (f->is_repeated() ? r->Add##Type(msg, f, v) : r->Set##Type(msg, f, v))
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      if (auto v = ParseInt(text, INT32_MIN, INT32_MAX)) return FD_PUT(Int32, int32_t(*v)), std::nullopt;
      return bad;
    case FD::CPPTYPE_INT64:
      if (auto v = ParseInt(text, INT64_MIN, INT64_MAX)) return FD_PUT(Int64, *v), std::nullopt;
      return bad;
    case FD::CPPTYPE_DOUBLE:
      if (auto v = ParseDouble(text)) return FD_PUT(Double, *v), std::nullopt;
      return bad;
    case FD::CPPTYPE_FLOAT:
      if (auto v = ParseDouble(text); v && std::fabs(*v) <= FLT_MAX)
        return FD_PUT(Float, float(*v)), std::nullopt;
      return bad;
    case FD::CPPTYPE_BOOL:
      if (text == "true" || text == "false") return FD_PUT(Bool, text == "true"), std::nullopt;
      return bad;
    case FD::CPPTYPE_ENUM:
      if (auto* ev = f->enum_type()->FindValueByName(text)) return FD_PUT(Enum, ev), std::nullopt;
      return bad;
    case FD::CPPTYPE_STRING:
      return FD_PUT(String, text), std::nullopt;
    default:
      return "expected " + Expected(f);
  }
#undef FD_PUT
}

// --- YAML -> protobuf --------------------------------------------------------

// Fields whose values the loader fills in itself.
bool Hidden(const FD* f) { return f->full_name() == "firedrill.v1.Scenario.source_file"; }

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
    if (!n.IsScalar()) return Error(n, path, "expected " + Expected(f) + ", got " + Describe(n));
    if (auto bad = SetScalar(msg, f, n.Scalar())) return Error(n, path, *bad);
    return Status::Ok();
  }

  // `3` or `{draw: [lo, hi]}`.
  Status IntOrDraw(const YAML::Node& n, pb::Message* msg, const std::string& path) {
    auto* v = static_cast<v1::IntOrDraw*>(msg);
    const std::string want = "expected an integer or {draw: [lo, hi]}, got ";
    if (n.IsScalar()) {
      auto x = ParseInt(n.Scalar(), INT64_MIN, INT64_MAX);
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
      auto x = range[i].IsScalar() ? ParseInt(range[i].Scalar(), INT64_MIN, INT64_MAX) : std::nullopt;
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
      if (auto x = ParseInt(s, 0, INT32_MAX)) {
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

// --- semantic checks ---------------------------------------------------------

template <typename T>
Check InRange(const std::string& path, T v, T lo, T hi) {
  return v >= lo && v <= hi ? std::nullopt : Fail(path, Str("must be in ", lo, "..", hi, ", got ", v));
}
template <typename T>
Check AtLeast(const std::string& path, T v, T lo) {
  return v >= lo ? std::nullopt : Fail(path, Str("must be >= ", lo, ", got ", v));
}
Check Positive(const std::string& path, double v) {
  return v > 0 ? std::nullopt : Fail(path, Str("must be > 0, got ", v));
}
Check OneOf(const std::string& path, const std::string& v, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return std::nullopt;
  return Fail(path, "must be one of " + JoinList(allowed) + ", got '" + v + "'");
}
Check NonEmpty(const std::string& path, const std::string& v) {
  return v.empty() ? Fail(path, "is required") : std::nullopt;
}

Check CheckJob(const v1::JobSpec& j, const std::string& p) {
  FD_CHECK(InRange(Join(p, "world_size"), j.world_size(), 1, 64));
  FD_CHECK(OneOf(Join(p, "model.kind"), j.model().kind(), {"mlp"}));
  FD_CHECK(AtLeast(Join(p, "model.input_dim"), j.model().input_dim(), 1));
  FD_CHECK(AtLeast(Join(p, "model.hidden"), j.model().hidden(), 1));
  FD_CHECK(InRange(Join(p, "model.layers"), j.model().layers(), 1, 16));
  FD_CHECK(AtLeast(Join(p, "model.num_classes"), j.model().num_classes(), 1));
  FD_CHECK(InRange(Join(p, "data.batch_size"), j.data().batch_size(), 1, 4096));
  FD_CHECK(AtLeast(Join(p, "data.num_workers"), j.data().num_workers(), 0));
  FD_CHECK(OneOf(Join(p, "optim.kind"), j.optim().kind(), {"sgd"}));
  FD_CHECK(Positive(Join(p, "optim.lr"), j.optim().lr()));
  if (!(j.optim().momentum() >= 0 && j.optim().momentum() < 1)) {
    return Fail(Join(p, "optim.momentum"), Str("must be in [0, 1), got ", j.optim().momentum()));
  }
  FD_CHECK(OneOf(Join(p, "precision"), j.precision(), {"fp32"}));
  FD_CHECK(AtLeast(Join(p, "steps"), j.steps(), int64_t{1}));
  FD_CHECK(AtLeast(Join(p, "checkpoint.every"), j.checkpoint().every(), 0));
  FD_CHECK(OneOf(Join(p, "comm.backend"), j.comm().backend(), {"gloo"}));
  FD_CHECK(AtLeast(Join(p, "comm.bucket_mb"), j.comm().bucket_mb(), 0.0));
  FD_CHECK(Positive(Join(p, "comm.timeout_s"), j.comm().timeout_s()));
  FD_CHECK(AtLeast(Join(p, "threads_per_rank"), j.threads_per_rank(), 0));
  return std::nullopt;
}

Check CheckIntOrDraw(const std::string& path, const v1::IntOrDraw& v, int64_t lo, int64_t hi) {
  if (!v.has_draw()) return InRange(path, v.value(), lo, hi);
  if (v.draw().lo() > v.draw().hi()) return Fail(path + ".draw", "lo must be <= hi");
  FD_CHECK(InRange(path + ".draw[0]", v.draw().lo(), lo, hi));
  return InRange(path + ".draw[1]", v.draw().hi(), lo, hi);
}

Check CheckRankRef(const std::string& path, const v1::RankRef& ref, const v1::Scenario& s) {
  if (!ref.has_ref()) return InRange(path, ref.rank(), 0, s.job().world_size() - 1);
  // Resolve against placeholders: this checks the shape and the index with
  // the same code that resolves it at session start.
  auto r = faults::ResolveRankRef(ref, std::vector<v1::ResolvedFault>(s.faults_size()));
  return r.ok() ? std::nullopt : Fail(path, r.status().message());
}

Check CheckFault(const v1::Scenario& s, int i) {
  const v1::FaultSpec& f = s.faults(i);
  const std::string p = Indexed("faults", i);
  const faults::FaultKind* kind = faults::FindFaultKind(f.kind());
  if (kind == nullptr) {
    return Fail(p + ".kind",
                "unknown fault kind '" + f.kind() + "'; known kinds: " + JoinList(faults::FaultKindNames()));
  }
  const int world = s.job().world_size();
  const v1::FaultTarget& t = f.target();
  if (t.has_rank())
    FD_CHECK(CheckIntOrDraw(p + ".target.rank", t.rank(), 0, world - 1));
  else if (t.has_host_of_rank())
    FD_CHECK(CheckIntOrDraw(p + ".target.host_of_rank", t.host_of_rank(), 0, world - 1));
  else
    return Fail(p + ".target", "is required: {rank: ...} or {host_of_rank: ...}");
  // A trigger past the last step would leave the drill without a fault.
  FD_CHECK(CheckIntOrDraw(p + ".trigger.step", f.trigger().step(), 0, s.job().steps() - 1));
  const pb::OneofDescriptor* params = f.GetDescriptor()->FindOneofByName("params");
  const FD* set = f.GetReflection()->GetOneofFieldDescriptor(f, params);
  const FD* want = f.GetDescriptor()->FindFieldByName(f.kind());
  if (set != nullptr && set != want) {
    return Fail(p + ".params", "holds " + set->name() + " params but kind is '" + f.kind() + "'");
  }
  if (set == nullptr && want != nullptr && want->containing_oneof() == params) {
    return Fail(p + ".params", "is required for kind '" + f.kind() + "'");
  }
  Status st = kind->validate(f);
  if (!st.ok()) {
    // Kinds name the offending field first ("params.slowdown must ..."), which
    // lets the message point at its line.
    const std::string& m = st.message();
    return Fail(p, m, Join(p, m.substr(0, m.find(' '))));
  }
  return std::nullopt;
}

Check CheckScenario(const v1::Scenario& s) {
  FD_CHECK(NonEmpty("id", s.id()));
  if (s.id().find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return Fail("id", "must use only a-z, 0-9 and '-', got '" + s.id() + "'");
  }
  FD_CHECK(NonEmpty("title", s.title()));
  FD_CHECK(NonEmpty("briefing", s.briefing()));
  FD_CHECK(CheckJob(s.job(), "job"));
  for (int i = 0; i < s.faults_size(); ++i) FD_CHECK(CheckFault(s, i));
  FD_CHECK(NonEmpty("answer.cause", s.answer().cause()));
  if (!faults::IsKnownCause(s.answer().cause())) {
    return Fail("answer.cause", "unknown cause '" + s.answer().cause() +
                                    "'; known causes: " + JoinList(faults::KnownCauses()));
  }
  for (int i = 0; i < s.answer().culprit_ranks_size(); ++i) {
    FD_CHECK(CheckRankRef(Indexed("answer.culprit_ranks", i), s.answer().culprit_ranks(i), s));
  }
  if (s.remediations_size() == 0)
    return Fail("remediations", "at least one accepted remediation is required");
  for (int i = 0; i < s.remediations_size(); ++i) {
    const std::string rp = Indexed("remediations", i) + ".actions";
    if (s.remediations(i).actions_size() == 0) return Fail(rp, "at least one action is required");
    for (int k = 0; k < s.remediations(i).actions_size(); ++k) {
      const v1::RemediationAction& a = s.remediations(i).actions(k);
      const std::string ap = Indexed(rp, k);
      if (a.has_replace_host()) {
        FD_CHECK(CheckRankRef(ap + ".replace_host", a.replace_host(), s));
      } else if (a.has_set()) {
        v1::JobSpec probe = s.job();  // the same check `firedrill fix --set` gets
        Status st = ApplyJobSetting(&probe, a.set().key(), a.set().value());
        if (!st.ok()) return Fail(ap + ".set", st.message());
      } else {
        return Fail(ap, "must be {replace_host: RANK} or {set: {key: K, value: V}}");
      }
    }
  }
  const v1::VerifySpec& v = s.verify();
  FD_CHECK(AtLeast("verify.warmup_steps", v.warmup_steps(), 0));
  FD_CHECK(AtLeast("verify.window_steps", v.window_steps(), 1));
  if (!(v.throughput_vs_baseline_min() > 0 && v.throughput_vs_baseline_min() <= 2)) {
    return Fail("verify.throughput_vs_baseline_min",
                Str("must be in (0, 2], got ", v.throughput_vs_baseline_min()));
  }
  FD_CHECK(AtLeast("verify.rank_step_skew_max", v.rank_step_skew_max(), 1.0));
  const v1::Rubric& b = s.rubric();
  FD_CHECK(AtLeast("rubric.cause", b.cause(), 0));
  FD_CHECK(AtLeast("rubric.culprit", b.culprit(), 0));
  FD_CHECK(AtLeast("rubric.fix", b.fix(), 0));
  FD_CHECK(AtLeast("rubric.time", b.time(), 0));
  FD_CHECK(AtLeast("rubric.hint_cost", b.hint_cost(), 0));
  FD_CHECK(AtLeast("rubric.time_budget_s", b.time_budget_s(), 1));
  for (int i = 0; i < s.hints_size(); ++i) FD_CHECK(NonEmpty(Indexed("hints", i), s.hints(i)));
  return std::nullopt;
}

// Scalar leaves of a message, by dotted path.
void CollectLeaves(const pb::Descriptor* d, const std::string& prefix, std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (f->is_repeated()) continue;
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE) {
      CollectLeaves(f->message_type(), Join(prefix, f->name()), out);
    } else {
      out->push_back(Join(prefix, f->name()));
    }
  }
}

}  // namespace

StatusOr<v1::Scenario> ParseScenario(const std::string& yaml_text, const std::string& filename) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(Where(filename, e.mark) + ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) {
    if (root.IsNull()) return InvalidArgument(filename + ": the scenario file is empty");
    return InvalidArgument(Where(filename, root.Mark()) + ": expected a mapping at the top level, got " +
                           Describe(root));
  }
  v1::Scenario s;
  Mapper mapper(filename);
  try {
    FD_RETURN_IF_ERROR(mapper.Message(root, &s, ""));
  } catch (const YAML::Exception& e) {  // defensive: the mapper only reads nodes
    return InvalidArgument(Where(filename, e.mark) + ": " + e.msg);
  }
  s.set_source_file(filename);
  if (Check p = CheckScenario(s)) {
    // Point at the offending node, or at the nearest enclosing one that exists
    // in the file (a missing key is reported at its parent mapping).
    std::string at = p->locate.empty() ? p->path : p->locate;
    if (!mapper.marks().count(at)) at = p->path;
    while (!at.empty() && !mapper.marks().count(at)) {
      const std::size_t cut = at.find_last_of(".[");
      at = cut == std::string::npos ? "" : at.substr(0, cut);
    }
    const std::string where = at.empty() ? filename : Where(filename, mapper.marks().at(at));
    return InvalidArgument(FormatProblem(where, *p));
  }
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

Status ValidateScenario(const v1::Scenario& s, const std::string& where) {
  if (Check p = CheckScenario(s)) return InvalidArgument(FormatProblem(where, *p));
  return Status::Ok();
}

Status ValidateJob(const v1::JobSpec& job, const std::string& where) {
  if (Check p = CheckJob(job, "")) return InvalidArgument(FormatProblem(where, *p));
  return Status::Ok();
}

Status ApplyJobSetting(v1::JobSpec* job, const std::string& key, const std::string& value) {
  const std::vector<std::string> keys = JobSettingKeys();
  if (!std::binary_search(keys.begin(), keys.end(), key)) {
    return InvalidArgument("unknown setting '" + key + "'; known settings: " + JoinList(keys));
  }
  const v1::JobSpec before = *job;
  pb::Message* msg = job;
  std::string rest = key;
  for (std::size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
    const FD* f = msg->GetDescriptor()->FindFieldByName(rest.substr(0, dot));
    msg = msg->GetReflection()->MutableMessage(msg, f);
  }
  const FD* leaf = msg->GetDescriptor()->FindFieldByName(rest);
  if (auto bad = SetScalar(msg, leaf, value)) {
    *job = before;
    return InvalidArgument("setting '" + key + "': " + *bad);
  }
  if (Check p = CheckJob(*job, "")) {
    *job = before;  // a rejected fix must not leave a half-applied job
    return InvalidArgument("setting " + key + "=" + value + " rejected: " + FormatProblem("", *p));
  }
  return Status::Ok();
}

std::vector<std::string> JobSettingKeys() {
  std::vector<std::string> keys;
  CollectLeaves(v1::JobSpec::descriptor(), "", &keys);
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace firedrill::controller
