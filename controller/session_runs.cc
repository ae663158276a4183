// Run orchestration: every rank has a live agent before a run (launched
// here, or an idle registered one in remote mode), runs are started,
// watched for hangs and stopped, agents are retired on purpose, and what the
// agents report (steps, job events, their exit) lands in the session.
#include <sched.h>

#include <algorithm>
#include <cstdlib>

#include "common/clock.h"
#include "common/format.h"
#include "common/log.h"
#include "controller/netns_fabric.h"
#include "controller/run_metrics.h"
#include "controller/session_manager.h"
#include "faults/cpu_quota.h"
#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

Status SessionManager::LaunchRank(Session& s, Lock& lock, int rank, const std::string& host) {
  const std::string agent_id =
      s.rec.info().session_id() + "-a" + std::to_string(s.agent_counter++);
  {
    std::lock_guard<std::mutex> g(mu_);
    agent_session_[agent_id] = s.rec.info().session_id();
  }
  Rank& r = s.ranks[rank];
  Renew(r);
  r.agent_id = agent_id;
  r.host = host;
  r.state = RankState::kStarting;
  auto where = PlaceOnHost(s, host);
  if (!where.ok()) return where.status();
  pool_->Expect(agent_id, s.join_token);
  auto pid = launcher_->Launch(agent_id, host, s.join_token, *where);
  if (!pid.ok()) return pid.status();
  r.pid = *pid;
  return Status::Ok();
}

namespace {
// Fabric hosts are the machine's, sessions' host names are their own.
std::string HostKey(const std::string& session_id, const std::string& host) { return session_id + "/" + host; }
}  // namespace

namespace {
// Host `host` ("node-<k>")'s share of the CPUs this controller may use: n
// of them from k x n on, round the machine's (several hosts share a machine
// smaller than the cluster, as its hosts share its network).
std::vector<int> HostCpus(const std::string& host, int n) {
  std::vector<int> out;
  if (n <= 0) return out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  if (allowed.empty()) return out;
  int k = 0;
  if (host.rfind("node-", 0) == 0) k = std::atoi(host.c_str() + 5);
  for (int i = 0; i < std::min<int>(n, static_cast<int>(allowed.size())); ++i)
    out.push_back(allowed[(static_cast<size_t>(k) * n + i) % allowed.size()]);
  return out;
}
}  // namespace

StatusOr<Placement> SessionManager::PlaceOnHost(Session& s, const std::string& host) {
  const std::vector<int> cpus = HostCpus(host, s.scenario->cluster().cpus_per_host());
  if (!opts_.fabric) {
    Placement p;
    p.cpus = cpus;
    return p;
  }
  const std::string key = HostKey(s.rec.info().session_id(), host);
  auto h = opts_.fabric->Host(key);
  if (!h.ok()) h = opts_.fabric->AddHost(key);
  if (!h.ok()) return Unavailable("host " + host + ": making its network namespace: " + h.status().message());
  s.netns_hosts.insert(key);
  // The drill's inter-host links (cluster.inter_host_gbps): every run's,
  // the baseline's too. A host is the same machine whichever run is on it;
  // one not shaped yet (new, or a shaping that failed before) is now.
  if (const double gbps = s.scenario->cluster().inter_host_gbps(); gbps > 0 && h->ifb.empty())
    if (Status st = opts_.fabric->ShapeHost(key, gbps); !st.ok())
      return Unavailable("host " + host + ": " + st.message());
  return Placement{NetnsFabric::NetnsPath(h->netns), h->address, h->ifname, cpus};
}

void SessionManager::RemoveHost(Session& s, const std::string& host) {
  const std::string key = HostKey(s.rec.info().session_id(), host);
  if (!opts_.fabric || !s.netns_hosts.erase(key)) return;
  if (Status st = opts_.fabric->RemoveHost(key); !st.ok())
    spdlog::warn("session {}: removing the namespace of host {}: {}", s.rec.info().session_id(), host, st.message());
}

bool SessionManager::AgentAlive(const Session& s, int rank) {
  const Rank& r = s.ranks[rank];
  // (A rank stopped with its group keeps its agent: the agent is the node's,
  // as torchrun's elastic agent is; one torn down by Teardown is forgotten
  // by the pool.)
  if (r.agent_id.empty() || r.state == RankState::kLost || r.state == RankState::kRetired) return false;
  if (!pool_->Find(r.agent_id)) return false;
  return !launcher_ || launcher_->Running(r.agent_id);
}

