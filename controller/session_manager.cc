#include "controller/session_manager.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "common/clock.h"
#include "common/log.h"
#include "common/paths.h"
#include "controller/run_metrics.h"
#include "controller/scenario_loader.h"
#include "controller/scorer.h"
#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

// Locking: mu_ guards the maps only and is never held while a session's
// mutex is taken; a session's mutex may be held while mu_ is taken briefly.

namespace {

int64_t NowMs() { return UnixNowMs(); }

bool Terminal(const std::string& state) { return state == "scored" || state == "aborted"; }

std::string NewSessionId() {
  static std::mt19937_64 rng(std::random_device{}());
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "s-%06llx", static_cast<unsigned long long>(rng() & 0xffffff));
  return buf;
}

std::string Fmt(double v, int prec = 0) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

int RunLength(const v1::Scenario& sc) { return sc.verify().warmup_steps() + sc.verify().window_steps(); }

// Where a session's job writes checkpoints when its scenario names no
// directory: beside the controller's other state, one directory per session,
// absolute because the agents run in their own working directories.
std::string SessionCheckpointDir(const std::string& state_dir, const std::string& session_id) {
  std::error_code ec;
  std::filesystem::path root = std::filesystem::absolute(state_dir, ec);
  if (ec) root = state_dir;
  return (root / "sessions" / session_id / "checkpoints").lexically_normal().string();
}

}  // namespace

SessionManager::SessionManager(SessionManagerOptions opts, Store* store, AgentPool* pool,
                               std::vector<v1::Scenario> scenarios)
    : opts_(std::move(opts)), store_(store), pool_(pool), scenarios_(std::move(scenarios)) {
  pool_->SetListener(this);
}

void SessionManager::SetAgentDialAddress(const std::string& addr) {
  opts_.agent_dial_addr = addr;
  if (opts_.local_launcher) {
    launcher_ = std::make_unique<Launcher>(
        opts_.agent_bin, addr, opts_.state_dir + "/logs",
        [this](const std::string& id, pid_t pid, const std::string& how) { OnAgentExit(id, pid, how); });
  }
}

SessionManager::~SessionManager() { Shutdown(); }

Status SessionManager::Init() {
  auto recs = store_->LoadSessions();
  if (!recs.ok()) return recs.status();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& rec : *recs) {
    auto s = std::make_shared<Session>();
    s->rec = rec;
    s->scenario = FindScenario(rec.info().scenario_id());
    auto events = store_->LoadEvents(rec.info().session_id(), 50);
    if (events.ok()) s->events.assign(events->begin(), events->end());
    if (!Terminal(rec.info().state())) {
      AddEvent(*s, "aborted", -1,
               "the controller stopped while this session was in state '" + rec.info().state() +
                   "'; its job and agents were lost. Start a new session.");
      SetState(*s, "aborted");
    }
    sessions_[rec.info().session_id()] = s;
  }
  spdlog::info("loaded {} session(s) from {}", sessions_.size(), store_->path());
  return Status::Ok();
}

void SessionManager::Shutdown() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [id, s] : sessions_) all.push_back(s);
  }
  for (auto& s : all) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->end_requested = true;
    }
    s->cv.notify_all();
  }
  for (auto& s : all) {
    if (s->driver.joinable()) s->driver.join();
  }
  launcher_.reset();  // kills and reaps anything left
}

const v1::Scenario* SessionManager::FindScenario(const std::string& id) const {
  for (const auto& sc : scenarios_) {
    if (sc.id() == id) return &sc;
  }
  return nullptr;
}

std::vector<v1::ScenarioSummary> SessionManager::ListScenarios() const {
  std::vector<v1::ScenarioSummary> out;
  for (const auto& sc : scenarios_) {
    v1::ScenarioSummary s;
    s.set_id(sc.id());
    s.set_title(sc.title());
    s.set_band(sc.band());
    s.set_world_size(sc.job().world_size());
    // No skills and no runbook here: a drill's skill atoms name its topic
    // and there is one runbook per fault kind, so either gives the answer
    // away. Instructors read skills with `firedrill scenarios coverage`
    // (from the files); the score names the runbook.
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<std::shared_ptr<SessionManager::Session>> SessionManager::Find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return NotFound("no session '" + id + "'; `firedrill sessions` lists them");
  }
  return it->second;
}

