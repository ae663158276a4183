#include "faults/seams.h"

#include <cmath>
#include <cstdlib>
#include <vector>

namespace firedrill::faults {

void PerFault::Set(FaultId id, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fault_[id] = v;
}
void PerFault::Erase(FaultId id) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fault_.erase(id);
}
double PerFault::Product() const {
  std::lock_guard<std::mutex> lock(mu_);
  double p = 1.0;
  for (const auto& [id, x] : by_fault_) p *= x;
  return p;
}
double PerFault::Sum() const {
  std::lock_guard<std::mutex> lock(mu_);
  double sum = 0;
  for (const auto& [id, x] : by_fault_) sum += x;
  return sum;
}

void LinkModel::Degrade(FaultId id, double latency_us, double bandwidth_gbps) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fault_[id] = Shape{latency_us, bandwidth_gbps};
}
void LinkModel::Restore(FaultId id) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fault_.erase(id);
}
Nanos LinkModel::DelayFor(int64_t link_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  double ns = 0;
  // GB/s is bytes per nanosecond.
  for (const auto& [id, s] : by_fault_) ns += s.latency_us * 1e3 + static_cast<double>(link_bytes) / s.bandwidth_gbps;
  return Nanos(static_cast<int64_t>(std::llround(ns)));
}
bool LinkModel::degraded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !by_fault_.empty();
}

namespace {
std::optional<std::string> ProcessValue(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}
void Export(const std::string& name, const std::optional<std::string>& value) {
  if (value) ::setenv(name.c_str(), value->c_str(), 1);
  else ::unsetenv(name.c_str());
}
}  // namespace

ProcessEnvironment::~ProcessEnvironment() {
  std::vector<FaultId> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, c] : by_fault_) ids.push_back(id);
  }
  for (FaultId id : ids) Restore(id);
}

Status ProcessEnvironment::Set(FaultId id, const std::string& name, const std::string& value) {
  if (name.empty() || name.find('=') != std::string::npos)
    return InvalidArgument("environment variable name '" + name + "' is not valid");
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<std::string> before = ProcessValue(name);
  for (auto it = by_fault_.begin(); it != by_fault_.end(); ++it) {
    if (it->second.name != name) continue;
    if (it->first == id) {  // the same change again
      it->second.value = value;
      if (export_) Export(name, value);
      return Status::Ok();
    }
    before = it->second.before;  // another fault changed it first
  }
  by_fault_.emplace(id, Change{name, value, before});
  if (export_) Export(name, value);
  return Status::Ok();
}

void ProcessEnvironment::Restore(FaultId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto range = by_fault_.equal_range(id);
  std::vector<Change> removed;
  for (auto it = range.first; it != range.second; ++it) removed.push_back(it->second);
  by_fault_.erase(range.first, range.second);
  if (!export_) return;
  for (const auto& c : removed) {
    std::optional<std::string> now = c.before;
    for (const auto& [other, o] : by_fault_)
      if (o.name == c.name) now = o.value;  // another fault still holds it
    Export(c.name, now);
  }
}

std::optional<std::string> ProcessEnvironment::Get(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<std::string> v;
    for (const auto& [id, c] : by_fault_)
      if (c.name == name) v = c.value;
    if (v) return v;
  }
  return ProcessValue(name);
}

}  // namespace firedrill::faults