// Makes sure every rank has a live, registered agent before a run: a rank
// whose agent is gone (never started, replaced, lost, killed) gets a new
// one, whatever state its last report left it in.
Status SessionManager::EnsureAgents(Session& s, Lock& lock) {
  std::vector<std::string> waiting;
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    Rank& r = s.ranks[rank];
    if (AgentAlive(s, rank)) continue;
    if (!r.agent_id.empty() && r.state != RankState::kRetired) RetireAgent(s, lock, rank);  // half there: finish it off
    if (!opts_.local_launcher) {
      // Remote agents: take an idle registered agent, never one on a host
      // the learner asked to replace, nor one already holding a rank here,
      // nor one still finishing a job it was given before.
      std::set<std::string> busy_hosts = s.replaced_hosts;
      for (int other = 0; other < static_cast<int>(s.ranks.size()); ++other) {
        if (other != rank && AgentAlive(s, other)) busy_hosts.insert(s.ranks[other].host);
      }
      bool found = false;
      for (const auto& a : pool_->Connected()) {
        std::lock_guard<std::mutex> g(mu_);
        if (a.busy || agent_session_.count(a.agent_id) || busy_hosts.count(a.host)) continue;
        agent_session_[a.agent_id] = s.rec.info().session_id();
        s.retired.erase(a.agent_id);  // an agent we stopped earlier, free again: it speaks again
        Renew(r);
        r.agent_id = a.agent_id;
        r.host = a.host;
        r.pid = a.pid;
        r.state = RankState::kIdle;
        s.rec.set_hosts(rank, a.host);
        found = true;
        break;
      }
      if (!found) {
        return Unavailable("no idle agent on a usable host is registered for rank " + std::to_string(rank) +
                           "; start another firedrill-agent pointed at this controller");
      }
      continue;
    }
    FD_RETURN_IF_ERROR(LaunchRank(s, lock, rank, s.rec.hosts(rank)));
    waiting.push_back(r.agent_id);
  }
  if (waiting.empty()) return Status::Ok();
  // Wait in slices so that an agent that dies before registering (bad
  // binary, crash at start) fails the wait at once, with its exit status.
  const auto deadline = std::chrono::steady_clock::now() + opts_.agent_register_timeout;
  while (true) {
    lock.unlock();
    auto got = pool_->WaitFor(waiting, std::chrono::milliseconds(200));
    lock.lock();
    if (got.ok()) break;
    for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
      const Rank& r = s.ranks[rank];
      if (r.state == RankState::kLost && std::find(waiting.begin(), waiting.end(), r.agent_id) != waiting.end()) {
        return Unavailable("the agent for rank " + std::to_string(rank) + " " + r.message + " before registering; see " +
                           opts_.state_dir + "/logs/" + r.agent_id + ".log");
      }
    }
    if (s.end_requested) return Aborted("session ended");
    if (std::chrono::steady_clock::now() > deadline) {
      return DeadlineExceeded("agents did not register within " +
                              std::to_string(opts_.agent_register_timeout.count()) + " s; see their logs in " +
                              opts_.state_dir + "/logs");
    }
  }
  for (auto& r : s.ranks) {
    if (r.state == RankState::kStarting) r.state = RankState::kIdle;
  }
  return Status::Ok();
}

