#include "controller/session_manager.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "common/clock.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/suggest.h"
#include "controller/draws.h"
#include "controller/run_metrics.h"
#include "controller/scenario_loader.h"
#include "controller/scorer.h"
#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

// Locking: mu_ guards the maps only and is never held while a session's
// mutex is taken; a session's mutex may be held while mu_ is taken briefly.
// A session's join_mu guards its driver thread object; it is taken with
// mu_ held (Start) or alone (End, Shutdown), never the other way round.

bool TerminalState(const std::string& state) { return state == kScored || state == kEnded || state == kAborted; }

namespace {

int64_t NowMs() { return UnixNowMs(); }

std::string RandomHex(int bytes) {
  static std::random_device rd;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::string out;
  char buf[3];
  for (int i = 0; i < bytes; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(rd() & 0xff));
    out += buf;
  }
  return out;
}

std::string Fmt(double v, int prec = 0) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

int RunLength(const v1::Scenario& sc) { return sc.verify().warmup_steps() + sc.verify().window_steps(); }

// The main run trains until the learner fixes it, ends the session or the
// time limit passes; the agent is simply never told to stop on its own.
constexpr int64_t kUnboundedSteps = int64_t{1} << 40;

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
  std::vector<std::string> problems;
  auto recs = store_->LoadSessions(&problems);
  if (!recs.ok()) return recs.status();
  for (const auto& p : problems) spdlog::error("{}", p);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& rec : *recs) {
    auto s = std::make_shared<Session>();
    s->rec = rec;
    s->scenario = FindScenario(rec.info().scenario_id());
    auto events = store_->LoadEvents(rec.info().session_id(), 50);
    if (events.ok()) s->events.assign(events->begin(), events->end());
    if (!TerminalState(rec.info().state())) {
      const std::string why = "the controller stopped while this session was in state '" + rec.info().state() +
                              "'; its job and agents were lost. Start a new session.";
      AddEvent(*s, "aborted", -1, why);
      s->rec.mutable_info()->set_end_reason(why);
      SetState(*s, kAborted);
    }
    sessions_[rec.info().session_id()] = s;
  }
  spdlog::info("loaded {} session(s) from {}{}", sessions_.size(), store_->path(),
               problems.empty() ? "" : fmt::format(" ({} unreadable, skipped)", problems.size()));
  return Status::Ok();
}

void SessionManager::JoinDriver(Session& s) {
  std::lock_guard<std::mutex> g(s.join_mu);
  if (s.driver.joinable() && s.driver.get_id() != std::this_thread::get_id()) s.driver.join();
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
      if (s->end_reason.empty()) s->end_reason = "the controller shut down";
    }
    s->cv.notify_all();
  }
  // Every driver that will ever run was started under mu_ before
  // shutting_down_ was set, so each is joined here.
  for (auto& s : all) JoinDriver(*s);
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