std::shared_ptr<SessionManager::Session> SessionManager::SessionOfAgent(const std::string& agent_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = agent_session_.find(agent_id);
  if (it == agent_session_.end()) return nullptr;
  auto s = sessions_.find(it->second);
  return s == sessions_.end() ? nullptr : s->second;
}

StatusOr<v1::SessionInfo> SessionManager::Start(const v1::StartSessionRequest& req) {
  const v1::Scenario* sc = FindScenario(req.scenario_id());
  if (sc == nullptr) {
    std::string ids;
    for (const auto& s : scenarios_) ids += (ids.empty() ? "" : ", ") + s.id();
    return NotFound("unknown scenario '" + req.scenario_id() + "'; available: " + ids);
  }
  auto s = std::make_shared<Session>();
  s->scenario = sc;
  auto& info = *s->rec.mutable_info();
  info.set_session_id(NewSessionId());
  info.set_scenario_id(sc->id());
  info.set_title(sc->title());
  info.set_briefing(sc->briefing());
  info.set_seed(req.seed() != 0 ? req.seed() : static_cast<int64_t>(std::random_device{}() % 1000000 + 1));
  info.set_created_unix_ms(NowMs());
  info.set_world_size(sc->job().world_size());
  info.set_max_score(sc->rubric().cause() + sc->rubric().culprit() + sc->rubric().fix() + sc->rubric().time());
  info.set_state("created");
  *s->rec.mutable_job() = sc->job();
  if (s->rec.job().checkpoint().dir().empty()) {
    const std::string dir = SessionCheckpointDir(opts_.state_dir, info.session_id());
    std::string err;
    if (!MakeDirs(dir, &err)) return Internal("session checkpoint directory: " + err);
    s->rec.mutable_job()->mutable_checkpoint()->set_dir(dir);
  }
  s->ranks.resize(sc->job().world_size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return Unavailable("the controller is shutting down");
    sessions_[info.session_id()] = s;
  }
  {
    std::lock_guard<std::mutex> lock(s->mu);
    Save(*s);  // the row first: events reference it
    AddEvent(*s, "created", -1, "session created for scenario " + sc->id() + " (seed " + std::to_string(info.seed()) + ")");
  }
  const v1::SessionInfo out = info;
  s->driver = std::thread([this, s] { Drive(s); });
  return out;
}

std::vector<v1::SessionInfo> SessionManager::List() {
  std::vector<std::shared_ptr<Session>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : sessions_) all.push_back(s);
  }
  std::vector<v1::SessionInfo> out;
  for (auto& s : all) {
    std::lock_guard<std::mutex> lock(s->mu);
    out.push_back(s->rec.info());
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.created_unix_ms() < b.created_unix_ms(); });
  return out;
}

// ---------------------------------------------------------------- driver