void SessionManager::StartRun(Session& s, RunKind kind, int64_t steps, bool with_faults,
                              const v1::JobSpec* job_spec, bool restart) {
  // The baseline's and the drill's own curves stay readable after them.
  if (!restart && s.run && (s.run->kind == RunKind::kBaseline || s.run->kind == RunKind::kMain)) {
    std::vector<History>& kept = s.kept_history[Name(s.run->kind)];
    kept.clear();
    for (Rank& r : s.ranks) kept.push_back(std::move(r.history));
  }
  Run run;
  run.id = s.rec.info().session_id() + "-" + Name(kind) + "-" + std::to_string(++s.run_counter);
  run.kind = kind;
  run.steps_total = steps;
  run.last_progress = std::chrono::steady_clock::now();
  s.run = run;
  const std::vector<v1::ResolvedFault> all(s.rec.faults().begin(), s.rec.faults().end());
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    Rank& r = s.ranks[rank];
    r.steps.clear();
    if (!restart) r.history = History{};
    r.history.host = rank < s.rec.hosts_size() ? s.rec.hosts(rank) : r.host;
    r.message.clear();
    v1::ControllerMessage msg;
    v1::RunJob* job = msg.mutable_run();
    job->set_run_id(run.id);
    job->set_rank(rank);
    *job->mutable_job() = job_spec ? *job_spec : s.rec.job();
    job->set_seed(s.rec.info().seed());
    job->set_max_steps(steps);
    job->set_dump_flight_recorder(ToolOffered(s, "flight_recorder").ok());
    job->set_ranks_share_host(std::all_of(s.rec.hosts().begin(), s.rec.hosts().end(),
                                          [&](const std::string& h) { return h == s.rec.hosts(0); }));
    if (with_faults) {
      std::vector<v1::ResolvedFault> mine = faults::FaultsFor(all, rank, r.host);
      // A one-off event that has happened (the drill's run got past its
      // trigger step) is not sent again: its damage stays where it was
      // done. One that has not is the incident the briefing describes: it
      // happens whatever a fix did before it, so verification meets it on
      // its rank, whichever host the rank was moved to (a fix sent before
      // the incident fixes nothing).
      auto happened = [&](const v1::ResolvedFault& f) { return s.main_newest_step + 1 >= f.trigger_step(); };
      auto once = [](const v1::ResolvedFault& f) {
        const faults::FaultKind* fk = faults::FindFaultKind(f.kind());
        return fk != nullptr && fk->once;
      };
      if (kind != RunKind::kMain)
        for (const auto& f : all)
          if (once(f) && !happened(f) && f.rank() == rank && f.host() != r.host) mine.push_back(f);
      for (auto f : mine) {
        if (once(f) && happened(f)) continue;
        // A fault that belongs to a host is already there when a later run
        // starts on that host: the same window (and flapping), from step 0.
        if (kind != RunKind::kMain) {
          if (f.until_step() > 0) f.set_until_step(f.until_step() - f.trigger_step());
          f.set_trigger_step(0);
        }
        *job->add_faults() = f;
      }
    }
    if (r.state == RankState::kLost || r.state == RankState::kRetired) continue;
    r.state = RankState::kRunning;
    if (!pool_->Send(r.agent_id, msg)) MarkRankLost(s, rank, "could not reach its agent");
  }
  AddEvent(s, "run_started", -1,
           std::string(Name(kind)) + (restart ? " run restarted" : " run started") +
               (kind != RunKind::kMain ? ": " + std::to_string(steps) + " steps" : ""));
}

void SessionManager::UpdateRunState(Session& s) {
  if (!s.run || !RunOver(s)) return;
  if (s.run->state != RunState::kStarting && s.run->state != RunState::kRunning) return;
  bool all_finished = true;
  for (const auto& r : s.ranks) all_finished = all_finished && r.state == RankState::kFinished;
  s.run->state = all_finished ? RunState::kFinished : RunState::kFailed;
}

bool SessionManager::RunOver(const Session& s) const {
  for (const auto& r : s.ranks) {
    if (r.state == RankState::kRunning || r.state == RankState::kStarting) return false;
  }
  return true;
}

// Runs a job to its end. OK only if every rank finished.
Status SessionManager::RunJob(Session& s, Lock& lock, RunKind kind, int64_t steps, bool with_faults,
                              const v1::JobSpec* job_spec) {
  StartRun(s, kind, steps, with_faults, job_spec);
  // Steps take milliseconds here: half a minute without one is a hang, even
  // when the job's own collective timeout (possibly PyTorch's 30 min) has
  // not expired yet.
  const v1::JobSpec& job = job_spec ? *job_spec : s.rec.job();
  const auto hang_after = std::chrono::duration<double>(std::min(job.comm().timeout_s() + 15.0, 30.0));
  while (!s.end_requested && !RunOver(s)) {
    s.cv.wait_for(lock, std::chrono::milliseconds(500));
    if (std::chrono::steady_clock::now() - s.run->last_progress > hang_after) {
      AddEvent(s, "run_hung", -1,
               std::string(Name(kind)) + " run made no progress for " + Num(hang_after.count()) + " s; stopping its agents");
      for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
        if (s.ranks[rank].state == RankState::kRunning) RetireAgent(s, lock, rank);
      }
      break;
    }
  }
  if (s.end_requested) {
    StopRun(s, lock);
    return Aborted("session ended");
  }
  std::string failures;
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    const Rank& r = s.ranks[rank];
    if (r.state != RankState::kFinished) {
      failures += (failures.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " " + Name(r.state) +
                  (r.message.empty() ? "" : ": " + r.message);
    }
  }
  UpdateRunState(s);
  if (!failures.empty()) StopRun(s, lock);
  return failures.empty() ? Status::Ok() : Aborted(failures);
}

