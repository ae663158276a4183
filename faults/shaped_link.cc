#include "faults/shaped_link.h"

#include <algorithm>
#include <cmath>

#include "common/log.h"
#include "common/subprocess.h"

namespace firedrill::faults {

std::vector<std::string> ShapedLink::TbfCommand(const std::string& ifname, double bandwidth_gbps) {
  const double bytes_per_s = bandwidth_gbps * 1e9;
  // The bucket holds a few milliseconds at the rate, and at least two
  // 64 kB segments (veth hands over GSO super-packets); the queue may hold
  // a few hundred milliseconds of bytes before tbf drops (TCP then backs
  // off, as behind a real bottleneck).
  const auto burst = static_cast<int64_t>(std::max(bytes_per_s * 0.004, 131072.0));
  return {"tc",    "qdisc",
          "replace", "dev",
          ifname,  "root",
          "tbf",   "rate",
          std::to_string(static_cast<int64_t>(std::llround(bytes_per_s * 8))) + "bit",
          "burst", std::to_string(burst),
          "latency", "400ms"};
}

void ShapedLink::Degrade(FaultId id, double latency_us, double bandwidth_gbps) {
  LinkModel::Degrade(id, latency_us, bandwidth_gbps);
  Reshape();
}

void ShapedLink::Restore(FaultId id) {
  LinkModel::Restore(id);
  Reshape();
}

ShapedLink::~ShapedLink() {
  if (shaped_) Unshape();
}

std::string ShapedLink::IfbName() const { return ("ifb-" + ifname_).substr(0, 15); }

Status ShapedLink::ShapeIngress(double bandwidth_gbps) {
  // What arrives on the interface is redirected through an ifb device, whose
  // egress the same tbf caps: the host's link is slow both ways, as a
  // retrained or erroring port is.
  const std::string ifb = IfbName();
  if (!ingress_ready_) {
    (void)RunCommand({"ip", "link", "del", ifb});  // one left by a killed run
    (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "ingress"});
    FD_RETURN_IF_ERROR(RunChecked({"ip", "link", "add", ifb, "type", "ifb"}));
    FD_RETURN_IF_ERROR(RunChecked({"ip", "link", "set", ifb, "up"}));
    FD_RETURN_IF_ERROR(RunChecked({"tc", "qdisc", "add", "dev", ifname_, "handle", "ffff:", "ingress"}));
    FD_RETURN_IF_ERROR(RunChecked({"tc", "filter", "add", "dev", ifname_, "parent", "ffff:", "protocol", "all", "u32",
                                   "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb}));
    ingress_ready_ = true;
  }
  return RunChecked(TbfCommand(ifb, bandwidth_gbps));
}

void ShapedLink::Unshape() {
  if (Status st = RunChecked({"tc", "qdisc", "del", "dev", ifname_, "root"}); !st.ok())
    spdlog::warn("taking the rate limit off {}: {}", ifname_, st.message());
  if (ingress_ready_) {
    (void)RunCommand({"tc", "qdisc", "del", "dev", ifname_, "ingress"});  // and its filter
    (void)RunCommand({"ip", "link", "del", IfbName()});
    ingress_ready_ = false;
  }
  shaped_ = false;
}

std::string ShapedLink::fallback() const { return fallback_; }

void ShapedLink::Reshape() {
  const double bw = SeriesBandwidthGbps();
  if (bw <= 0) {
    SetBandwidthShaped(false);
    if (shaped_) Unshape();
    return;
  }
  if (Status st = RunChecked(TbfCommand(ifname_, bw)); !st.ok()) {
    // LinkModel waits the bytes out instead; said once.
    if (fallback_.empty()) spdlog::warn("link {}: tc refused ({}); the slow link waits instead", ifname_, st.message());
    fallback_ = st.message();
    SetBandwidthShaped(false);
    return;
  }
  shaped_ = true;
  fallback_.clear();
  SetBandwidthShaped(true);
  if (Status st = ShapeIngress(bw); !st.ok()) {
    // Egress alone still slows every ring through the host; said once.
    if (ingress_fallback_.empty())
      spdlog::warn("link {}: only what it sends is capped, its ingress cannot be ({})", ifname_, st.message());
    ingress_fallback_ = st.message();
  }
}

}  // namespace firedrill::faults
