#include "faults/targeting.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include "common/rng.h"
#include "faults/registry.h"

namespace firedrill::faults {

namespace pb = google::protobuf;

int64_t ResolveInt(const v1::IntOrDraw& v, uint64_t seed, const std::string& label) {
  if (v.has_draw()) return DrawInt(seed, label, v.draw().lo(), v.draw().hi());
  return v.value();
}

namespace {
// ResolvedFault mirrors FaultSpec's `params` oneof field for field, so the
// copy is generic and a new kind needs no code here.
void CopyParams(const v1::FaultSpec& spec, v1::ResolvedFault* out) {
  const pb::Reflection* src_ref = spec.GetReflection();
  const pb::OneofDescriptor* oneof = spec.GetDescriptor()->FindOneofByName("params");
  const pb::FieldDescriptor* set = src_ref->GetOneofFieldDescriptor(spec, oneof);
  if (set == nullptr) return;
  const pb::FieldDescriptor* dst = out->GetDescriptor()->FindFieldByName(set->name());
  if (dst == nullptr) return;
  out->GetReflection()->MutableMessage(out, dst)->CopyFrom(src_ref->GetMessage(spec, set));
}
}  // namespace

StatusOr<std::vector<v1::ResolvedFault>> ResolveFaults(const v1::Scenario& scenario, uint64_t seed,
                                                       const std::vector<std::string>& hosts) {
  std::vector<v1::ResolvedFault> out;
  const int world = scenario.job().world_size();
  for (int i = 0; i < scenario.faults_size(); ++i) {
    const v1::FaultSpec& spec = scenario.faults(i);
    const std::string where = "faults." + std::to_string(i);
    const FaultKind* kind = FindFaultKind(spec.kind());
    if (kind == nullptr) return InvalidArgument(where + ".kind: unknown fault kind '" + spec.kind() + "'");
    v1::ResolvedFault rf;
    rf.set_kind(spec.kind());
    const v1::FaultTarget& t = spec.target();
    rf.set_trigger_step(ResolveInt(spec.trigger().step(), seed, where + ".trigger.step"));
    if (spec.trigger().has_until_step())
      rf.set_until_step(ResolveInt(spec.trigger().until_step(), seed, where + ".trigger.until_step"));
    rf.set_flap_on_steps(spec.trigger().flap_on_steps());
    rf.set_flap_off_steps(spec.trigger().flap_off_steps());
    CopyParams(spec, &rf);
    if (t.all_ranks()) {
      rf.set_all_ranks(true);
      rf.set_rank(-1);
      out.push_back(std::move(rf));
      continue;
    }
    const v1::IntOrDraw& rank_src = t.has_host_of_rank() ? t.host_of_rank() : t.rank();
    const int64_t rank = ResolveInt(rank_src, seed, where + ".target");
    if (rank < 0 || rank >= world) {
      return InvalidArgument(where + ".target: rank " + std::to_string(rank) + " is outside 0.." +
                             std::to_string(world - 1));
    }
    rf.set_rank(static_cast<int>(rank));
    if (kind->scope == Scope::kHost || t.has_host_of_rank()) {
      if (rank >= static_cast<int64_t>(hosts.size())) {
        return Internal(where + ".target: no host known for rank " + std::to_string(rank));
      }
      rf.set_host(hosts[rank]);
    }
    out.push_back(std::move(rf));
  }
  return out;
}

std::vector<v1::AnswerFinding> AnswerKey(const v1::Scenario& scenario) {
  std::vector<v1::AnswerFinding> key(scenario.answer().findings().begin(), scenario.answer().findings().end());
  if (key.empty()) {
    v1::AnswerFinding one;
    one.set_cause(scenario.answer().cause());
    *one.mutable_culprit_ranks() = scenario.answer().culprit_ranks();
    key.push_back(one);
  }
  return key;
}

StatusOr<int> ResolveRankRef(const v1::RankRef& ref, const std::vector<v1::ResolvedFault>& faults) {
  if (!ref.has_ref()) return ref.rank();
  // Only one reference shape exists today: $faults.<i>.target.rank
  const std::string& s = ref.ref();
  const std::string prefix = "$faults.";
  const std::string suffix = ".target.rank";
  if (s.rfind(prefix, 0) == 0 && s.size() > prefix.size() + suffix.size() &&
      s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    const std::string idx = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
    // The length cap keeps std::stoul from throwing on absurd indices.
    if (!idx.empty() && idx.size() <= 9 && idx.find_first_not_of("0123456789") == std::string::npos) {
      const size_t i = std::stoul(idx);
      if (i < faults.size() && faults[i].all_ranks())
        return InvalidArgument("reference '" + s + "': fault " + idx + " targets all ranks, not one");
      if (i < faults.size()) return faults[i].rank();
      return InvalidArgument("reference '" + s + "': the scenario has only " + std::to_string(faults.size()) +
                             " fault(s)");
    }
  }
  return InvalidArgument("reference '" + s + "' is not of the form $faults.<index>.target.rank");
}

std::vector<v1::ResolvedFault> FaultsFor(const std::vector<v1::ResolvedFault>& all, int rank,
                                         const std::string& host) {
  std::vector<v1::ResolvedFault> out;
  for (const auto& f : all) {
    const bool hit = f.all_ranks() || (f.host().empty() ? f.rank() == rank : f.host() == host);
    if (hit) out.push_back(f);
  }
  return out;
}

}  // namespace firedrill::faults