// Asks every running rank to stop (they agree on a step through the
// all-reduce) and waits; an agent that does not answer in time is killed.
void SessionManager::StopRun(Session& s, Lock& lock, double grace_s) {
  if (!s.run) return;
  v1::ControllerMessage msg;
  msg.mutable_stop()->set_run_id(s.run->id);
  for (auto& r : s.ranks) {
    if (r.state == RankState::kRunning) pool_->Send(r.agent_id, msg);
  }
  // A healthy rank stops after its current step; one stuck in a collective
  // never will, and is killed like an operator would kill a hung job. A
  // controller that is shutting down waits a moment only: its supervisor
  // (systemd, `firedrill down`) will not wait the full collective timeout.
  const auto limit = std::chrono::duration<double>(
      shutting_down_ ? 2.0 : grace_s >= 0 ? grace_s : std::min(s.rec.job().comm().timeout_s() + 5.0, 15.0));
  s.cv.wait_for(lock, limit, [&] { return RunOver(s); });
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    if (s.ranks[rank].state == RankState::kRunning) {
      AddEvent(s, "rank_unresponsive", rank, "rank " + std::to_string(rank) + " did not stop; its agent was killed");
      RetireAgent(s, lock, rank);
    }
  }
  if (s.run->state == RunState::kStarting || s.run->state == RunState::kRunning) s.run->state = RunState::kStopped;
}

// Stops a rank's agent on purpose (replace host, hung, teardown). A local
// agent is killed; a remote one is told to stop its run and is not handed a
// new job until it reports that run over (the pool tracks that).
void SessionManager::RetireAgent(Session& s, Lock& lock, int rank) { RetireAgent(s, lock, s.ranks[rank]); }

void SessionManager::RetireAgent(Session& s, Lock& lock, Rank& r) {
  if (r.agent_id.empty()) return;
  s.retired.insert(r.agent_id);
  const std::string id = r.agent_id;
  if (!launcher_ && s.run && (r.state == RankState::kRunning || r.state == RankState::kStarting)) {
    v1::ControllerMessage msg;
    msg.mutable_stop()->set_run_id(s.run->id);
    pool_->Send(id, msg);
  }
  if (launcher_) launcher_->Kill(id);
  r.state = RankState::kRetired;
  r.message.clear();
  pool_->Forget(id);
  if (launcher_) {
    lock.unlock();
    for (int i = 0; i < 100 && launcher_->Running(id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.lock();
  }
  std::lock_guard<std::mutex> g(mu_);
  agent_session_.erase(id);
}

void SessionManager::Teardown(Session& s, Lock& lock) {
  // Nothing is measured after this: a healthy rank stops within a step or
  // two, and a hung one is killed after 3 s instead of the collective
  // timeout (a learner's `end` on a hung drill took 15 s).
  if (s.run) StopRun(s, lock, /*grace_s=*/3.0);
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    RetireAgent(s, lock, rank);  // lost ones too: their process may linger
    s.ranks[rank].state = RankState::kStopped;
  }
  // The agents are gone, so are their hosts, and the CPU quotas of those
  // that were killed in a slowed run.
  (void)faults::CpuQuota::CleanLeftovers();
  const std::string prefix = s.rec.info().session_id() + "/";
  for (const std::string& key : std::set<std::string>(s.netns_hosts)) RemoveHost(s, key.substr(prefix.size()));
  Save(s);
}

// ---------------------------------------------------------- agent reports

void SessionManager::OnSteps(const std::string& agent_id, const v1::StepBatch& batch) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mu);
  if (!s->run || s->run->id != batch.run_id()) return;
  for (const auto& step : batch.steps()) {
    if (step.rank() < 0 || step.rank() >= static_cast<int>(s->ranks.size())) continue;
    Rank& r = s->ranks[step.rank()];
    if (r.agent_id != agent_id) continue;  // an agent reports for its own rank only
    r.steps.push_back(step);
    if (s->run->first_step < 0 || step.step() < s->run->first_step) s->run->first_step = step.step();
    AppendHistory(step, opts_.history_rows, &r.history);
    // Keep the newest: drop the older half when the cap is reached, so the
    // cost per report stays constant.
    if (r.steps.size() >= 2 * opts_.steps_kept) r.steps.erase(r.steps.begin(), r.steps.end() - opts_.steps_kept);
    r.last_step_at = std::chrono::steady_clock::now();
    if (s->run->kind == RunKind::kMain) s->main_newest_step = std::max(s->main_newest_step, step.step());
    if (s->run->kind == RunKind::kMain && s->rec.fault_onset_unix_ms() == 0)
      s->rec.set_fault_onset_unix_ms(FaultOnsetUnixMs(s->rec.faults(), step));
  }
  s->run->state = RunState::kRunning;
  s->run->last_progress = std::chrono::steady_clock::now();
}

