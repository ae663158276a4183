#include "faults/seams.h"

#include <cmath>
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
  for (const auto& [id, s] : by_fault_) {
    ns += s.latency_us * 1e3;
    if (!bandwidth_shaped_) ns += static_cast<double>(link_bytes) / s.bandwidth_gbps;
  }
  return Nanos(static_cast<int64_t>(std::llround(ns)));
}
double LinkModel::SeriesBandwidthGbps() const {
  std::lock_guard<std::mutex> lock(mu_);
  double seconds_per_gb = 0;  // stretches in series: their times per byte add up
  for (const auto& [id, s] : by_fault_) seconds_per_gb += 1.0 / s.bandwidth_gbps;
  return seconds_per_gb > 0 ? 1.0 / seconds_per_gb : 0;
}
void LinkModel::SetBandwidthShaped(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  bandwidth_shaped_ = on;
}
bool LinkModel::degraded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !by_fault_.empty();
}

Status FaultEnvironment::Set(FaultId id, const std::string& name, const std::string& value) {
  if (name.empty() || name.find('=') != std::string::npos)
    return InvalidArgument("environment variable name '" + name + "' is not valid");
  std::lock_guard<std::mutex> lock(mu_);
  auto range = by_fault_.equal_range(id);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.first == name) {  // the same change again
      it->second.second = value;
      return Status::Ok();
    }
  }
  by_fault_.emplace(id, std::make_pair(name, value));
  return Status::Ok();
}

void FaultEnvironment::Restore(FaultId id) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fault_.erase(id);
}

std::optional<std::string> FaultEnvironment::Get(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, kv] : by_fault_)
    if (kv.first == name) return kv.second;
  return std::nullopt;
}

}  // namespace firedrill::faults
