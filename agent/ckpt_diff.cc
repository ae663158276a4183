#include "agent/ckpt_diff.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "agent/checkpoint.h"

namespace firedrill::agent {

std::string PartOf(const std::string& name, bool tensor) {
  if (!tensor) return name;
  const size_t slash = name.find('/');
  return slash == std::string::npos ? name : name.substr(0, slash);
}

const std::vector<std::string>& PartOrder() {
  static const std::vector<std::string> order = {"model", "optim", "rng", "loss_scaler", "data_cursor", "step"};
  return order;
}

namespace {

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return std::equal(static_cast<const char*>(ca.data_ptr()), static_cast<const char*>(ca.data_ptr()) + n,
                    static_cast<const char*>(cb.data_ptr()));
}

}  // namespace

StatusOr<CheckpointDiff> DiffCheckpoints(const std::string& a_dir, const std::string& b_dir) {
  auto ma = ReadManifest(a_dir);
  if (!ma.ok()) return ma.status();
  auto mb = ReadManifest(b_dir);
  if (!mb.ok()) return mb.status();
  if (ma->world_size != mb->world_size)
    return FailedPrecondition(a_dir + " was written by " + std::to_string(ma->world_size) + " ranks, " + b_dir +
                              " by " + std::to_string(mb->world_size) + ": only checkpoints of one job compare");
  CheckpointDiff out;
  out.world_size = ma->world_size;
  std::map<std::string, PartDiff> parts;
  std::map<std::string, bool> entry_differs;  // entry -> differs on some rank so far
  for (int rank = 0; rank < out.world_size; ++rank) {
    auto a = LoadShard(a_dir, rank);
    if (!a.ok()) return a.status();
    auto b = LoadShard(b_dir, rank);
    if (!b.ok()) return b.status();
    auto note = [&](const std::string& name, bool tensor, bool differs, bool absent, double diff, const std::string& av,
                    const std::string& bv) {
      PartDiff& p = parts[PartOf(name, tensor)];
      p.part = PartOf(name, tensor);
      if (rank == 0) ++p.entries;
      if (!differs) return;
      if (bool& seen = entry_differs[name]; !seen) {
        seen = true;
        ++p.differ;
        p.missing += absent ? 1 : 0;
        if (p.first_differing.empty() || name < p.first_differing) p.first_differing = name;
      }
      if (p.ranks.empty() || p.ranks.back() != rank) p.ranks.push_back(rank);
      // A NaN anywhere (a value gone NaN, inf - inf) stays NaN: std::max
      // would drop it.
      p.max_abs_diff = std::isnan(diff) || std::isnan(p.max_abs_diff) ? std::numeric_limits<double>::quiet_NaN()
                                                                      : std::max(p.max_abs_diff, diff);
      if (!tensor && p.a_value.empty() && p.b_value.empty()) p.a_value = av, p.b_value = bv;
    };
    std::set<std::string> tensor_names, blob_names;
    for (const auto* shard : {&*a, &*b}) {
      for (const auto& [name, t] : shard->tensors) tensor_names.insert(name);
      for (const auto& [name, v] : shard->blobs) blob_names.insert(name);
    }
    for (const auto& name : tensor_names) {
      auto ia = a->tensors.find(name), ib = b->tensors.find(name);
      if (ia == a->tensors.end() || ib == b->tensors.end()) {
        note(name, true, true, true, 0, "", "");
        continue;
      }
      const at::Tensor &ta = ia->second, &tb = ib->second;
      const bool same = SameBytes(ta, tb);
      double diff = 0;
      if (!same && ta.is_floating_point() && tb.is_floating_point() && ta.sizes() == tb.sizes())
        diff = (ta.to(at::kDouble) - tb.to(at::kDouble)).abs().max().item<double>();
      note(name, true, !same, false, diff, "", "");
    }
    for (const auto& name : blob_names) {
      if (name == "job") continue;  // the job's text, for people: the probe's two runs differ in their paths
      auto ia = a->blobs.find(name), ib = b->blobs.find(name);
      const bool absent = ia == a->blobs.end() || ib == b->blobs.end();
      const std::string av = ia == a->blobs.end() ? "(none)" : ia->second;
      const std::string bv = ib == b->blobs.end() ? "(none)" : ib->second;
      note(name, false, absent || av != bv, absent, 0, av, bv);
    }
  }
  for (const auto& name : PartOrder()) {
    auto it = parts.find(name);
    if (it != parts.end()) out.parts.push_back(std::move(it->second)), parts.erase(it);
  }
  for (auto& [name, p] : parts) out.parts.push_back(std::move(p));  // anything newer, by name
  return out;
}

}  // namespace firedrill::agent