StatusOr<v1::ScenarioDetail> SessionManager::GetScenario(const std::string& id) const {
  const v1::Scenario* sc = FindScenario(id);
  if (sc == nullptr) return NotFound(UnknownScenario(id));
  v1::ScenarioDetail d;
  d.set_id(sc->id());
  d.set_title(sc->title());
  d.set_band(sc->band());
  d.set_briefing(sc->briefing());
  d.set_world_size(sc->job().world_size());
  d.set_time_budget_s(sc->rubric().time_budget_s());
  d.set_time_limit_s(TimeLimitS(sc->rubric()));
  for (const auto& k : sc->may_change()) d.add_may_change(k);
  *d.mutable_tools() = sc->tools();
  d.set_hints(sc->hints_size());
  d.set_hint_cost(sc->rubric().hint_cost());
  d.set_revision_cost(RevisionCost(sc->rubric()));
  d.set_collateral_cost(CollateralCost(sc->rubric()));
  return d;
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

std::string SessionManager::NewSessionIdLocked() {
  // 64 random bits; an id already in memory or in the store (a session this
  // controller has not loaded) is never reused.
  for (;;) {
    std::string id = "s-" + RandomHex(8);
    if (sessions_.count(id)) continue;
    auto stored = store_->HasSession(id);
    if (stored.ok() && *stored) continue;
    return id;
  }
}

std::string SessionManager::UnknownScenario(const std::string& id) const {
  std::vector<std::string> ids;
  std::string all;
  for (const auto& s : scenarios_) {
    ids.push_back(s.id());
    all += (all.empty() ? "" : ", ") + s.id();
  }
  return "unknown scenario '" + id + "'" + DidYouMean(id, ids) + "; available: " + all;
}

StatusOr<v1::SessionInfo> SessionManager::Start(const v1::StartSessionRequest& req) {
  const v1::Scenario* sc = FindScenario(req.scenario_id());
  if (sc == nullptr) return NotFound(UnknownScenario(req.scenario_id()));
  if (req.seed() < 0) return InvalidArgument("--seed must be positive (or 0 for a random one), got " +
                                             std::to_string(req.seed()));
  auto s = std::make_shared<Session>();
  s->scenario = sc;
  s->join_token = RandomHex(16);
  auto& info = *s->rec.mutable_info();
  info.set_scenario_id(sc->id());
  info.set_title(sc->title());
  info.set_briefing(sc->briefing());
  info.set_seed(req.seed() != 0 ? req.seed() : static_cast<int64_t>(std::random_device{}() % 1000000 + 1));
  info.set_created_unix_ms(NowMs());
  info.set_world_size(sc->job().world_size());
  info.set_max_score(sc->rubric().cause() + sc->rubric().culprit() + sc->rubric().fix() + sc->rubric().time());
  info.set_state(kCreated);
  *s->rec.mutable_job() = sc->job();
  s->ranks.resize(sc->job().world_size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return Unavailable("the controller is shutting down");
    info.set_session_id(NewSessionIdLocked());
  }
  // Everything the learner can read is complete before the session is
  // published: its hosts, its sealed faults (so its config shows the
  // deployed job from the first look) and its checkpoint directory.
  // Agents: one host each, named like a small cluster (remote agents bring
  // their own names: Drive binds the faults to them).
  for (int r = 0; r < sc->job().world_size(); ++r) {
    s->rec.add_hosts("node-" + std::to_string(s->rec.next_host_index()));
    s->rec.set_next_host_index(s->rec.next_host_index() + 1);
  }
  if (Status st = SealAnswer(*s); !st.ok()) return FailedPrecondition("scenario " + sc->id() + ": " + st.message());
  if (s->rec.job().checkpoint().dir().empty()) {
    const std::string dir = SessionCheckpointDir(opts_.state_dir, info.session_id());
    std::string err;
    if (!MakeDirs(dir, &err)) return Internal("session checkpoint directory: " + err);
    s->rec.mutable_job()->mutable_checkpoint()->set_dir(dir);
  }
  Save(*s);  // the row first: events reference it
  AddEvent(*s, "created", -1, "session created for scenario " + sc->id() + " (seed " + std::to_string(info.seed()) + ")");
  const v1::SessionInfo out = info;
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_ || sessions_.count(info.session_id())) {
    s->rec.mutable_info()->set_end_reason("the controller shut down before the session started");
    SetState(*s, kAborted);
    return Unavailable(shutting_down_ ? "the controller is shutting down" : "session id collision; start again");
  }
  sessions_[info.session_id()] = s;
  // Assigned under mu_ (and join_mu): Shutdown lists sessions under mu_,
  // so it either sees this driver or prevents it.
  std::lock_guard<std::mutex> g(s->join_mu);
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

Status SessionManager::SealAnswer(Session& s) {
  const v1::Scenario& sc = *s.scenario;
  std::vector<std::string> hosts(s.rec.hosts().begin(), s.rec.hosts().end());
  auto faults = faults::ResolveFaults(sc, DrawSeed(opts_.draw_key, s.rec.info().seed()), hosts);
  if (!faults.ok()) return faults.status();
  for (auto& f : *faults) *s.rec.add_faults() = f;
  for (const auto& k : faults::AnswerKey(sc)) {
    v1::Finding* f = s.rec.add_answer_findings();
    f->set_cause(k.cause());
    for (const auto& ref : k.culprit_ranks()) {
      auto r = faults::ResolveRankRef(ref, *faults);
      if (!r.ok()) return r.status();
      f->add_culprit_ranks(*r);
    }
  }
  s.rec.set_answer_cause(s.rec.answer_findings(0).cause());
  *s.rec.mutable_answer_culprit_ranks() = s.rec.answer_findings(0).culprit_ranks();
  return Status::Ok();
}

void SessionManager::Finish(Session& s, Lock& lock, const std::string& state) {
  Teardown(s, lock);  // first, so a finished session has no agents left
  // The report carries the state it is final in; the row follows it, so a
  // crash in between leaves a scored session that is still marked live
  // (aborted on restart), never a final state without its score.
  s.rec.mutable_info()->set_state(state);
  if (state != kScored) s.rec.mutable_info()->set_end_reason(s.end_reason);
  const v1::ScoreReport score = ComputeScore(s);
  s.rec.mutable_info()->set_total_score(score.total());
  if (Status st = store_->SaveScore(score, NowMs()); !st.ok()) spdlog::error("{}", st.message());
  AddEvent(s, state == kScored ? "scored" : "ended", -1,
           (state == kScored ? "" : s.end_reason + "; ") + "score " + std::to_string(score.total()) + "/" +
               std::to_string(score.max_total()));
  SetState(s, state);
}

void SessionManager::Drive(std::shared_ptr<Session> sp) {
  Session& s = *sp;
  Lock lock(s.mu);
  const v1::Scenario& sc = *s.scenario;
  auto abort = [&](const std::string& why) {
    AddEvent(s, "aborted", -1, why);
    Teardown(s, lock);
    s.rec.mutable_info()->set_end_reason(why);
    SetState(s, kAborted);
  };
  // The learner (or the controller's shutdown) ended it: scored as it
  // stands, the answer revealed.
  auto ended = [&] {
    if (s.end_reason.empty()) s.end_reason = "ended by the learner";
    Finish(s, lock, kEnded);
  };

  if (Status st = EnsureAgents(s, lock); !st.ok()) {
    if (s.end_requested) return ended();
    return abort("could not start the job's agents: " + st.message());
  }
  if (s.end_requested) return ended();
  // A host-level fault belongs to the host that holds its rank now: remote
  // agents brought their own host names.
  for (auto& f : *s.rec.mutable_faults()) {
    if (!f.host().empty() && f.rank() >= 0 && f.rank() < s.rec.hosts_size()) f.set_host(s.rec.hosts(f.rank()));
  }
  Save(s);

  // Healthy baseline of the same job on this machine, faults off.
  SetState(s, kBaseline);
  if (Status st = RunJob(s, lock, "baseline", RunLength(sc), false); !st.ok()) {
    if (s.end_requested) return ended();
    return abort("baseline run failed: " + st.message());
  }
  if (s.end_requested) return ended();
  const WindowStats base = MeasureWindow(StepsByRank(s), sc.verify().warmup_steps(), sc.verify().window_steps(),
                                         sc.job().world_size() * sc.job().data().batch_size());
  v1::RunSummary summary = Summarize(s, sc.verify().window_steps());
  FillSummary(base, &summary);
  *s.rec.mutable_baseline() = summary;
  AddEvent(s, "baseline", -1,
           "healthy baseline: " + Fmt(base.throughput_samples_per_s) + " samples/s, median step " +
               Fmt(base.median_step_ms, 1) + " ms, rank busy-time skew " + Fmt(base.rank_step_skew, 2) + " over " +
               std::to_string(base.steps) + " steps");

  // The drill: the real job, faults armed, until the learner fixes it, ends
  // it or the time limit passes. A fault may come with a bad deploy of the
  // job's settings; from here on that is the job's config, which the
  // learner's fix settings then change.
  s.healthy_job = s.rec.job();
  faults::ApplyFaultsToJob(std::vector<v1::ResolvedFault>(s.rec.faults().begin(), s.rec.faults().end()),
                           s.rec.mutable_job());
  SetState(s, kRunning);
  s.rec.set_run_started_unix_ms(NowMs());
  Save(s);
  StartRun(s, "main", kUnboundedSteps, true);
  const auto limit = std::chrono::seconds(TimeLimitS(sc.rubric()));
  const bool acted = s.cv.wait_for(lock, limit, [&] { return s.end_requested || s.fix_pending; });
  if (!acted) {
    s.end_requested = true;  // no action is taken while it ends
    s.end_reason = "the time limit (" + std::to_string(limit.count()) + " s) ran out before a fix";
  }
  if (s.end_requested) return ended();

  // The learner's fix, then a measured verification.
  SetState(s, kFixing);
  StopRun(s, lock);
  const v1::ApplyFixRequest fix = s.rec.fix();
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
  Save(s);
  if (Status st = EnsureAgents(s, lock); !st.ok()) {
    if (s.end_requested) return ended();
    return abort("could not restart the job's agents: " + st.message());
  }
  if (s.end_requested) return ended();

  SetState(s, kVerifying);
  const v1::Verification v = VerifyFix(s, lock);
  if (s.end_requested) return ended();
  *s.rec.mutable_verification() = v;
  AddEvent(s, v.passed() ? "verification_passed" : "verification_failed", -1, v.detail());
  Finish(s, lock, kScored);
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
  pool_->Expect(agent_id, s.join_token);
  auto pid = launcher_->Launch(agent_id, host, s.join_token);
  if (!pid.ok()) return pid.status();
  r.pid = *pid;
  return Status::Ok();
}

bool SessionManager::AgentAlive(const Session& s, int rank) {
  const Rank& r = s.ranks[rank];
  if (r.agent_id.empty() || r.state == "lost" || r.state == "retired" || r.state == "stopped") return false;
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
    if (!r.agent_id.empty() && r.state != "retired") RetireAgent(s, lock, rank);  // half there: finish it off
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
    job->set_dump_flight_recorder(ToolOffered(s, "flight_recorder").ok());
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
  AddEvent(s, "run_started", -1,
           kind + " run started" + (steps < kUnboundedSteps ? ": " + std::to_string(steps) + " steps" : ""));
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

// Stops a rank's agent on purpose (replace host, hung, teardown). A local
// agent is killed; a remote one is told to stop its run and is not handed a
// new job until it reports that run over (the pool tracks that).
void SessionManager::RetireAgent(Session& s, Lock& lock, int rank) {
  Rank& r = s.ranks[rank];
  if (r.agent_id.empty()) return;
  s.retired.insert(r.agent_id);
  const std::string id = r.agent_id;
  if (!launcher_ && s.run && (r.state == "running" || r.state == "starting")) {
    v1::ControllerMessage msg;
    msg.mutable_stop()->set_run_id(s.run->id);
    pool_->Send(id, msg);
  }
  if (launcher_) launcher_->Kill(id);
  r.state = "retired";
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
    Rank& r = s->ranks[step.rank()];
    if (r.agent_id != agent_id) continue;  // an agent reports for its own rank only
    r.steps.push_back(step);
    // Keep the newest: drop the older half when the cap is reached, so the
    // cost per report stays constant.
    if (r.steps.size() >= 2 * opts_.steps_kept) r.steps.erase(r.steps.begin(), r.steps.end() - opts_.steps_kept);
    r.last_step_at = std::chrono::steady_clock::now();
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

StatusOr<v1::SessionInfo> SessionManager::End(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.end_requested && !TerminalState(s.rec.info().state())) {
      s.end_requested = true;
      s.end_reason = "ended by the learner";
    }
  }
  s.cv.notify_all();
  JoinDriver(s);
  // A driver still starting (or a Shutdown joining it) finishes it: wait.
  Lock lock(s.mu);
  s.cv.wait_for(lock, std::chrono::seconds(60), [&] { return TerminalState(s.rec.info().state()); });
  return s.rec.info();
}

// -------------------------------------------------------------- helpers

std::vector<std::vector<v1::StepReport>> SessionManager::StepsByRank(const Session& s) const {
  std::vector<std::vector<v1::StepReport>> out;
  for (const auto& r : s.ranks) out.push_back(r.steps);
  return out;
}

void SessionManager::SetState(Session& s, const std::string& state) {
  s.rec.mutable_info()->set_state(state);
  Save(s);
  s.cv.notify_all();
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