void SessionManager::Drive(std::shared_ptr<Session> sp) {
  Session& s = *sp;
  Lock lock(s.mu);
  const v1::Scenario& sc = *s.scenario;
  auto abort = [&](const std::string& why) {
    AddEvent(s, "aborted", -1, why);
    Teardown(s, lock);
    SetState(s, "aborted");
  };

  // Agents: one host each, named like a small cluster.
  for (int r = 0; r < sc.job().world_size(); ++r) {
    s.rec.add_hosts("node-" + std::to_string(s.rec.next_host_index()));
    s.rec.set_next_host_index(s.rec.next_host_index() + 1);
  }
  if (Status st = EnsureAgents(s, lock); !st.ok()) return abort("could not start the job's agents: " + st.message());
  if (s.end_requested) return abort("ended before the job started");

  // Fix every draw now; the answer key is sealed in the record.
  std::vector<std::string> hosts(s.rec.hosts().begin(), s.rec.hosts().end());
  auto faults = faults::ResolveFaults(sc, static_cast<uint64_t>(s.rec.info().seed()), hosts);
  if (!faults.ok()) return abort("scenario error: " + faults.status().message());
  for (auto& f : *faults) *s.rec.add_faults() = f;
  s.rec.set_answer_cause(sc.answer().cause());
  for (const auto& ref : sc.answer().culprit_ranks()) {
    auto r = faults::ResolveRankRef(ref, *faults);
    if (!r.ok()) return abort("scenario error: " + r.status().message());
    s.rec.add_answer_culprit_ranks(*r);
  }

  // Healthy baseline of the same job on this machine, faults off.
  SetState(s, "baseline");
  if (Status st = RunJob(s, lock, "baseline", RunLength(sc), false); !st.ok()) {
    return abort("baseline run failed: " + st.message());
  }
  if (s.end_requested) return abort("ended during the baseline");
  const WindowStats base = MeasureWindow(StepsByRank(s), sc.verify().warmup_steps(), sc.verify().window_steps(),
                                         sc.job().world_size() * sc.job().data().batch_size());
  v1::RunSummary summary = Summarize(s, sc.verify().window_steps());
  summary.set_throughput_samples_per_s(base.throughput_samples_per_s);
  summary.set_median_step_ms(base.median_step_ms);
  summary.set_rank_step_skew(base.rank_step_skew);
  *s.rec.mutable_baseline() = summary;
  AddEvent(s, "baseline", -1,
           "healthy baseline: " + Fmt(base.throughput_samples_per_s) + " samples/s, median step " +
               Fmt(base.median_step_ms, 1) + " ms, rank busy-time skew " + Fmt(base.rank_step_skew, 2) + " over " +
               std::to_string(base.steps) + " steps");

  // The drill: the real job, faults armed. A fault may come with a bad
  // deploy of the job's settings; from here on that is the job's config,
  // which the learner's fix settings then change.
  s.healthy_job = s.rec.job();
  faults::ApplyFaultsToJob(*faults, s.rec.mutable_job());
  SetState(s, "running");
  s.rec.set_run_started_unix_ms(NowMs());
  Save(s);
  StartRun(s, "main", s.rec.job().steps(), true);
  s.cv.wait(lock, [&] { return s.end_requested || s.pending_fix.has_value(); });
  if (s.end_requested) return abort("ended by the learner before a fix was applied");

  // The learner's fix, then a measured verification run.
  SetState(s, "fixing");
  StopRun(s, lock);
  const v1::ApplyFixRequest fix = *s.pending_fix;
  for (int rank : fix.replace_host_ranks()) {
    const std::string old_host = s.rec.hosts(rank);
    const std::string new_host = "node-" + std::to_string(s.rec.next_host_index());
    s.rec.set_next_host_index(s.rec.next_host_index() + 1);
    RetireAgent(s, lock, rank);
    s.replaced_hosts.insert(old_host);
    s.rec.set_hosts(rank, new_host);
    AddEvent(s, "host_replaced", rank, "rank " + std::to_string(rank) + " moved from " + old_host + " to " + new_host);
  }
  for (const auto& kv : fix.settings()) {
    // Validated when the fix was accepted.
    (void)ApplyJobSetting(s.rec.mutable_job(), kv.key(), kv.value());
  }
  if (Status st = EnsureAgents(s, lock); !st.ok()) return abort("could not restart the job's agents: " + st.message());
  if (s.end_requested) return abort("ended while the fix was being applied");

  SetState(s, "verifying");
  Status vst = RunJob(s, lock, "verify", RunLength(sc), true);
  if (s.end_requested) return abort("ended during verification");
  auto measure = [&] {
    return MeasureWindow(StepsByRank(s), sc.verify().warmup_steps(), sc.verify().window_steps(),
                         s.rec.job().world_size() * s.rec.job().data().batch_size());
  };
  WindowStats ver;
  if (vst.ok()) ver = measure();
  v1::Verification v = Verify(s.rec.baseline(), ver, sc.verify());
  // The baseline was measured minutes ago, on cores that other work
  // shares: when only throughput misses while the ranks are balanced, the
  // machine itself may be slower now. Measure the healthy job and the fix
  // again, back to back, and judge the fix against that baseline: both see
  // the same machine, and a fix that did not work stays slow beside it.
  if (vst.ok() && !v.passed() && ver.rank_step_skew <= sc.verify().rank_step_skew_max()) {
    AddEvent(s, "verification_remeasure", -1,
             "throughput below the floor with balanced ranks (" + v.detail() +
                 "); measuring the healthy job and the fix again, back to back");
    Status bst = RunJob(s, lock, "baseline", RunLength(sc), false, &s.healthy_job);
    if (s.end_requested) return abort("ended during verification");
    v1::RunSummary fresh = s.rec.baseline();
    if (!bst.ok()) {
      AddEvent(s, "baseline", -1, "re-measuring the healthy job failed (" + bst.message() +
                                      "); the fix is judged against the first baseline");
    } else {
      const WindowStats b = MeasureWindow(StepsByRank(s), sc.verify().warmup_steps(), sc.verify().window_steps(),
                                          s.healthy_job.world_size() * s.healthy_job.data().batch_size());
      if (b.steps > 0) {
        fresh.set_throughput_samples_per_s(b.throughput_samples_per_s);
        fresh.set_median_step_ms(b.median_step_ms);
        fresh.set_rank_step_skew(b.rank_step_skew);
        AddEvent(s, "baseline", -1,
                 "healthy job re-measured: " + Fmt(b.throughput_samples_per_s) + " samples/s (first baseline " +
                     Fmt(s.rec.baseline().throughput_samples_per_s()) + ")");
      }
    }
    vst = RunJob(s, lock, "verify", RunLength(sc), true);
    if (s.end_requested) return abort("ended during verification");
    if (vst.ok()) ver = measure();
    v = Verify(fresh, ver, sc.verify());
  }
  if (!vst.ok()) {
    v.set_passed(false);
    v.set_detail("the verification run did not complete: " + vst.message());
  }
  *s.rec.mutable_verification() = v;
  AddEvent(s, v.passed() ? "verification_passed" : "verification_failed", -1, v.detail());

  const v1::ScoreReport score = ComputeScore(s);
  s.rec.mutable_info()->set_total_score(score.total());
  if (Status st = store_->SaveScore(score, NowMs()); !st.ok()) spdlog::error("{}", st.message());
  AddEvent(s, "scored", -1, "score " + std::to_string(score.total()) + "/" + std::to_string(score.max_total()));
  Teardown(s, lock);  // before "scored", so a scored session has no agents left
  SetState(s, "scored");
}

