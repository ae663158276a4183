// Semantic checks on mapped scenarios, and `firedrill fix --set` (ApplyJobSetting).
// The YAML -> proto mapping lives in loader.cc.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/restore_parts.h"
#include "common/suggest.h"
#include "faults/registry.h"
#include "faults/targeting.h"
#include "parallel/mesh.h"
#include "scenario/internal.h"
#include "scenario/job_keys.h"
#include "scenario/loader.h"
#include "scenario/model_layers.h"

namespace firedrill::scenario {

namespace pb = google::protobuf;
using namespace scenario_internal;  // NOLINT: this file's own helpers

namespace {

using FD = pb::FieldDescriptor;

#define FD_CHECK(expr)               \
  do {                               \
    if (auto _p = (expr)) return _p; \
  } while (0)

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

Check Fraction(const std::string& path, double v) {  // [0, 1)
  return v >= 0 && v < 1 ? std::nullopt : Fail(path, Str("must be in [0, 1), got ", v));
}

Check CheckModel(const v1::ModelSpec& m, const std::string& p) {
  FD_CHECK(OneOf(Join(p, "kind"), m.kind(), {"mlp", "gpt-tiny"}));
  FD_CHECK(InRange(Join(p, "layers"), m.layers(), 1, 16));
  FD_CHECK(AtLeast(Join(p, "hidden"), m.hidden(), 1));
  if (auto keep = KeepFp32Layers(m); !keep.ok()) return Fail(Join(p, "keep_fp32"), keep.status().message());
  if (m.kind() == "mlp") {
    FD_CHECK(AtLeast(Join(p, "input_dim"), m.input_dim(), 1));
    FD_CHECK(AtLeast(Join(p, "num_classes"), m.num_classes(), 1));
    return std::nullopt;
  }
  FD_CHECK(InRange(Join(p, "seq_len"), m.seq_len(), 2, 4096));
  FD_CHECK(InRange(Join(p, "heads"), m.heads(), 1, 64));
  if (m.hidden() % m.heads() != 0) {
    return Fail(Join(p, "hidden"), Str("must be a multiple of heads (", m.heads(), "), got ", m.hidden()));
  }
  if (m.vocab_size() != 0) FD_CHECK(InRange(Join(p, "vocab_size"), m.vocab_size(), 2, 65536));
  return InRange(Join(p, "mlp_ratio"), m.mlp_ratio(), 0, 16);
}

Check CheckData(const v1::JobSpec& j, const std::string& p) {
  const v1::DataSpec& d = j.data();
  FD_CHECK(InRange(Join(p, "batch_size"), d.batch_size(), 1, 4096));
  FD_CHECK(InRange(Join(p, "num_workers"), d.num_workers(), 0, 64));
  FD_CHECK(InRange(Join(p, "prefetch_depth"), d.prefetch_depth(), 0, 1024));
  FD_CHECK(AtLeast(Join(p, "sample_latency_ms"), d.sample_latency_ms(), 0.0));
  FD_CHECK(OneOf(Join(p, "sampler"), d.sampler(), {"", "random", "length_bucketed"}));
  FD_CHECK(OneOf(Join(p, "source"), d.source(), {"", "text", "synthetic"}));
  FD_CHECK(AtLeast(Join(p, "dataset_size"), d.dataset_size(), int64_t{0}));
  if (d.dataset_size() > 0 && j.model().kind() != "mlp")
    return Fail(Join(p, "dataset_size"), "applies to the mlp's synthetic data only (gpt-tiny's corpus sets its own size)");
  if (d.feature_scale() != 0) {
    if (j.model().kind() != "mlp")
      return Fail(Join(p, "feature_scale"),
                  "applies to the mlp's synthetic features only (gpt-tiny reads tokens)");
    FD_CHECK(InRange(Join(p, "feature_scale"), d.feature_scale(), 1.0, 1e12));
  }
  if (d.normalize() && j.model().kind() != "mlp")
    return Fail(Join(p, "normalize"), "applies to the mlp's synthetic features only (gpt-tiny reads tokens)");
  if (j.model().kind() == "gpt-tiny" && d.min_seq_len() != 0) {
    FD_CHECK(InRange(Join(p, "min_seq_len"), d.min_seq_len(), 1, j.model().seq_len()));
  }
  return std::nullopt;
}

Check CheckOptim(const v1::OptimSpec& o, const std::string& p) {
  FD_CHECK(OneOf(Join(p, "kind"), o.kind(), {"sgd", "adamw"}));
  FD_CHECK(Positive(Join(p, "lr"), o.lr()));
  FD_CHECK(Fraction(Join(p, "momentum"), o.momentum()));
  FD_CHECK(AtLeast(Join(p, "weight_decay"), o.weight_decay(), 0.0));
  FD_CHECK(Fraction(Join(p, "beta1"), o.beta1()));
  FD_CHECK(Fraction(Join(p, "beta2"), o.beta2()));
  FD_CHECK(AtLeast(Join(p, "eps"), o.eps(), 0.0));
  FD_CHECK(AtLeast(Join(p, "warmup_steps"), o.warmup_steps(), 0));
  FD_CHECK(OneOf(Join(p, "lr_scaling"), o.lr_scaling(), {"", "none", "linear", "sqrt"}));
  FD_CHECK(OneOf(Join(p, "accumulation_loss"), o.accumulation_loss(), {"", "mean", "sum"}));
  FD_CHECK(InRange(Join(p, "zero_stage"), o.zero_stage(), 0, 1));
  if (!o.lr_scaling().empty() && o.lr_scaling() != "none") {
    return AtLeast(Join(p, "reference_global_batch"), o.reference_global_batch(), 1);
  }
  return std::nullopt;
}

Check CheckLossScale(const v1::LossScaleSpec& l, const std::string& p) {
  FD_CHECK(OneOf(Join(p, "mode"), l.mode(), {"", "none", "static", "dynamic"}));
  FD_CHECK(AtLeast(Join(p, "init_scale"), l.init_scale(), 0.0));
  if (l.growth_factor() != 0 && !(l.growth_factor() > 1)) {
    return Fail(Join(p, "growth_factor"), Str("must be > 1, got ", l.growth_factor()));
  }
  if (l.backoff_factor() != 0 && !(l.backoff_factor() > 0 && l.backoff_factor() < 1)) {
    return Fail(Join(p, "backoff_factor"), Str("must be in (0, 1), got ", l.backoff_factor()));
  }
  return AtLeast(Join(p, "growth_interval"), l.growth_interval(), 0);
}

// Model parallelism: a mesh the world divides into, of gpt-tiny's blocks
// and heads, and only what the model-parallel trainer does so far.
Check CheckParallel(const v1::JobSpec& j, const std::string& p) {
  const v1::ParallelSpec& par = j.parallel();
  FD_CHECK(InRange(Join(p, "tp"), par.tp(), 0, 64));
  FD_CHECK(InRange(Join(p, "pp"), par.pp(), 0, 64));
  FD_CHECK(OneOf(Join(p, "schedule"), par.schedule(), {"", "1f1b", "gpipe"}));
  const int tp = std::max(1, par.tp()), pp = std::max(1, par.pp());
  if (auto order = parallel::Mesh::Create(tp * pp, tp, pp, par.order()); !order.ok())
    return Fail(Join(p, "order"), order.status().message());
  if (auto mesh = parallel::Mesh::Create(j.world_size(), tp, pp, par.order()); !mesh.ok())
    return Fail(Join(p, par.tp() > 1 ? "tp" : "pp"), mesh.status().message());
  if (tp * pp == 1) return std::nullopt;
  const std::string field = Join(p, tp > 1 ? "tp" : "pp");
  const v1::ModelSpec& m = j.model();
  if (m.kind() != "gpt-tiny")
    return Fail(field, "splits gpt-tiny's blocks and heads; model.kind is " + m.kind());
  const int ratio = m.mlp_ratio() > 0 ? m.mlp_ratio() : 4;
  if (m.heads() % tp != 0 || (ratio * m.hidden()) % tp != 0)
    return Fail(Join(p, "tp"), Str("must divide model.heads (", m.heads(), ") and the MLP width (",
                                   ratio * m.hidden(), "): each tensor-parallel rank holds whole heads"));
  if (pp > m.layers())
    return Fail(Join(p, "pp"), Str("gives a stage no block: the model has ", m.layers(), " (model.layers)"));
  if (!j.precision().empty() && j.precision() != "fp32")
    return Fail(field, "runs in fp32 only so far (precision is " + j.precision() + ")");
  if (j.optim().zero_stage() != 0)
    return Fail(
        field, "does not combine with optim.zero_stage 1 so far (partition the optimiser state in plain DP)");
  if (pp > 1 &&
      (j.optim().accumulation_loss() == "sum" || j.comm().accumulation_sync() == "every_micro_batch"))
    return Fail(Join(p, "pp"),
                "runs its micro-batches as a pipeline: each loss divided by their count, the "
                "gradients all-reduced once per step (optim.accumulation_loss and "
                "comm.accumulation_sync at their defaults)");
  if (j.checkpoint().every() > 0 || !j.checkpoint().resume_from().empty())
    return Fail(field,
                "has no checkpoint format so far: leave job.checkpoint.every at 0 and resume_from empty");
  return std::nullopt;
}

Check CheckJob(const v1::JobSpec& j, const std::string& p) {
  FD_CHECK(InRange(Join(p, "world_size"), j.world_size(), 1, 64));
  FD_CHECK(CheckModel(j.model(), Join(p, "model")));
  FD_CHECK(CheckData(j, Join(p, "data")));
  FD_CHECK(CheckOptim(j.optim(), Join(p, "optim")));
  FD_CHECK(OneOf(Join(p, "precision"), j.precision(), {"fp32", "bf16", "fp16"}));
  FD_CHECK(CheckLossScale(j.loss_scale(), Join(p, "loss_scale")));
  FD_CHECK(AtLeast(Join(p, "memory.device_budget_mb"), j.memory().device_budget_mb(), 0.0));
  FD_CHECK(AtLeast(Join(p, "steps"), j.steps(), int64_t{1}));
  FD_CHECK(InRange(Join(p, "grad_accum_steps"), j.grad_accum_steps(), 0, 1024));
  FD_CHECK(AtLeast(Join(p, "checkpoint.every"), j.checkpoint().every(), 0));
  FD_CHECK(AtLeast(Join(p, "checkpoint.keep"), j.checkpoint().keep(), 0));
  FD_CHECK(AtLeast(Join(p, "checkpoint.keep_period"), j.checkpoint().keep_period(), 0));
  if (auto parts = ParseRestoreParts(j.checkpoint().restore()); !parts.ok())
    return Fail(Join(p, "checkpoint.restore"), parts.status().message());
  FD_CHECK(OneOf(Join(p, "checkpoint.load"), j.checkpoint().load(), {"", "resharded", "per_rank"}));
  FD_CHECK(AtLeast(Join(p, "elastic.max_restarts"), j.elastic().max_restarts(), 0));
  if (j.elastic().max_restarts() > 10)
    return Fail(Join(p, "elastic.max_restarts"), "must be at most 10 (each restart relaunches every rank), got " +
                                                     std::to_string(j.elastic().max_restarts()));
  FD_CHECK(InRange(Join(p, "elastic.min_nodes"), j.elastic().min_nodes(), 0, j.world_size()));
  FD_CHECK(OneOf(Join(p, "comm.backend"), j.comm().backend(), {"gloo"}));
  FD_CHECK(OneOf(Join(p, "comm.transport"), j.comm().transport(), {"", "auto", "gloo"}));
  FD_CHECK(OneOf(Join(p, "comm.accumulation_sync"), j.comm().accumulation_sync(), {"", "once", "every_micro_batch"}));
  FD_CHECK(AtLeast(Join(p, "comm.bucket_mb"), j.comm().bucket_mb(), 0.0));
  FD_CHECK(AtLeast(Join(p, "comm.first_bucket_mb"), j.comm().first_bucket_mb(), 0.0));
  FD_CHECK(Positive(Join(p, "comm.timeout_s"), j.comm().timeout_s()));
  FD_CHECK(AtLeast(Join(p, "threads_per_rank"), j.threads_per_rank(), 0));
  FD_CHECK(CheckParallel(j, Join(p, "parallel")));
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
  else if (!t.all_ranks())
    return Fail(p + ".target", "is required: {rank: ...}, {host_of_rank: ...} or {all_ranks: true}");
  // A trigger past the last step would leave the drill without a fault.
  const v1::FaultTrigger& tr = f.trigger();
  FD_CHECK(CheckIntOrDraw(p + ".trigger.step", tr.step(), 0, s.job().steps() - 1));
  const bool timed = tr.has_until_step() || tr.flap_on_steps() != 0 || tr.flap_off_steps() != 0;
  if (timed && !kind->make)
    return Fail(p + ".trigger", "kind '" + f.kind() +
                                    "' acts through the deployed configuration, which holds for the whole run: "
                                    "until_step and flapping do not apply to it");
  if (kind->at_start && (timed || tr.step().has_draw() || tr.step().value() != 0))
    return Fail(p + ".trigger", "kind '" + f.kind() +
                                    "' acts when the job's process group is built (its environment is read then): "
                                    "trigger.step must be 0, with no until_step and no flapping");
  if (tr.has_until_step()) {
    FD_CHECK(CheckIntOrDraw(p + ".trigger.until_step", tr.until_step(), 1, s.job().steps()));
    const int64_t first_end = tr.until_step().has_draw() ? tr.until_step().draw().lo() : tr.until_step().value();
    const int64_t last_start = tr.step().has_draw() ? tr.step().draw().hi() : tr.step().value();
    if (first_end <= last_start)
      return Fail(p + ".trigger.until_step", "must come after trigger.step (every draw of it), got " +
                                                 std::to_string(first_end) + " <= " + std::to_string(last_start));
  }
  if ((tr.flap_on_steps() > 0) != (tr.flap_off_steps() > 0) || tr.flap_on_steps() < 0 || tr.flap_off_steps() < 0)
    return Fail(p + ".trigger", "flap_on_steps and flap_off_steps go together, both > 0 (steps on, then off)");
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

Check CheckFindingSpec(const v1::Scenario& s, const std::string& p, const std::string& cause,
                       const google::protobuf::RepeatedPtrField<v1::RankRef>& ranks) {
  FD_CHECK(NonEmpty(Join(p, "cause"), cause));
  if (!faults::IsKnownCause(cause)) {
    return Fail(Join(p, "cause"), "unknown cause '" + cause + "'" + DidYouMean(cause, faults::KnownCauses()) +
                                      "; known causes: " + JoinList(faults::KnownCauses()));
  }
  if (cause == "no-fault" && (!ranks.empty() || !s.faults().empty()))
    return Fail(Join(p, "cause"), "'no-fault' means the scenario has no faults and names no culprit ranks");
  for (int i = 0; i < ranks.size(); ++i) FD_CHECK(CheckRankRef(Indexed(Join(p, "culprit_ranks"), i), ranks[i], s));
  return std::nullopt;
}

Check CheckAnswer(const v1::Scenario& s) {
  const v1::Answer& a = s.answer();
  if (a.findings_size() == 0) return CheckFindingSpec(s, "answer", a.cause(), a.culprit_ranks());
  if (!a.cause().empty() || a.culprit_ranks_size() > 0)
    return Fail("answer", "give either cause (with culprit_ranks) or findings, not both");
  std::set<std::string> seen;
  for (int i = 0; i < a.findings_size(); ++i) {
    const std::string p = Indexed("answer.findings", i);
    FD_CHECK(CheckFindingSpec(s, p, a.findings(i).cause(), a.findings(i).culprit_ranks()));
    if (!seen.insert(a.findings(i).cause()).second)
      return Fail(Join(p, "cause"), "'" + a.findings(i).cause() + "' is named twice");
    if (a.findings(i).cause() == "no-fault")
      return Fail(Join(p, "cause"), "'no-fault' cannot be one finding among several");
  }
  return std::nullopt;
}

Check CheckRemediations(const v1::Scenario& s) {
  if (s.remediations_size() == 0)
    return Fail("remediations", "at least one accepted remediation is required");
  const std::vector<std::string> may(s.may_change().begin(), s.may_change().end());
  // A key a remediation sets must be one a fix may set: operational, or a
  // workload key the drill opens in may_change.
  auto settable = [&](const std::string& path, const std::string& key) -> Check {
    const JobKeyClass c = ClassOfJobKey(key);
    if (c == JobKeyClass::kEnvironment)
      return Fail(path, "'" + key + "' describes the machine, not the job: no fix may change it");
    if (c == JobKeyClass::kWorkload && !KeyAllowed(key, may))
      return Fail(path, "'" + key + "' is a workload setting: list it (or a prefix) in may_change so a fix may change it");
    return std::nullopt;
  };
  for (int i = 0; i < s.remediations_size(); ++i) {
    const v1::Remediation& rem = s.remediations(i);
    const std::string rp = Indexed("remediations", i) + ".actions";
    if (rem.actions_size() == 0) return Fail(rp, "at least one action is required");
    for (int k = 0; k < rem.actions_size(); ++k) {
      const v1::RemediationAction& a = rem.actions(k);
      const std::string ap = Indexed(rp, k);
      if (a.has_replace_host()) {
        FD_CHECK(CheckRankRef(ap + ".replace_host", a.replace_host(), s));
      } else if (a.has_set()) {
        v1::JobSpec probe = s.job();  // the same check `firedrill fix --set` gets
        const v1::SetKey& want = a.set();
        if (want.has_at_most() && !want.value().empty())
          return Fail(ap + ".set.at_most", "give value, or a range (at_least / at_most), not both");
        if (want.has_at_most() && !(want.at_most() >= want.at_least()))
          return Fail(ap + ".set.at_most", Str("must be >= at_least (", want.at_least(), "), got ", want.at_most()));
        // A number in the range stands for every learner's value.
        char bound[32];
        std::snprintf(bound, sizeof(bound), "%.17g", want.has_at_most() ? want.at_most() : want.at_least());
        const std::string value = want.value().empty() ? bound : want.value();
        Status st = ApplyJobSetting(&probe, a.set().key(), value);
        if (!st.ok()) return Fail(ap + ".set", st.message());
        FD_CHECK(settable(ap + ".set.key", a.set().key()));
      } else if (a.no_change()) {
        if (rem.actions_size() > 1) return Fail(ap, "no_change is a remediation on its own");
      } else {
        return Fail(ap, "must be {replace_host: RANK}, {set: {key: K, value: V}} or {no_change: true}");
      }
    }
    const std::vector<std::string> keys = JobSettingKeys();
    for (int k = 0; k < rem.may_also_set_size(); ++k) {
      const std::string& key = rem.may_also_set(k);
      const std::string kp = Indexed(Indexed("remediations", i) + ".may_also_set", k);
      if (!std::binary_search(keys.begin(), keys.end(), key))
        return Fail(kp, "'" + key + "' is not a job setting" + DidYouMean(key, keys));
      FD_CHECK(settable(kp, key));
    }
  }
  return std::nullopt;
}

// The first checkpoint that outlives pruning (kept for good) comes before
// fault `f` can act: a checkpoint the fault has not touched is left however
// late the learner looks.
Check KeptForGoodBefore(const v1::Scenario& s, const v1::FaultSpec& f, const std::string& p) {
  const auto& ck = s.job().checkpoint();
  const int64_t first = f.trigger().step().has_draw() ? f.trigger().step().draw().lo() : f.trigger().step().value();
  const int64_t kept = ck.keep() == 0 ? ck.every() : ck.keep_period() > 0 ? std::lcm<int64_t>(ck.every(), ck.keep_period()) : 0;
  if (kept == 0 || kept > first)
    return Fail(p + ".trigger.step",
                "can be " + std::to_string(first) + ", before the first checkpoint kept for good (" +
                    (kept == 0 ? std::string("checkpoint.keep > 0 and no keep_period: none is")
                               : "step " + std::to_string(kept)) +
                    "): the only fix left would be a restart from scratch");
  return std::nullopt;
}

}  // namespace

namespace scenario_internal {

Check CheckScenario(const v1::Scenario& s) {
  FD_CHECK(NonEmpty("id", s.id()));
  if (s.id().find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return Fail("id", "must use only a-z, 0-9 and '-', got '" + s.id() + "'");
  }
  FD_CHECK(NonEmpty("title", s.title()));
  FD_CHECK(NonEmpty("briefing", s.briefing()));
  FD_CHECK(CheckJob(s.job(), "job"));
  {
    const v1::Cluster& c = s.cluster();
    const int per_host = std::max(1, c.ranks_per_host());
    FD_CHECK(InRange("cluster.ranks_per_host", c.ranks_per_host(), 0, 64));
    if (s.job().world_size() % per_host != 0)
      return Fail("cluster.ranks_per_host", Str("must divide job.world_size (", s.job().world_size(),
                                                "): every host holds the same number of ranks"));
    FD_CHECK(InRange("cluster.cpus_per_host", c.cpus_per_host(), 0, 1024));
    if (!(c.inter_host_gbps() >= 0) || c.inter_host_gbps() > 100)
      return Fail("cluster.inter_host_gbps",
                  Str("must be in [0, 100] GB/s (0: not shaped), got ", c.inter_host_gbps()));
    // The launcher counts what is left of a job by ranks (one to a host so
    // far): a host of several that goes down is not yet a shrink it knows.
    if (per_host > 1 && s.job().elastic().max_restarts() > 0)
      return Fail("cluster.ranks_per_host",
                  "does not combine with job.elastic.max_restarts > 0 yet: the launcher "
                  "restarts a job one rank to a host");
    for (const auto& f : s.faults())
      if (per_host > 1 && f.kind() == "rank_crash")
        return Fail("cluster.ranks_per_host",
                    "does not combine with a rank_crash fault yet: the launcher counts "
                    "the hosts left one rank to a host");
  }
  for (int i = 0; i < s.faults_size(); ++i) FD_CHECK(CheckFault(s, i));
  // A fault whose harm verification cannot measure would let an unfixed
  // job pass: a flipped mantissa bit moves no throughput, skew or loss, so
  // only comparing the parameters with a reference run judges that fix.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "silent_divergence") continue;
    const std::string p = Indexed("faults", i);
    if (!s.verify().params_vs_reference())
      return Fail(p + ".kind",
                  "silent_divergence needs verify.params_vs_reference: true (throughput, rank skew and loss stay as "
                  "they were after a flipped mantissa bit, so only the parameters can tell a fixed job)");
    if (s.job().checkpoint().every() <= 0)
      return Fail(p + ".kind", "silent_divergence needs job.checkpoint.every > 0: the remedy rolls back to a "
                               "checkpoint written before the replicas went apart");
    // And one such checkpoint must outlive the pruning, however late the
    // learner looks: the first step kept for good comes before the fault.
    FD_CHECK(KeptForGoodBefore(s, f, p));
  }
  // A resume that loads part of the state shows only at a restart: a host
  // must go down, the launcher must restart the job from `latest`, and a
  // checkpoint written before that restart must be left to roll back to.
  // Verification holds the parameters to a reference run's, bitwise: the
  // loss comes back within a few hundred steps and cannot tell.
  for (int i = 0; i < s.faults_size(); ++i) {
    if (s.faults(i).kind() != "resume_without_state") continue;
    const std::string p = Indexed("faults", i);
    if (!s.verify().params_vs_reference())
      return Fail(p + ".kind", "resume_without_state needs verify.params_vs_reference: true (the loss recovers from a "
                               "lost optimiser state; only the parameters tell a job that resumed whole)");
    const auto& ck = s.job().checkpoint();
    if (ck.every() <= 0 || ck.resume_from() != "latest" || s.job().elastic().max_restarts() < 1)
      return Fail(p + ".kind", "resume_without_state needs job.checkpoint.every > 0, job.checkpoint.resume_from: latest "
                               "and job.elastic.max_restarts >= 1: it shows when the launcher resumes a failed job");
    int crashes = 0;
    for (int k = 0; k < s.faults_size(); ++k) {
      if (s.faults(k).kind() != "rank_crash") continue;
      ++crashes;
      FD_CHECK(KeptForGoodBefore(s, s.faults(k), Indexed("faults", k)));
    }
    if (crashes == 0)
      return Fail(p + ".kind", "resume_without_state needs a rank_crash fault in the scenario: without a restart "
                               "nothing resumes and the fault never shows");
  }
  // A cadence is right or wrong for what a checkpoint costs and how often
  // hosts fail: verification needs the failure rate (the briefing's) to
  // judge the goodput, and the healthy job must checkpoint, at another
  // cadence than the fault's.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "checkpoint_cadence") continue;
    const std::string p = Indexed("faults", i);
    if (s.verify().mtbf_s() <= 0)
      return Fail(p + ".kind", "checkpoint_cadence needs verify.mtbf_s (the hosts' mean time between failures the "
                               "briefing states): verification judges the fixed cadence's goodput with it");
    if (s.job().checkpoint().every() <= 0)
      return Fail(p + ".kind", "checkpoint_cadence needs job.checkpoint.every > 0: the healthy job checkpoints too");
    if (f.checkpoint_cadence().every() == s.job().checkpoint().every())
      return Fail(p + ".params.every", "is the healthy job's own checkpoint.every (" +
                                           std::to_string(s.job().checkpoint().every()) + "): the fault changes nothing");
  }
  // A carried-over accumulation is judged on the loss against the healthy
  // job's, which must accumulate otherwise.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "stale_accumulation") continue;
    const std::string p = Indexed("faults", i);
    if (std::max(1, f.stale_accumulation().grad_accum_steps()) == std::max(1, s.job().grad_accum_steps()))
      return Fail(p + ".params.grad_accum_steps", "is the healthy job's own grad_accum_steps (" +
                                                      std::to_string(std::max(1, s.job().grad_accum_steps())) +
                                                      "): the fault changes nothing");
    if (s.verify().loss_vs_baseline_max() <= 0)
      return Fail(p + ".kind", "stale_accumulation needs verify.loss_vs_baseline_max: the global batch shows in "
                               "the loss, not in the speed");
  }
  // A deploy's settings make a job the trainer runs, each one a change.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "deploy_change") continue;
    const std::string p = Indexed("faults", i) + ".params.set";
    v1::JobSpec deployed = s.job();
    for (int k = 0; k < f.deploy_change().set_size(); ++k) {
      const v1::JobSetting& kv = f.deploy_change().set(k);
      const std::string at = Indexed(p, k);
      const std::vector<std::string> keys = JobSettingKeys();
      if (!std::binary_search(keys.begin(), keys.end(), kv.key()))
        return Fail(at + ".key", "unknown setting '" + kv.key() + "'; known settings: " + JoinList(keys));
      if (ClassOfJobKey(kv.key()) == JobKeyClass::kEnvironment)
        return Fail(at + ".key", kv.key() +
                                     " describes the machine, not the job: a deploy does not change it "
                                     "(device_memory gives a device's memory)");
      const v1::JobSpec before = deployed;
      if (Status st = faults::SetJobKey(&deployed, kv.key(), kv.value()); !st.ok())
        return Fail(at + ".value", st.message());
      if (before.SerializeAsString() == deployed.SerializeAsString())
        return Fail(at + ".value",
                    "is the healthy job's own " + kv.key() + ": the deploy changes nothing there");
    }
    if (Check bad = CheckJob(deployed, "")) return Fail(p, "the job as deployed: " + FormatProblem("", *bad));
  }
  // A host that stays down shows through the launcher: it restarts the job
  // without it (elastic.min_nodes below the world size) or the job stays
  // down until a host replaces it.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "rank_crash" || !f.rank_crash().stays_down()) continue;
    const auto& el = s.job().elastic();
    if (el.min_nodes() > 0 && el.min_nodes() < s.job().world_size() && el.max_restarts() < 1)
      return Fail(
          Indexed("faults", i) + ".params.stays_down",
          "needs job.elastic.max_restarts >= 1 where job.elastic.min_nodes lets the job go on without the "
          "host: only a restart goes on without it");
    bool names_ranks = s.answer().culprit_ranks_size() > 0;
    for (const auto& fd : s.answer().findings()) names_ranks = names_ranks || fd.culprit_ranks_size() > 0;
    for (const auto& rem : s.remediations())
      for (const auto& a : rem.actions()) names_ranks = names_ranks || a.has_replace_host();
    if (el.min_nodes() > 0 && el.min_nodes() < s.job().world_size() && names_ranks)
      return Fail(
          Indexed("faults", i) + ".params.stays_down",
          "lets the job go on with fewer ranks, numbered anew: the answer can name no culprit ranks and "
          "the remediations replace no host then (the numbers a learner reads change at the restart)");
  }
  // A per-rank loader is exact at the world size it saved at: only a restart
  // on fewer hosts, from a partitioned checkpoint, shows it.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "checkpoint_load") continue;
    const std::string p = Indexed("faults", i);
    const auto& j = s.job();
    if (j.checkpoint().load() == f.checkpoint_load().load())
      return Fail(p + ".params.load", "is the healthy job's own checkpoint.load (\"" + j.checkpoint().load() +
                                          "\"): the fault changes nothing");
    if (j.optim().zero_stage() != 1)
      return Fail(p + ".kind",
                  "checkpoint_load needs job.optim.zero_stage: 1: only a checkpoint whose optimiser "
                  "state is partitioned across the ranks has a layout tied to the world size");
    if (j.checkpoint().every() <= 0 || j.checkpoint().resume_from() != "latest" ||
        j.elastic().max_restarts() < 1)
      return Fail(p + ".kind",
                  "checkpoint_load needs job.checkpoint.every > 0, job.checkpoint.resume_from: latest "
                  "and job.elastic.max_restarts >= 1: it shows when the launcher resumes the job");
    if (j.elastic().min_nodes() < 1 || j.elastic().min_nodes() >= j.world_size())
      return Fail(p + ".kind",
                  "checkpoint_load needs job.elastic.min_nodes between 1 and world_size - 1: it shows "
                  "when the launcher restarts the job on fewer hosts");
    bool gone = false;
    for (int k = 0; k < s.faults_size(); ++k) {
      const v1::FaultSpec& c = s.faults(k);
      if (c.kind() != "rank_crash" || !c.rank_crash().stays_down()) continue;
      gone = true;
      // Before the first checkpoint the restart starts from step 0 and
      // loads nothing: the fault would never show.
      const int64_t first =
          c.trigger().step().has_draw() ? c.trigger().step().draw().lo() : c.trigger().step().value();
      if (first <= j.checkpoint().every())
        return Fail(Indexed("faults", k) + ".trigger.step",
                    "can be " + std::to_string(first) +
                        ": the host must go down after the first checkpoint (step > " +
                        std::to_string(j.checkpoint().every()) +
                        "), or the restart loads nothing and the per-rank loader never shows");
    }
    if (!gone)
      return Fail(p + ".kind",
                  "checkpoint_load needs a rank_crash fault with params.stays_down: true: at the world "
                  "size it saved at, a per-rank load is exact and nothing shows");
  }
  // A damaged checkpoint shows only when a restart reads it, and there must
  // be a good one left to go back to.
  for (int i = 0; i < s.faults_size(); ++i) {
    const v1::FaultSpec& f = s.faults(i);
    if (f.kind() != "corrupt_checkpoint") continue;
    const std::string p = Indexed("faults", i);
    const auto& ck = s.job().checkpoint();
    if (ck.every() <= 0)
      return Fail(p + ".kind", "corrupt_checkpoint needs job.checkpoint.every > 0: it damages checkpoints");
    if (ck.resume_from() != "latest" || s.job().elastic().max_restarts() < 1)
      return Fail(p + ".kind", "corrupt_checkpoint needs job.checkpoint.resume_from: latest and job.elastic.max_restarts "
                               ">= 1: the damage shows when a restart resumes from it");
    if (s.job().comm().timeout_s() > 0 && s.job().comm().timeout_s() < 10)
      return Fail(p + ".kind", "corrupt_checkpoint needs job.comm.timeout_s >= 10 (the host waits up to 3 s for the "
                               "newest manifest before it damages it, its peers in a collective meanwhile)");
    const int damaged = f.corrupt_checkpoint().checkpoints();
    if (ck.keep() > 0 && ck.keep() <= damaged)
      return Fail(p + ".params.checkpoints", "damages " + std::to_string(damaged) + " checkpoints but checkpoint.keep is " +
                                                 std::to_string(ck.keep()) + ": keep more, so that a newest good one is left");
    const int64_t first = f.trigger().step().has_draw() ? f.trigger().step().draw().lo() : f.trigger().step().value();
    if (first <= static_cast<int64_t>(damaged + 1) * ck.every())
      return Fail(p + ".trigger.step", "can be " + std::to_string(first) + ": trigger after at least " +
                                           std::to_string(damaged + 1) + " checkpoints (step > " +
                                           std::to_string((damaged + 1) * ck.every()) + "), so one is left undamaged");
  }
  FD_CHECK(CheckAnswer(s));
  FD_CHECK(CheckRemediations(s));
  for (int i = 0; i < s.may_change_size(); ++i) {
    const std::string& k = s.may_change(i);
    const std::vector<std::string> keys = JobSettingKeys();
    bool known = false, workload = false;
    for (const auto& key : keys) {
      if (!KeyAllowed(key, {k})) continue;
      known = true;
      workload = workload || ClassOfJobKey(key) == JobKeyClass::kWorkload;
    }
    if (!known) return Fail(Indexed("may_change", i), "'" + k + "' is not a job setting or a prefix of one" + DidYouMean(k, keys));
    if (!workload)
      return Fail(Indexed("may_change", i), "'" + k + "' names no workload setting (operational ones may always change)");
  }
  const v1::VerifySpec& v = s.verify();
  FD_CHECK(AtLeast("verify.warmup_steps", v.warmup_steps(), 0));
  FD_CHECK(AtLeast("verify.window_steps", v.window_steps(), 1));
  if (!(v.throughput_vs_baseline_min() > 0 && v.throughput_vs_baseline_min() <= 2)) {
    return Fail("verify.throughput_vs_baseline_min",
                Str("must be in (0, 2], got ", v.throughput_vs_baseline_min()));
  }
  FD_CHECK(AtLeast("verify.rank_step_skew_max", v.rank_step_skew_max(), 1.0));
  FD_CHECK(OneOf("verify.throughput_unit", v.throughput_unit(), {"", "samples", "tokens"}));
  if (v.throughput_unit() == "tokens" && s.job().model().kind() != "gpt-tiny")
    return Fail("verify.throughput_unit", "'tokens' needs a token model (gpt-tiny); this job's model is " + s.job().model().kind());
  FD_CHECK(InRange("verify.pairs", v.pairs(), 0, 10));
  if (v.loss_vs_baseline_max() != 0 && !(v.loss_vs_baseline_max() >= 1.0 && v.loss_vs_baseline_max() <= 10.0))
    return Fail("verify.loss_vs_baseline_max",
                Str("must be 0 (off) or in [1, 10] (the fixed job's mean loss over the healthy job's), got ",
                    v.loss_vs_baseline_max()));
  if (v.has_skipped_steps_max() && !(v.skipped_steps_max() >= 0 && v.skipped_steps_max() <= 1))
    return Fail("verify.skipped_steps_max",
                Str("must be in [0, 1] (a share of the window's optimiser steps), got ", v.skipped_steps_max()));
  if (v.has_pp_bubble_max() && !(v.pp_bubble_max() > 0 && v.pp_bubble_max() < 1))
    return Fail(
        "verify.pp_bubble_max",
        Str("must be in (0, 1) (a stage's idle share of the pipeline's span), got ", v.pp_bubble_max()));
  bool bubble_drill = s.answer().cause() == "pipeline-bubble";
  for (const auto& fd : s.answer().findings()) bubble_drill = bubble_drill || fd.cause() == "pipeline-bubble";
  if (bubble_drill && !v.has_pp_bubble_max())
    return Fail("verify",
                "a pipeline-bubble answer needs verify.pp_bubble_max: on a loaded machine other work "
                "fills the bubble's idle time, and throughput alone passes a pipeline left as it was");
  if (v.has_pp_bubble_max() && s.job().parallel().pp() < 2)
    return Fail("verify.pp_bubble_max",
                "judges a pipeline's bubble, and the job has no pipeline (job.parallel.pp is " +
                    std::to_string(s.job().parallel().pp()) + "): set it to 2 or more");
  if (v.mtbf_s() < 0 || v.mtbf_s() > 1e7)
    return Fail("verify.mtbf_s", Str("must be 0 (off) or a time between failures in seconds (at most 1e7), got ",
                                     v.mtbf_s()));
  if (v.mtbf_s() > 0 && !(v.goodput_vs_best_min() > 0 && v.goodput_vs_best_min() <= 1))
    return Fail("verify.goodput_vs_best_min",
                Str("must be in (0, 1] with verify.mtbf_s (the fixed cadence's goodput over the best cadence's), got ",
                    v.goodput_vs_best_min()));
  if (v.mtbf_s() > 0 && s.job().checkpoint().every() <= 0)
    return Fail("verify.mtbf_s", "judges a checkpoint cadence, and the job has none (job.checkpoint.every is 0)");
  if (v.mtbf_s() > 0 &&
      std::none_of(s.faults().begin(), s.faults().end(), [](const v1::FaultSpec& f) { return f.kind() == "checkpoint_cadence"; }))
    return Fail("verify.mtbf_s", "judges a checkpoint cadence, and no fault is one (checkpoint_cadence): every "
                                 "learner's fix of another drill would be held to it");
  const v1::Rubric& b = s.rubric();
  FD_CHECK(AtLeast("rubric.cause", b.cause(), 0));
  FD_CHECK(AtLeast("rubric.culprit", b.culprit(), 0));
  FD_CHECK(AtLeast("rubric.fix", b.fix(), 0));
  FD_CHECK(AtLeast("rubric.time", b.time(), 0));
  FD_CHECK(AtLeast("rubric.hint_cost", b.hint_cost(), 0));
  FD_CHECK(AtLeast("rubric.time_budget_s", b.time_budget_s(), 1));
  FD_CHECK(AtLeast("rubric.revision_cost", b.revision_cost(), 0));
  FD_CHECK(AtLeast("rubric.collateral_cost", b.collateral_cost(), 0));
  if (b.time_limit_s() != 0 && b.time_limit_s() < b.time_budget_s())
    return Fail("rubric.time_limit_s", Str("must be 0 (3 x time_budget_s) or >= time_budget_s (", b.time_budget_s(),
                                           "), got ", b.time_limit_s()));
  for (int i = 0; i < s.hints_size(); ++i) FD_CHECK(NonEmpty(Indexed("hints", i), s.hints(i)));
  return std::nullopt;
}

}  // namespace scenario_internal

