// SessionManager::RunProbe: sends the probe to every rank of the session's
// job and merges their reports. The ranks agree among themselves on the step
// boundary where it runs (agent/probe.h), so the controller only waits.
#include <chrono>
#include <string>
#include <vector>

#include "common/log.h"
#include "controller/probe_merge.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

void SessionManager::OnProbeReport(const std::string& agent_id, const v1::ProbeReport& report) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (report.request_id() != s->probe_request) return;  // an abandoned probe's late answer
  for (int rank = 0; rank < static_cast<int>(s->ranks.size()); ++rank) {
    if (s->ranks[rank].agent_id != agent_id) continue;
    if (report.started()) s->probe_started.insert(rank);
    else s->probe_replies[rank] = report;
  }
  s->cv.notify_all();
}

StatusOr<v1::RunProbeResponse> SessionManager::RunProbe(const v1::RunProbeRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  auto spec = NormalizeProbeSpec(req.spec());
  if (!spec.ok()) return spec.status();
  std::unique_lock<std::mutex> one(s.probe_mu, std::try_to_lock);
  if (!one.owns_lock())
    return FailedPrecondition("another probe, or a fix being applied, is in progress on session " + req.session_id() +
                              "; try again when it is done");
  if (spec->op() == "resume") return RunResumeProbe(s, *spec);  // beside the job, not in it

  const int64_t id = ++fr_counter_;
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::pair<int, std::string>> agents;
  std::string run_id;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "probes"));
    if (!s.run || s.run->kind != RunKind::kMain || s.run->state != RunState::kRunning)
      return FailedPrecondition(
          "probes run between the steps of the session's job, and it is not running now" +
          std::string(s.run && s.run->kind != RunKind::kMain
                          ? std::string(" (the controller is measuring a ") + Name(s.run->kind) +
                                " run; try again when it is done)"
                          : "") +
          "; see `firedrill status`");
    run_id = s.run->id;
    for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
      if (s.ranks[rank].agent_id.empty() || s.ranks[rank].state != RankState::kRunning)
        return FailedPrecondition("rank " + std::to_string(rank) + " is " + Name(s.ranks[rank].state) +
                                  ", not running: a probe needs every rank of the job");
      agents.emplace_back(rank, s.ranks[rank].agent_id);
    }
    s.probe_request = id;
    s.probe_replies.clear();
    s.probe_started.clear();
  }
  v1::ControllerMessage msg;
  auto* p = msg.mutable_probe();
  p->set_request_id(id);
  p->set_run_id(run_id);
  *p->mutable_spec() = *spec;
  for (const auto& [rank, agent] : agents) {
    if (!pool_->Send(agent, msg)) {
      // The ranks that got it wait for this one at the boundary, then all
      // fail the probe: nothing to collect.
      std::lock_guard<std::mutex> lock(s.mu);
      s.probe_request = 0;
      return Unavailable("rank " + std::to_string(rank) + "'s agent is not connected; the probe was not run");
    }
  }

  // A healthy job reaches a step boundary within a step: every rank says
  // when it begins. The sweep itself may then take minutes (large sizes
  // over a slow link). A job that makes no progress never begins it; a
  // failure on any rank fails it on all.
  std::unique_lock<std::mutex> lock(s.mu);
  auto over = [&] {
    if (!s.run || s.run->id != run_id || (s.run->state != RunState::kRunning && s.run->state != RunState::kStarting)) return true;
    for (const auto& [rank, r] : s.probe_replies)
      if (!r.error().empty()) return true;
    return false;
  };
  const bool begun = s.cv.wait_for(lock, std::chrono::seconds(60), [&] {
    return over() || s.probe_started.size() + s.probe_replies.size() >= agents.size();
  });
  bool done = false;
  if (begun) {
    done = s.cv.wait_for(lock, std::chrono::minutes(10),
                         [&] { return over() || s.probe_replies.size() >= agents.size(); });
  }
  s.probe_request = 0;
  std::vector<v1::ProbeReport> reports;
  std::string missing, errors;
  for (const auto& [rank, agent] : agents) {
    auto it = s.probe_replies.find(rank);
    if (it == s.probe_replies.end()) {
      missing += (missing.empty() ? "" : ",") + std::to_string(rank);
    } else if (!it->second.error().empty()) {
      errors += (errors.empty() ? "" : "; ") + it->second.error();
    } else {
      reports.push_back(it->second);
    }
  }
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!errors.empty()) return Unavailable("probe " + spec->op() + " failed: " + errors);
  if (!missing.empty()) {
    if (!s.run || s.run->id != run_id || s.run->state != RunState::kRunning)
      return Unavailable("the job ended before ranks " + missing + " finished the probe");
    if (begun && !done)
      return DeadlineExceeded("the probe was still running on ranks " + missing + " after " +
                              std::to_string(static_cast<int>(waited_s)) +
                              " s; ask for fewer sizes or iterations (-e, -n)");
    return DeadlineExceeded("ranks " + missing + " did not reach a step boundary within " +
                            std::to_string(static_cast<int>(waited_s)) +
                            " s: probes run between training steps, so a job that makes no progress cannot run "
                            "one; `firedrill fr` shows where its ranks wait");
  }
  auto merged = MergeProbeReports(*spec, static_cast<int>(agents.size()), reports, s.rec.job().parallel());
  if (!merged.ok()) return merged.status();
  merged->set_session_id(req.session_id());
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank)
    merged->add_hosts(rank < s.rec.hosts_size() ? s.rec.hosts(rank) : s.ranks[rank].host);
  spdlog::info("session {}: probe {} after step {} took {:.1f} s", req.session_id(), spec->op(), merged->step(),
               waited_s);
  return merged;
}

}  // namespace firedrill::controller
