#include "faults/job_setting.h"

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace firedrill::faults {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

namespace {

// ParseInt's sibling, used only by SetScalar.
std::optional<double> ParseDouble(const std::string& s) {
  // The charset check rejects what strtod would also take: inf, nan, hex.
  if (s.empty() || s.find_first_not_of("+-.0123456789eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string ExpectedValue(const FD* f) {
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
      return "one of " + JoinNames(names);
    }
    default:
      return std::string("a value of a type scenario files do not support (") + f->type_name() + ")";
  }
}

std::optional<int64_t> ParseInt(const std::string& s, int64_t lo, int64_t hi) {
  if (s.empty() || s.find_first_not_of("+-0123456789") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<std::string> SetScalar(pb::Message* msg, const FD* f, const std::string& text) {
  const pb::Reflection* r = msg->GetReflection();
  const std::string bad = "expected " + ExpectedValue(f) + ", got '" + text + "'";
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
      return "expected " + ExpectedValue(f);
  }
#undef FD_PUT
}

Status SetJobKey(v1::JobSpec* job, const std::string& key, const std::string& text) {
  const v1::JobSpec before = *job;
  pb::Message* msg = job;
  std::string rest = key;
  for (std::size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
    const FD* f = msg->GetDescriptor()->FindFieldByName(rest.substr(0, dot));
    if (f == nullptr || f->is_repeated() || f->cpp_type() != FD::CPPTYPE_MESSAGE) {
      *job = before;  // sections walked so far may have been created
      return InvalidArgument("unknown setting '" + key + "': the job has no section '" + rest.substr(0, dot) +
                             "'" + (msg == job ? std::string() : " there"));
    }
    msg = msg->GetReflection()->MutableMessage(msg, f);
  }
  const FD* leaf = msg->GetDescriptor()->FindFieldByName(rest);
  if (leaf == nullptr || leaf->is_repeated() || leaf->cpp_type() == FD::CPPTYPE_MESSAGE) {
    *job = before;
    return InvalidArgument("unknown setting '" + key + "': '" + rest + "' is not a single value of the job" +
                           (leaf != nullptr && leaf->cpp_type() == FD::CPPTYPE_MESSAGE
                                ? std::string(" (a section: name one of its keys)")
                                : std::string()));
  }
  if (auto bad = SetScalar(msg, leaf, text)) {
    *job = before;
    return InvalidArgument("setting '" + key + "': " + *bad);
  }
  return Status::Ok();
}

}  // namespace firedrill::faults