Status SessionManager::LaunchRank(Session& s, Lock& lock, int rank, const std::string& host) {
  const std::string agent_id =
      s.rec.info().session_id() + "-a" + std::to_string(s.agent_counter++);
  {
    std::lock_guard<std::mutex> g(mu_);
    agent_session_[agent_id] = s.rec.info().session_id();
  }
  Rank& r = s.ranks[rank];
  r = Rank{};
  r.agent_id = agent_id;
  r.host = host;
  r.state = "starting";
  auto pid = launcher_->Launch(agent_id, host);
  if (!pid.ok()) return pid.status();
  r.pid = *pid;
  return Status::Ok();
}

// Makes sure every rank has a live, registered agent: ranks with none (new
// session, replaced host, lost agent) get one on their host.
Status SessionManager::EnsureAgents(Session& s, Lock& lock) {
  std::vector<std::string> waiting;
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    Rank& r = s.ranks[rank];
    if (!r.agent_id.empty() && r.state != "lost" && r.state != "retired") continue;
    if (!opts_.local_launcher) {
      // Remote agents: take an idle registered agent, never one on a host
      // the learner asked to replace, nor one already holding a rank here.
      std::set<std::string> busy_hosts = s.replaced_hosts;
      for (const auto& other : s.ranks) {
        if (!other.agent_id.empty() && other.state != "lost" && other.state != "retired") busy_hosts.insert(other.host);
      }
      bool found = false;
      for (const auto& a : pool_->Connected()) {
        std::lock_guard<std::mutex> g(mu_);
        if (agent_session_.count(a.agent_id) || busy_hosts.count(a.host)) continue;
        agent_session_[a.agent_id] = s.rec.info().session_id();
        r = Rank{};
        r.agent_id = a.agent_id;
        r.host = a.host;
        r.pid = a.pid;
        r.state = "idle";
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
      if (r.state == "lost" && std::find(waiting.begin(), waiting.end(), r.agent_id) != waiting.end()) {
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
    if (r.state == "starting") r.state = "idle";
  }
  return Status::Ok();
}

void SessionManager::StartRun(Session& s, const std::string& kind, int64_t steps, bool with_faults,
                              const v1::JobSpec* job_spec) {
  Run run;
  run.id = s.rec.info().session_id() + "-" + kind + "-" + std::to_string(++s.run_counter);
  run.kind = kind;
  run.steps_total = steps;
  run.last_progress = std::chrono::steady_clock::now();
  s.run = run;
  const std::vector<v1::ResolvedFault> all(s.rec.faults().begin(), s.rec.faults().end());
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    Rank& r = s.ranks[rank];
    r.steps.clear();
    r.message.clear();
    v1::ControllerMessage msg;
    v1::RunJob* job = msg.mutable_run();
    job->set_run_id(run.id);
    job->set_rank(rank);
    *job->mutable_job() = job_spec ? *job_spec : s.rec.job();
    job->set_seed(s.rec.info().seed());
    job->set_max_steps(steps);
    if (with_faults) {
      for (auto f : faults::FaultsFor(all, rank, r.host)) {
        // A fault that belongs to a host is already there when a later run
        // starts on that host.
        if (kind != "main") f.set_trigger_step(0);
        *job->add_faults() = f;
      }
    }
    if (r.state == "lost" || r.state == "retired") continue;
    r.state = "running";
    if (!pool_->Send(r.agent_id, msg)) MarkRankLost(s, rank, "could not reach its agent");
  }
  AddEvent(s, "run_started", -1, kind + " run started: " + std::to_string(steps) + " steps");
}

void SessionManager::UpdateRunState(Session& s) {
  if (!s.run || !RunOver(s)) return;
  if (s.run->state != "starting" && s.run->state != "running") return;
  bool all_finished = true;
  for (const auto& r : s.ranks) all_finished = all_finished && r.state == "finished";
  s.run->state = all_finished ? "finished" : "failed";
}

bool SessionManager::RunOver(const Session& s) const {
  for (const auto& r : s.ranks) {
    if (r.state == "running" || r.state == "starting") return false;
  }
  return true;
}

// Runs a job to its end. OK only if every rank finished.
Status SessionManager::RunJob(Session& s, Lock& lock, const std::string& kind, int64_t steps, bool with_faults,
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
               kind + " run made no progress for " + Fmt(hang_after.count()) + " s; stopping its agents");
      for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
        if (s.ranks[rank].state == "running") RetireAgent(s, lock, rank);
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
    if (r.state != "finished") {
      failures += (failures.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " " + r.state +
                  (r.message.empty() ? "" : ": " + r.message);
    }
  }
  UpdateRunState(s);
  if (!failures.empty()) StopRun(s, lock);
  return failures.empty() ? Status::Ok() : Aborted(failures);
}