void SessionManager::OnJobEvent(const std::string& agent_id, const v1::JobEvent& ev) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  std::unique_lock<std::mutex> lock(s->mu);
  if (!s->run || s->run->id != ev.run_id()) return;
  if (ev.rank() < 0 || ev.rank() >= static_cast<int>(s->ranks.size())) return;
  Rank& r = s->ranks[ev.rank()];
  // An agent may only speak for its own rank, and one we retired (killed,
  // told to stop) no longer speaks: its last words may race its removal.
  if (r.agent_id != agent_id || s->retired.count(agent_id)) return;
  s->run->last_progress = std::chrono::steady_clock::now();
  switch (ev.kind()) {
    case v1::JobEvent::STORE_READY: {
      if (ev.rank() != 0) break;
      v1::ControllerMessage msg;
      auto* rv = msg.mutable_rendezvous();
      rv->set_run_id(ev.run_id());
      rv->set_store_host(ev.store_host());
      rv->set_store_port(ev.store_port());
      for (size_t i = 1; i < s->ranks.size(); ++i) pool_->Send(s->ranks[i].agent_id, msg);
      break;
    }
    case v1::JobEvent::STARTED:
      break;
    case v1::JobEvent::FINISHED:
      r.state = RankState::kFinished;
      break;
    case v1::JobEvent::FAILED:
      r.state = RankState::kFailed;
      r.message = ev.message();
      if (s->run->first_failed_rank < 0) s->run->first_failed_rank = ev.rank();
      AddEvent(*s, "rank_failed", ev.rank(), ev.message());
      break;
    default:
      break;
  }
  UpdateRunState(*s);
  lock.unlock();
  s->cv.notify_all();
}

void SessionManager::MarkRankLost(Session& s, int rank, const std::string& why) {
  Rank& r = s.ranks[rank];
  if (r.state == RankState::kLost) {
    r.message = why;  // a process exit explains more than a closed stream
    return;
  }
  r.state = RankState::kLost;
  r.message = why;
  if (s.run && s.run->first_failed_rank < 0) s.run->first_failed_rank = rank;
  UpdateRunState(s);
  AddEvent(s, "rank_lost", rank,
           "rank " + std::to_string(rank) + " (host " + r.host + ", pid " + std::to_string(r.pid) + ") lost: " + why);
  // Its peers are stuck in (or about to enter) a collective with it.
  if (s.run) {
    v1::ControllerMessage msg;
    msg.mutable_stop()->set_run_id(s.run->id);
    for (auto& other : s.ranks) {
      if (other.state == RankState::kRunning) pool_->Send(other.agent_id, msg);
    }
  }
}

void SessionManager::OnAgentGone(const std::string& agent_id, const std::string& reason) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (s->retired.count(agent_id)) return;
    for (int rank = 0; rank < static_cast<int>(s->ranks.size()); ++rank) {
      if (s->ranks[rank].agent_id == agent_id) MarkRankLost(*s, rank, reason);
    }
  }
  s->cv.notify_all();
}

void SessionManager::OnAgentExit(const std::string& agent_id, int pid, const std::string& how) {
  OnAgentGone(agent_id, "agent process " + how);
}

void SessionManager::Renew(Rank& r) {
  History curve = std::move(r.history);
  r = Rank{};
  r.history = std::move(curve);
}

std::vector<std::vector<v1::StepReport>> SessionManager::StepsByRank(const Session& s) const {
  std::vector<std::vector<v1::StepReport>> out;
  for (const auto& r : s.ranks) out.push_back(r.steps);
  return out;
}


}  // namespace firedrill::controller
