#include "controller/web/prometheus.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace firedrill::web {

namespace {

std::string Escape(const std::string& v, bool quote) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) { return Escape(v, true); }
std::string EscapeHelp(const std::string& v) { return Escape(v, false); }

std::string FormatSampleValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

bool ValidMetricName(const std::string& name, bool label) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  // Label names starting with __ are reserved for Prometheus itself.
  return !(label && name.rfind("__", 0) == 0);
}

void Exposition::Family(const std::string& name, MetricType type, const std::string& help) {
  if (auto it = index_.find(name); it != index_.end()) {
    if (fams_[it->second].type != type) throw std::logic_error("metric " + name + " declared with two types");
    return;
  }
  if (!ValidMetricName(name) || name.rfind("firedrill_", 0) != 0)
    throw std::logic_error("metric name '" + name + "' is not a valid firedrill_ name");
  if (type == MetricType::kCounter && !EndsWith(name, "_total"))
    throw std::logic_error("counter " + name + " must end in _total");
  if (type == MetricType::kGauge && EndsWith(name, "_total"))
    throw std::logic_error("gauge " + name + " must not end in _total");
  if (help.empty()) throw std::logic_error("metric " + name + " needs a HELP text");
  index_[name] = fams_.size();
  fams_.push_back(Fam{name, help, type, {}});
}

void Exposition::Sample(const std::string& name, const Labels& labels, double value) {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("metric " + name + " sampled before it was declared");
  std::string rendered;
  for (const auto& [k, v] : labels) {
    if (!ValidMetricName(k, true))
      throw std::logic_error("metric " + name + ": invalid label name '" + k + "'");
    rendered += rendered.empty() ? "{" : ",";
    rendered += k + "=\"" + EscapeLabelValue(v) + "\"";
  }
  if (!rendered.empty()) rendered += "}";
  Fam& f = fams_[it->second];
  for (const auto& s : f.samples)
    if (s.first == rendered) throw std::logic_error("metric " + name + rendered + " sampled twice");
  f.samples.emplace_back(std::move(rendered), value);
}

std::string Exposition::Text() const {
  std::string out;
  for (const Fam& f : fams_) {
    out += "# HELP " + f.name + " " + EscapeHelp(f.help) + "\n";
    out += "# TYPE " + f.name + (f.type == MetricType::kCounter ? " counter\n" : " gauge\n");
    for (const auto& [labels, value] : f.samples)
      out += f.name + labels + " " + FormatSampleValue(value) + "\n";
  }
  return out;
}

}  // namespace firedrill::web