// Asks every running rank to stop (they agree on a step through the
// all-reduce) and waits; an agent that does not answer in time is killed.
void SessionManager::StopRun(Session& s, Lock& lock) {
  if (!s.run) return;
  v1::ControllerMessage msg;
  msg.mutable_stop()->set_run_id(s.run->id);
  for (auto& r : s.ranks) {
    if (r.state == "running") pool_->Send(r.agent_id, msg);
  }
  // A healthy rank stops after its current step; one stuck in a collective
  // never will, and is killed like an operator would kill a hung job.
  const auto limit = std::chrono::duration<double>(std::min(s.rec.job().comm().timeout_s() + 5.0, 15.0));
  s.cv.wait_for(lock, limit, [&] { return RunOver(s); });
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    if (s.ranks[rank].state == "running") {
      AddEvent(s, "rank_unresponsive", rank, "rank " + std::to_string(rank) + " did not stop; its agent was killed");
      RetireAgent(s, lock, rank);
    }
  }
  if (s.run->state == "starting" || s.run->state == "running") s.run->state = "stopped";
}

// Stops a rank's agent on purpose (replace host, hung, teardown).
void SessionManager::RetireAgent(Session& s, Lock& lock, int rank) {
  Rank& r = s.ranks[rank];
  if (r.agent_id.empty()) return;
  s.retired.insert(r.agent_id);
  if (launcher_) launcher_->Kill(r.agent_id);
  r.state = "retired";
  r.message.clear();
  const std::string id = r.agent_id;
  if (launcher_) {
    lock.unlock();
    for (int i = 0; i < 100 && launcher_->Running(id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lock.lock();
  }
  std::lock_guard<std::mutex> g(mu_);
  agent_session_.erase(id);
}

void SessionManager::Teardown(Session& s, Lock& lock) {
  if (s.run) StopRun(s, lock);
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    RetireAgent(s, lock, rank);  // lost ones too: their process may linger
    s.ranks[rank].state = "stopped";
  }
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
    s->ranks[step.rank()].steps.push_back(step);
    s->ranks[step.rank()].last_step_at = std::chrono::steady_clock::now();
    if (s->run->kind == "main" && s->rec.fault_onset_unix_ms() == 0)
      s->rec.set_fault_onset_unix_ms(FaultOnsetUnixMs(s->rec.faults(), step));
  }
  s->run->state = "running";
  s->run->last_progress = std::chrono::steady_clock::now();
}