Status ValidateScenario(const v1::Scenario& s, const std::string& where) {
  if (Check p = CheckScenario(s)) return InvalidArgument(FormatProblem(where, *p));
  return Status::Ok();
}

std::vector<std::string> ScenarioWarnings(const v1::Scenario& s) {
  auto lower = [](std::string t) {
    for (char& c : t) c = std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : ' ';
    return t;
  };
  std::vector<std::pair<std::string, std::string>> names;  // phrase, what it is
  for (const auto& k : faults::FaultKindNames()) names.emplace_back(lower(k), "the fault kind '" + k + "'");
  for (const auto& c : faults::KnownCauses())
    if (c != "no-fault") names.emplace_back(lower(c), "the cause '" + c + "'");
  std::vector<std::string> out;
  for (const auto& [field, text] : std::vector<std::pair<std::string, std::string>>{
           {"id", s.id()}, {"title", s.title()}, {"briefing", s.briefing()}}) {
    const std::string t = " " + lower(text) + " ";
    for (const auto& [phrase, what] : names) {
      if (t.find(" " + phrase + " ") == std::string::npos) continue;  // whole words
      out.push_back(field + " names " + what + ": learners read the " + field +
                    " before they diagnose, so it gives the answer away");
      break;
    }
  }
  return out;
}

Status ValidateJob(const v1::JobSpec& job, const std::string& where) {
  if (Check p = CheckJob(job, "")) return InvalidArgument(FormatProblem(where, *p));
  return Status::Ok();
}

Status ValidateParallel(const v1::JobSpec& job, const std::string& where) {
  if (Check p = CheckParallel(job, "parallel")) return InvalidArgument(FormatProblem(where, *p));
  return Status::Ok();
}

Status ApplyJobSetting(v1::JobSpec* job, const std::string& key, const std::string& value) {
  const std::vector<std::string> keys = JobSettingKeys();
  if (!std::binary_search(keys.begin(), keys.end(), key)) {
    return InvalidArgument("unknown setting '" + key + "'; known settings: " + JoinList(keys));
  }
  const v1::JobSpec before = *job;
  FD_RETURN_IF_ERROR(faults::SetJobKey(job, key, value));
  if (Check p = CheckJob(*job, "")) {
    *job = before;  // a rejected fix must not leave a half-applied job
    return InvalidArgument("setting " + key + "=" + value + " rejected: " + FormatProblem("", *p));
  }
  return Status::Ok();
}

#undef FD_CHECK

}  // namespace firedrill::scenario
