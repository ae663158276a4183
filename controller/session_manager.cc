#include "controller/session_manager.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "common/clock.h"
#include "common/format.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/suggest.h"
#include "controller/draws.h"
#include "controller/run_metrics.h"
#include "scenario/loader.h"
#include "controller/scorer.h"
#include "faults/registry.h"
#include "faults/targeting.h"

namespace firedrill::controller {

// Locking: mu_ guards the maps only and is never held while a session's
// mutex is taken; a session's mutex may be held while mu_ is taken briefly.
// A session's join_mu guards its driver thread object; it is taken with
// mu_ held (Start) or alone (End, Shutdown), never the other way round.

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

int RunLength(const v1::Scenario& sc) { return sc.verify().warmup_steps() + sc.verify().window_steps(); }

// The main run trains until the learner fixes it, ends the session or the
// time limit passes; the agent is simply never told to stop on its own.
constexpr int64_t kUnboundedSteps = int64_t{1} << 40;

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
    const auto state = ParseSessionState(rec.info().state());
    s->state = state.value_or(SessionState::kAborted);
    if (!state || !Terminal(*state)) {
      const std::string why = "the controller stopped while this session was in state '" + rec.info().state() +
                              "'; its job and agents were lost. Start a new session.";
      AddEvent(*s, "aborted", -1, why);
      s->rec.mutable_info()->set_end_reason(why);
      SetState(*s, SessionState::kAborted);
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
    return NotFound(NoSessionMessage(id));
  }
  return it->second;
}

std::string NoSessionMessage(const std::string& id) {
  return "no session '" + id + "'; `firedrill sessions` lists them";
}