void SessionManager::OnJobEvent(const std::string& agent_id, const v1::JobEvent& ev) {
  auto s = SessionOfAgent(agent_id);
  if (!s) return;
  std::unique_lock<std::mutex> lock(s->mu);
  if (!s->run || s->run->id != ev.run_id()) return;
  if (ev.rank() < 0 || ev.rank() >= static_cast<int>(s->ranks.size())) return;
  Rank& r = s->ranks[ev.rank()];
  s->run->last_progress = std::chrono::steady_clock::now();
  switch (ev.kind()) {
    case v1::JobEvent::STORE_READY: {
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
      r.state = "finished";
      break;
    case v1::JobEvent::FAILED:
      r.state = "failed";
      r.message = ev.message();
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
  if (r.state == "lost") {
    r.message = why;  // a process exit explains more than a closed stream
    return;
  }
  r.state = "lost";
  r.message = why;
  UpdateRunState(s);
  AddEvent(s, "rank_lost", rank,
           "rank " + std::to_string(rank) + " (host " + r.host + ", pid " + std::to_string(r.pid) + ") lost: " + why);
  // Its peers are stuck in (or about to enter) a collective with it.
  if (s.run) {
    v1::ControllerMessage msg;
    msg.mutable_stop()->set_run_id(s.run->id);
    for (auto& other : s.ranks) {
      if (other.state == "running") pool_->Send(other.agent_id, msg);
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

// ------------------------------------------------------------ public API

std::vector<std::vector<v1::StepReport>> SessionManager::StepsByRank(const Session& s) const {
  std::vector<std::vector<v1::StepReport>> out;
  for (const auto& r : s.ranks) out.push_back(r.steps);
  return out;
}

v1::RunSummary SessionManager::Summarize(const Session& s, int window) const {
  v1::RunSummary out;
  if (!s.run) return out;
  out.set_kind(s.run->kind);
  out.set_state(s.run->state);
  out.set_steps_total(s.run->steps_total);
  int64_t done = s.run->steps_total;
  for (const auto& r : s.ranks) done = std::min<int64_t>(done, r.steps.empty() ? 0 : r.steps.back().step() + 1);
  out.set_steps_done(done);
  if (done > 0) {
    const int64_t first = std::max<int64_t>(0, done - window);
    const WindowStats w = MeasureWindow(StepsByRank(s), first, done - first,
                                        s.rec.job().world_size() * s.rec.job().data().batch_size());
    out.set_throughput_samples_per_s(w.throughput_samples_per_s);
    out.set_median_step_ms(w.median_step_ms);
    out.set_rank_step_skew(w.rank_step_skew);
  }
  return out;
}

StatusOr<v1::SubmitDiagnosisResponse> SessionManager::Diagnose(const v1::SubmitDiagnosisRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string& state = s.rec.info().state();
  if (state == "created" || state == "baseline") {
    return FailedPrecondition("session " + req.session_id() +
                              " is still measuring its healthy baseline; diagnose once it is running");
  }
  if (Terminal(state)) {
    return FailedPrecondition("session " + req.session_id() + " is already " + state + "; start a new one");
  }
  if (!faults::IsKnownCause(req.cause())) {
    std::string known;
    for (const auto& c : faults::KnownCauses()) known += (known.empty() ? "" : ", ") + c;
    return InvalidArgument("unknown cause '" + req.cause() + "'; known causes: " + known);
  }
  for (int r : req.culprit_ranks()) {
    if (r < 0 || r >= s.rec.info().world_size()) {
      return OutOfRange("rank " + std::to_string(r) + " is outside this job's ranks 0.." +
                        std::to_string(s.rec.info().world_size() - 1));
    }
  }
  auto id = store_->AddDiagnosis(req, NowMs());
  if (!id.ok()) return id.status();
  std::string ranks;
  for (int r : req.culprit_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  AddEvent(s, "diagnosis", -1, "diagnosis: " + req.cause() + (ranks.empty() ? "" : " on rank " + ranks));
  v1::SubmitDiagnosisResponse resp;
  resp.set_diagnosis_id(*id);
  for (const auto& c : faults::KnownCauses()) resp.add_known_causes(c);
  return resp;
}

StatusOr<v1::ApplyFixResponse> SessionManager::Fix(const v1::ApplyFixRequest& req) {
  auto sp = Find(req.session_id());
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::unique_lock<std::mutex> lock(s.mu);
  const std::string& state = s.rec.info().state();
  if (Terminal(state)) {
    return FailedPrecondition("session " + req.session_id() + " has already ended (" + state +
                              "); start a new session to try again");
  }
  if (state == "fixing" || state == "verifying" || s.pending_fix) {
    return FailedPrecondition("a fix is already being verified for session " + req.session_id() +
                              "; watch `firedrill status`");
  }
  if (state != "running") {
    return FailedPrecondition("session " + req.session_id() + " is still measuring its baseline; fix it once it is running");
  }
  for (int r : req.replace_host_ranks()) {
    if (r < 0 || r >= s.rec.info().world_size()) {
      return OutOfRange("--replace-host " + std::to_string(r) + ": rank outside this job's ranks 0.." +
                        std::to_string(s.rec.info().world_size() - 1));
    }
  }
  v1::JobSpec trial = s.rec.job();
  for (const auto& kv : req.settings()) {
    if (Status st = ApplyJobSetting(&trial, kv.key(), kv.value()); !st.ok()) return st;
    if (trial.world_size() != s.rec.job().world_size()) {
      return InvalidArgument("job.world_size cannot be changed by a fix in this drill");
    }
  }
  auto id = store_->AddFix(req, NowMs());
  if (!id.ok()) return id.status();
  s.rec.set_fix_applied_unix_ms(NowMs());
  s.fix_applied = true;
  s.fix_matches = MatchesRemediation(*s.scenario, s.rec, req);
  s.pending_fix = req;
  std::string what;
  for (int r : req.replace_host_ranks()) what += " replace-host " + std::to_string(r);
  for (const auto& kv : req.settings()) what += " set " + kv.key() + "=" + kv.value();
  AddEvent(s, "fix", -1, "fix applied:" + (what.empty() ? std::string(" (no change)") : what));
  Save(s);
  lock.unlock();
  s.cv.notify_all();
  v1::ApplyFixResponse resp;
  resp.set_fix_id(*id);
  resp.set_state("fixing");
  return resp;
}

StatusOr<v1::RequestHintResponse> SessionManager::Hint(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  if (Terminal(s.rec.info().state())) return FailedPrecondition("session " + id + " has ended");
  const auto& hints = s.scenario->hints();
  if (s.rec.hints_used() >= hints.size()) {
    return FailedPrecondition("no more hints: all " + std::to_string(hints.size()) + " have been used");
  }
  v1::RequestHintResponse resp;
  resp.set_hint(hints.Get(s.rec.hints_used()));
  s.rec.set_hints_used(s.rec.hints_used() + 1);
  resp.set_hints_used(s.rec.hints_used());
  resp.set_hints_total(hints.size());
  resp.set_cost(s.scenario->rubric().hint_cost());
  AddEvent(s, "hint", -1, "hint " + std::to_string(s.rec.hints_used()) + " taken");
  Save(s);
  return resp;
}

v1::ScoreReport SessionManager::ComputeScore(Session& s) {
  ScoreInputs in;
  in.scenario = s.scenario;
  in.record = &s.rec;
  auto d = store_->LatestDiagnosis(s.rec.info().session_id());
  if (d.ok()) in.diagnosis = *d;
  in.fix_applied = s.fix_applied;
  in.fix_matches_remediation = s.fix_matches;
  // The clock starts when the fault did (a fault armed at step 0 starts
  // with the run).
  const int64_t from = s.rec.fault_onset_unix_ms() > 0 ? s.rec.fault_onset_unix_ms() : s.rec.run_started_unix_ms();
  if (from > 0 && s.rec.fix_applied_unix_ms() > 0) {
    in.elapsed_s = std::max<int64_t>(0, s.rec.fix_applied_unix_ms() - from) / 1000.0;
  }
  return Score(in);
}

StatusOr<v1::ScoreReport> SessionManager::GetScore(const std::string& id) {
  auto stored = store_->LoadScore(id);
  if (stored.ok() && stored->has_value()) return **stored;
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.scenario == nullptr) {
    return FailedPrecondition("session " + id + " has no score and its scenario is no longer loaded");
  }
  return ComputeScore(s);  // provisional: final=false until verification ran
}

StatusOr<v1::SessionInfo> SessionManager::End(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.end_requested = true;
  }
  s.cv.notify_all();
  if (s.driver.joinable() && s.driver.get_id() != std::this_thread::get_id()) s.driver.join();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.rec.info();
}

// -------------------------------------------------------------- helpers

void SessionManager::SetState(Session& s, const std::string& state) {
  s.rec.mutable_info()->set_state(state);
  Save(s);
}

void SessionManager::AddEvent(Session& s, const std::string& kind, int rank, const std::string& message) {
  v1::SessionEvent e;
  e.set_unix_ms(NowMs());
  e.set_kind(kind);
  e.set_rank(rank);
  e.set_message(message);
  s.events.push_back(e);
  while (s.events.size() > 50) s.events.pop_front();
  if (Status st = store_->AppendEvent(s.rec.info().session_id(), e); !st.ok()) spdlog::error("{}", st.message());
}

void SessionManager::Save(Session& s) {
  if (Status st = store_->SaveSession(s.rec); !st.ok()) spdlog::error("{}", st.message());
}

}  // namespace firedrill::controller