StatusOr<std::string> SessionManager::OwnerOf(const std::string& id) {
  auto s = Find(id);
  if (!s.ok()) return s.status();
  std::lock_guard<std::mutex> lock((*s)->mu);
  return (*s)->rec.info().owner();
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

StatusOr<v1::SessionInfo> SessionManager::Start(const v1::StartSessionRequest& req,
                                                const std::string& owner) {
  const v1::Scenario* sc = FindScenario(req.scenario_id());
  if (sc == nullptr) return NotFound(UnknownScenario(req.scenario_id()));
  if (req.seed() < 0) return InvalidArgument("--seed must be positive (or 0 for a random one), got " +
                                             std::to_string(req.seed()));
  // Links between hosts are shaped on the fabric: without it every rank
  // talks over one loopback (--hosts loopback) or is a machine of its own
  // (remote agents), and the drill's links would not be there.
  if (sc->cluster().inter_host_gbps() > 0 && !opts_.fabric)
    return FailedPrecondition(
        "scenario " + sc->id() +
        " runs on hosts with shaped links between them: it needs this controller's hosts "
        "as network namespaces (firedrill-controller --hosts netns with local agents, as "
        "root)");
  auto s = std::make_shared<Session>();
  s->scenario = sc;
  s->join_token = RandomHex(16);
  auto& info = *s->rec.mutable_info();
  info.set_scenario_id(sc->id());
  info.set_owner(owner);
  info.set_title(sc->title());
  info.set_briefing(sc->briefing());
  info.set_seed(req.seed() != 0 ? req.seed() : static_cast<int64_t>(std::random_device{}() % 1000000 + 1));
  info.set_created_unix_ms(NowMs());
  info.set_world_size(sc->job().world_size());
  info.set_max_score(sc->rubric().cause() + sc->rubric().culprit() + sc->rubric().fix() + sc->rubric().time());
  info.set_state(Name(SessionState::kCreated));
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
  // Agents: `cluster.ranks_per_host` to a host (one by default), in rank
  // order, named like a small cluster (remote agents bring their own
  // names: Drive binds the faults to them).
  const int per_host = std::max(1, sc->cluster().ranks_per_host());
  for (int r = 0; r < sc->job().world_size(); ++r) {
    if (r % per_host == 0) s->rec.set_next_host_index(s->rec.next_host_index() + 1);
    s->rec.add_hosts("node-" + std::to_string(s->rec.next_host_index() - 1));
  }
  if (Status st = SealAnswer(*s); !st.ok()) return FailedPrecondition("scenario " + sc->id() + ": " + st.message());
  if (s->rec.job().checkpoint().dir().empty()) {
    // Beside the controller's other state, one directory per session,
    // absolute because the agents run in their own working directories.
    const std::string dir = SessionFilesDir(opts_.state_dir, info.session_id(), "checkpoints");
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
    SetState(*s, SessionState::kAborted);
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
    std::set<int> culprits;
    for (const auto& ref : k.culprit_ranks()) {
      auto r = faults::ResolveRankRef(ref, *faults);
      if (!r.ok()) return r.status();
      culprits.insert(*r);
      // A host-level fault acts on every rank of its host: with several
      // ranks to a host (cluster.ranks_per_host), each is a culprit.
      // (The fault that targets this rank: a host-level one.)
      const bool on_host = std::any_of(faults->begin(), faults->end(), [&](const v1::ResolvedFault& x) {
        return !x.host().empty() && x.rank() == *r && *r < static_cast<int>(hosts.size()) &&
               x.host() == hosts[*r];
      });
      for (int q = 0; on_host && q < static_cast<int>(hosts.size()); ++q)
        if (hosts[q] == hosts[*r]) culprits.insert(q);
    }
    for (int r : culprits) f->add_culprit_ranks(r);
  }
  s.rec.set_answer_cause(s.rec.answer_findings(0).cause());
  *s.rec.mutable_answer_culprit_ranks() = s.rec.answer_findings(0).culprit_ranks();
  return Status::Ok();
}

void SessionManager::Finish(Session& s, Lock& lock, SessionState state) {
  Teardown(s, lock);  // first, so a finished session has no agents left
  // The report carries the state it is final in; the row follows it, so a
  // crash in between leaves a scored session that is still marked live
  // (aborted on restart), never a final state without its score.
  RecordState(s, state);
  if (state != SessionState::kScored) s.rec.mutable_info()->set_end_reason(s.end_reason);
  const v1::ScoreReport score = ComputeScore(s);
  s.rec.mutable_info()->set_total_score(score.total());
  if (Status st = store_->SaveScore(score, NowMs()); !st.ok()) spdlog::error("{}", st.message());
  const bool scored = state == SessionState::kScored;
  AddEvent(s, scored ? "scored" : "ended", -1,
           (scored ? "" : s.end_reason + "; ") + "score " + std::to_string(score.total()) + "/" +
               std::to_string(score.max_total()));
  SetState(s, state);
}

std::set<std::string> SessionManager::DownHosts(const Session& s) {
  std::set<std::string> down;
  for (const auto& f : s.rec.faults())
    if (f.kind() == "rank_crash" && f.rank_crash().stays_down() && !f.host().empty() &&
        s.main_newest_step + 1 >= f.trigger_step())
      down.insert(f.host());
  return down;
}

SessionManager::HostsLeft SessionManager::CountHostsLeft(const Session& s,
                                                         const std::set<std::string>& down) {
  HostsLeft h;
  h.world = static_cast<int>(s.ranks.size());
  for (const auto& r : s.ranks) {  // an earlier shrink left the other down hosts out
    if (!down.count(r.host))
      ++h.up;
    else
      h.gone += (h.gone.empty() ? "" : ", ") + r.host;
  }
  h.min_nodes = s.rec.job().elastic().min_nodes() > 0 ? s.rec.job().elastic().min_nodes() : h.world;
  return h;
}

std::string SessionManager::HostsLeft::shortfall() const {
  return "host(s) " + gone + " did not come back, " + std::to_string(up) + " of its " +
         std::to_string(world) + " hosts are up and it needs " + std::to_string(min_nodes) +
         " (elastic.min_nodes)";
}

std::string SessionManager::HostsLeft::resized() const {
  return "on the " + std::to_string(up) + " hosts that are up (world size " + std::to_string(world) + " -> " +
         std::to_string(up) + ", elastic.min_nodes " + std::to_string(min_nodes) + "; host(s) " + gone +
         " did not come back)";
}

// The ranks on `down` hosts leave the job; the rest are numbered anew in
// host order, as a rendezvous of the nodes that are left assigns them.
// Faults follow their host (or their rank's new number); the session's
// world size, the healthy job's and what the learner reads shrink with it.
void SessionManager::ShrinkWorld(Session& s, Lock& lock, const std::set<std::string>& down) {
  // The new world first, without letting go of the lock: a fix or a
  // diagnosis checked against the world size never sees one half-changed.
  std::vector<Rank> kept, gone;
  std::map<int, int> renumbered;  // old rank -> new
  google::protobuf::RepeatedPtrField<std::string> hosts;
  for (int rank = 0; rank < static_cast<int>(s.ranks.size()); ++rank) {
    const std::string host = rank < s.rec.hosts_size() ? s.rec.hosts(rank) : s.ranks[rank].host;
    if (down.count(s.ranks[rank].host)) {
      gone.push_back(std::move(s.ranks[rank]));
      continue;
    }
    renumbered[rank] = static_cast<int>(kept.size());
    kept.push_back(std::move(s.ranks[rank]));
    *hosts.Add() = host;
  }
  s.ranks = std::move(kept);
  *s.rec.mutable_hosts() = hosts;
  const int world = static_cast<int>(s.ranks.size());
  s.rec.mutable_job()->set_world_size(world);
  s.rec.mutable_info()->set_world_size(world);
  s.healthy_job.set_world_size(world);
  for (auto& f : *s.rec.mutable_faults()) {
    if (f.all_ranks()) continue;
    auto it = renumbered.find(f.rank());
    f.set_rank(it == renumbered.end() ? -1 : it->second);  // -1: its rank left with its host
  }
  // A host that is down is never given a rank again (an agent of it that
  // registers anew in remote mode included).
  s.replaced_hosts.insert(down.begin(), down.end());
  Save(s);
  // Then the agents of the ranks that left (this may let go of the lock;
  // `gone` is this frame's).
  for (Rank& r : gone) {
    RetireAgent(s, lock, r);
    RemoveHost(s, r.host);
  }
}

// As torchrun's elastic agent restarts its worker group: the first failure
// is the root cause, every worker goes, and all start again, resuming from
// checkpoint.resume_from ("latest": the newest step with a manifest), until
// job.elastic.max_restarts are spent; then the job stays down. Without
// restarts a failed job just stays as it failed (its peers may hang in a
// collective: that is what the learner sees).
bool SessionManager::SuperviseMain(Session& s, Lock& lock, std::chrono::steady_clock::time_point deadline) {
  const int max_restarts = std::max(0, s.rec.job().elastic().max_restarts());
  auto acted = [&] { return s.end_requested || s.fix_pending; };
  auto failed = [&] {
    if (max_restarts == 0 || s.main_down || !s.run || s.run->kind != RunKind::kMain) return false;
    for (const auto& r : s.ranks)
      if (r.state == RankState::kFailed || r.state == RankState::kLost) return true;
    return false;
  };
  while (true) {
    if (!s.cv.wait_until(lock, deadline, [&] { return acted() || failed(); })) return false;
    if (acted()) return true;
    int64_t newest = -1;  // this attempt's
    for (const auto& r : s.ranks)
      if (!r.steps.empty()) newest = std::max(newest, r.steps.back().step());
    StopRun(s, lock, /*grace_s=*/3.0);  // the rest of the group, as the agent stops it
    if (acted()) return true;
    // The newest checkpoint that verified when the job first went down:
    // the fix's lost work is counted from it (a later deletion or more
    // damage does not move it back).
    if (const std::string dir = s.rec.job().checkpoint().dir();
        s.newest_valid_seen < 0 && ScoresLostWork(*s.scenario) && !dir.empty()) {
      lock.unlock();
      auto newest_valid = NewestValidStep(dir);
      lock.lock();
      if (newest_valid.ok()) s.newest_valid_seen = *newest_valid;
      if (acted()) return true;
    }
    // Ranks that only stopped with the group did not finish anything.
    for (auto& r : s.ranks)
      if (r.state == RankState::kFinished) r.state = RankState::kStopped;
    // After the stop: a lost process's exit status has come in by now, and
    // says more than its closed stream.
    std::string cause = "a rank failed";
    if (const int fr = s.run->first_failed_rank; fr >= 0 && fr < static_cast<int>(s.ranks.size())) {
      const Rank& r = s.ranks[fr];
      cause = "rank " + std::to_string(fr) +
              (r.state == RankState::kLost ? " (host " + r.host + ") lost: " : " failed: ") + r.message;
    }
    if (s.main_restarts >= max_restarts) {
      s.main_down = true;
      AddEvent(s, "job_down", -1,
               "the job failed again (" + cause + ") and its " + std::to_string(max_restarts) +
                   " restarts (elastic.max_restarts) are spent: it stays down until it is fixed");
      Save(s);
      continue;
    }
    // A host that is down for good: the launcher goes on without it where
    // job.elastic.min_nodes allows (torchrun --nnodes=MIN:MAX), else the
    // job waits for hosts that will not come.
    std::string shrunk;
    const std::set<std::string> down = DownHosts(s);
    if (const HostsLeft left = CountHostsLeft(s, down); !left.gone.empty()) {
      if (!left.enough()) {
        s.main_down = true;
        AddEvent(s, "job_down", -1, "the job failed (" + cause + ") and cannot restart: " + left.shortfall());
        Save(s);
        continue;
      }
      ShrinkWorld(s, lock, down);
      if (acted()) return true;
      shrunk = " " + left.resized();
    }
    ++s.main_restarts;
    auto resume = VerifyResumePoint(s, lock);
    if (acted()) return true;
    std::string from = "step 0 (no checkpoint)";
    int64_t from_step = 0;
    if (resume.ok() && !resume->empty()) {
      from_step = std::max<int64_t>(0, CheckpointStepOf(*resume));
      from = "latest (step-" + std::to_string(from_step) + ")";
    } else if (!resume.ok()) {
      from = "latest (the checkpoints could not be listed: " + resume.status().message() + ")";
    }
    AddEvent(
        s, "job_restarted", -1,
        "restart " + std::to_string(s.main_restarts) + " of " + std::to_string(max_restarts) +
            " (elastic.max_restarts)" + shrunk + " after " + cause +
            (newest >= 0 ? " at step " + std::to_string(newest) : " before its first step") +
            "; resuming from " + from +
            (newest >= 0 ? ", " + std::to_string(std::max<int64_t>(0, newest + 1 - from_step)) + " steps lost"
                         : ""));
    if (Status st = EnsureAgents(s, lock); !st.ok()) {
      if (acted()) return true;
      s.main_down = true;
      AddEvent(s, "job_down", -1, "the job could not be restarted: " + st.message());
      Save(s);
      continue;
    }
    if (acted()) return true;
    StartRun(s, RunKind::kMain, kUnboundedSteps, true, nullptr, /*restart=*/true);
    Save(s);
  }
}

void SessionManager::Drive(std::shared_ptr<Session> sp) {
  Session& s = *sp;
  Lock lock(s.mu);
  const v1::Scenario& sc = *s.scenario;
  auto abort = [&](const std::string& why) {
    AddEvent(s, "aborted", -1, why);
    Teardown(s, lock);
    s.rec.mutable_info()->set_end_reason(why);
    SetState(s, SessionState::kAborted);
  };
  // The learner (or the controller's shutdown) ended it: scored as it
  // stands, the answer revealed.
  auto ended = [&] {
    if (s.end_reason.empty()) s.end_reason = "ended by the learner";
    Finish(s, lock, SessionState::kEnded);
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
  // Its checkpoints (if the job writes any) go elsewhere: the job's own
  // directory shows only what the faulty run wrote, as `ckpt list` reads it.
  SetState(s, SessionState::kBaseline);
  v1::JobSpec baseline_job = s.rec.job();
  baseline_job.mutable_checkpoint()->set_dir(
      SessionFilesDir(opts_.state_dir, s.rec.info().session_id(), "baseline-checkpoints"));
  if (Status st = RunJob(s, lock, RunKind::kBaseline, RunLength(sc), false, &baseline_job); !st.ok()) {
    if (s.end_requested) return ended();
    return abort("baseline run failed: " + st.message());
  }
  if (s.end_requested) return ended();
  const WindowStats base =
      MeasureWindow(StepsByRank(s), sc.verify().warmup_steps(), sc.verify().window_steps(),
                    static_cast<int>(JobSamplesPerStep(sc.job())));
  v1::RunSummary summary = Summarize(s, sc.verify().window_steps());
  FillSummary(base, &summary);
  *s.rec.mutable_baseline() = summary;
  AddEvent(s, "baseline", -1,
           "healthy baseline: " + Num(base.throughput_samples_per_s) + " samples/s, median step " +
               Num(base.median_step_ms, 1) + " ms, " + SkewName(base.rank_skew_of_stretch) + " " +
               Num(base.rank_step_skew, 2) + " over " + std::to_string(base.steps) + " steps");

  // The drill: the real job, faults armed, until the learner fixes it, ends
  // it or the time limit passes. A fault may come with a bad deploy of the
  // job's settings; from here on that is the job's config, which the
  // learner's fix settings then change.
  s.healthy_job = s.rec.job();
  faults::ApplyFaultsToJob(std::vector<v1::ResolvedFault>(s.rec.faults().begin(), s.rec.faults().end()),
                           s.rec.mutable_job());
  SetState(s, SessionState::kRunning);
  s.rec.set_run_started_unix_ms(NowMs());
  Save(s);
  StartRun(s, RunKind::kMain, kUnboundedSteps, true);
  const auto limit = std::chrono::seconds(TimeLimitS(sc.rubric()));
  const bool acted = SuperviseMain(s, lock, std::chrono::steady_clock::now() + limit);
  if (!acted) {
    s.end_requested = true;  // no action is taken while it ends
    s.end_reason = "the time limit (" + std::to_string(limit.count()) + " s) ran out before a fix";
  }
  if (s.end_requested) return ended();

  // The learner's fix, then a measured verification.
  SetState(s, SessionState::kFixing);
  StopRun(s, lock);
  const v1::ApplyFixRequest fix = s.rec.fix();
  // A host that went down for good before the launcher went on without it
  // (the fix came first): the job goes on without it now where
  // job.elastic.min_nodes allows, else it cannot run. A rank the fix moves
  // to a new host is not on it any more.
  std::vector<std::string> replace;  // by host: a shrink numbers the ranks anew
  for (int rank : fix.replace_host_ranks())
    if (rank >= 0 && rank < s.rec.hosts_size() &&
        std::find(replace.begin(), replace.end(), s.rec.hosts(rank)) == replace.end())
      replace.push_back(s.rec.hosts(rank));  // once a host, however many of its ranks were named
  std::set<std::string> down = DownHosts(s);
  for (const auto& h : replace) down.erase(h);
  if (const HostsLeft left = CountHostsLeft(s, down); !left.gone.empty()) {
    if (!left.enough()) {
      SetState(s, SessionState::kVerifying);
      v1::Verification v;
      v.set_done(true);
      v.set_passed(false);
      v.set_detail("the fixed job cannot run: " + left.shortfall());
      *s.rec.mutable_verification() = v;
      AddEvent(s, "verification_failed", -1, v.detail());
      return Finish(s, lock, SessionState::kScored);
    }
    ShrinkWorld(s, lock, down);
    if (s.end_requested) return ended();
    AddEvent(s, "job_resized", -1, "the job goes on " + left.resized());
  }
  std::vector<int> replace_ranks;
  for (const auto& h : replace)
    for (int rank = 0; rank < s.rec.hosts_size(); ++rank)
      if (s.rec.hosts(rank) == h) replace_ranks.push_back(rank);
  std::map<std::string, std::string> moved;  // old host -> its replacement: its ranks move together
  for (int rank : replace_ranks) {
    const std::string old_host = s.rec.hosts(rank);
    auto [to, fresh] = moved.emplace(old_host, "");
    if (fresh) {
      to->second = "node-" + std::to_string(s.rec.next_host_index());
      s.rec.set_next_host_index(s.rec.next_host_index() + 1);
    }
    const std::string new_host = to->second;
    RetireAgent(s, lock, rank);
    s.replaced_hosts.insert(old_host);
    s.rec.set_hosts(rank, new_host);
    if (std::find(s.rec.hosts().begin(), s.rec.hosts().end(), old_host) == s.rec.hosts().end())
      RemoveHost(s, old_host);  // no rank is left on it
    AddEvent(s, "host_replaced", rank, "rank " + std::to_string(rank) + " moved from " + old_host + " to " + new_host);
  }
  for (const auto& kv : fix.settings()) {
    // Validated when the fix was accepted.
    (void)scenario::ApplyJobSetting(s.rec.mutable_job(), kv.key(), kv.value());
  }
  Save(s);
  if (Status st = EnsureAgents(s, lock); !st.ok()) {
    if (s.end_requested) return ended();
    return abort("could not restart the job's agents: " + st.message());
  }
  if (s.end_requested) return ended();

  SetState(s, SessionState::kVerifying);
  const v1::Verification v = VerifyFix(s, lock);
  if (s.end_requested) return ended();
  *s.rec.mutable_verification() = v;
  AddEvent(s, v.passed() ? "verification_passed" : "verification_failed", -1, v.detail());
  Finish(s, lock, SessionState::kScored);
}

StatusOr<v1::SessionInfo> SessionManager::End(const std::string& id, const std::string& reason) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  Session& s = **sp;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.end_requested && !Terminal(s.state)) {
      s.end_requested = true;
      s.end_reason = reason;
    }
  }
  s.cv.notify_all();
  JoinDriver(s);
  // A driver still starting (or a Shutdown joining it) finishes it: wait.
  Lock lock(s.mu);
  s.cv.wait_for(lock, std::chrono::seconds(60), [&] { return Terminal(s.state); });
  return s.rec.info();
}

StatusOr<v1::SessionInfo> SessionManager::Info(const std::string& id) {
  auto sp = Find(id);
  if (!sp.ok()) return sp.status();
  std::lock_guard<std::mutex> lock((*sp)->mu);
  return (*sp)->rec.info();
}

void SessionManager::Announce(const std::string& id, const std::string& kind, const std::string& message) {
  auto sp = Find(id);
  if (!sp.ok()) return;
  Session& s = **sp;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!Terminal(s.state)) AddEvent(s, kind, -1, message);
}

// -------------------------------------------------------------- helpers

void SessionManager::RecordState(Session& s, SessionState state) {
  s.state = state;
  s.rec.mutable_info()->set_state(Name(state));
}

void SessionManager::SetState(Session& s, SessionState state) {
  RecordState(s, state);
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
  if (event_sink_) event_sink_(s.rec.info().session_id(), e);
}

void SessionManager::Save(Session& s) {
  if (Status st = store_->SaveSession(s.rec); !st.ok()) spdlog::error("{}", st.message());
}

}  // namespace firedrill::controller
