// Sessions: one learner's attempt at one scenario. Each session has a driver
// thread that walks its state machine (session_state.h) by assigning job
// runs to agents and waiting for what they report. The public RPCs only read
// state or leave requests for the driver.
//
// Files, by meaning:
//   session_manager.cc  the state machine and its timeline: start, drive,
//                       end, events, persistence
//   session_runs.cc     run orchestration: agents (launch, retire), runs
//                       (start, stop, hang), what agents report
//   session_actions.cc  the learner's actions: diagnose, fix, hint
//   session_grading.cc  grading: a fix's paired verification, the score
//   session_observe.cc  the read side: status, trace, logs, flight recorders
//   session_probe.cc    communication probes between two steps
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "controller/agent_pool.h"
#include "controller/launcher.h"
#include "controller/run_metrics.h"
#include "controller/session_state.h"
#include "controller/store.h"
#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/scenario.pb.h"
#include "firedrill/v1/store.pb.h"

namespace firedrill::controller {

class NetnsFabric;

// Where a job's checkpoint of `step` lives under its checkpoint.dir (the
// trainer's naming, agent/checkpoint.h).
std::string CheckpointStepDir(const std::string& dir, int64_t step);
// <state_dir>/sessions/<id>/<what>, absolute: a session's checkpoints
// ("checkpoints") and its verification runs' ("verify-checkpoints").
std::string SessionFilesDir(const std::string& state_dir, const std::string& session_id, const std::string& what);
// True if a remediation of `sc` scores the training a fix's resume throws
// away (Remediation.newest_valid_checkpoint).
bool ScoresLostWork(const v1::Scenario& sc);
// What a call on an unknown session says; a session the caller may not see
// says the same (controller/authz.h).
std::string NoSessionMessage(const std::string& id);

struct SessionManagerOptions {
  std::string state_dir;
  std::string agent_bin;        // local launcher only
  std::string ckpt_bin;         // firedrill-ckpt: lists and verifies the sessions' checkpoints
  std::string train_bin;        // firedrill-train: the resume probe's runs
  std::string agent_dial_addr;  // address agents use to reach this controller
  bool local_launcher = true;   // false: use agents that registered on their own
  double slow_ratio = 1.5;      // busy time vs median that marks a rank SLOW in status (only
                                // where the drill offers the slow-rank flag); ranks
                                // sharing cores drift +-30% on their own
  int status_window = 20;       // steps averaged in status rows
  std::chrono::seconds agent_register_timeout{60};
  // Step reports kept per rank and run (the newest): status, trace and
  // verification read at most a few hundred; a drill's job runs until the
  // learner fixes it.
  size_t steps_kept = 4000;
  // Rows of training signals kept per rank and run for `firedrill metrics`
  // (the whole run; a longer one is thinned to every k-th step).
  size_t history_rows = 20000;
  // Keys the session seed into the draws (controller/draws.h).
  std::string draw_key;
  // Simulated hosts as network namespaces (local launcher only); null: every
  // agent runs in the controller's namespace.
  NetnsFabric* fabric = nullptr;
};

// A run's throughput as the job saw it: its ranks' rates summed step by
// step, each at the time its last rank ended that step (a postmortem's
// impact; session_postmortem.cc).
std::vector<std::pair<int64_t, double>> JobRate(const v1::MetricsResponse& run, bool tokens);

class SessionManager : public AgentListener {
 public:
  SessionManager(SessionManagerOptions opts, Store* store, AgentPool* pool, std::vector<v1::Scenario> scenarios);
  ~SessionManager() override;

  // Loads stored sessions; any that was in flight when a previous controller
  // stopped is marked aborted (its agents died with that controller). A
  // record that cannot be read is logged and skipped.
  Status Init();
  // Where launched agents dial; starts the local launcher.
  void SetAgentDialAddress(const std::string& addr);
  // Aborts live sessions and stops every agent this controller started.
  void Shutdown();

  std::vector<v1::ScenarioSummary> ListScenarios() const;
  StatusOr<v1::ScenarioDetail> GetScenario(const std::string& id) const;
  // `owner`: the name of the token that starts it (it alone acts on it).
  StatusOr<v1::SessionInfo> Start(const v1::StartSessionRequest& req, const std::string& owner = "");
  // The name of the token that started session `id`; NotFound if none.
  StatusOr<std::string> OwnerOf(const std::string& id);
  std::vector<v1::SessionInfo> List();
  StatusOr<v1::SessionInfo> Info(const std::string& id);
  StatusOr<v1::SessionStatus> GetStatus(const std::string& id);
  StatusOr<v1::TraceResponse> GetTrace(const v1::GetTraceRequest& req);
  StatusOr<v1::MetricsResponse> GetMetrics(const v1::GetMetricsRequest& req);
  // session_checkpoints.cc
  StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(const v1::ListCheckpointsRequest& req);
  StatusOr<v1::VerifyCheckpointResponse> VerifyCheckpoint(const v1::VerifyCheckpointRequest& req);
  StatusOr<v1::LogsResponse> GetLogs(const v1::GetLogsRequest& req);
  StatusOr<v1::SubmitDiagnosisResponse> Diagnose(const v1::SubmitDiagnosisRequest& req);
  StatusOr<v1::ApplyFixResponse> Fix(const v1::ApplyFixRequest& asked);
  StatusOr<v1::RequestHintResponse> Hint(const std::string& id);
  // An exam item's hint policy: off, or `cost` points per hint (0: the
  // scenario's price).
  Status SetExamHints(const std::string& id, bool allowed, int cost);
  // `sealed`: what was submitted only, even after scoring (an exam's
  // candidate reads no score).
  StatusOr<v1::ScoreReport> GetScore(const std::string& id, bool sealed = false);
  // Ends a live session (it is scored as it stands) and waits for that;
  // `reason` is what its end says.
  StatusOr<v1::SessionInfo> End(const std::string& id, const std::string& reason = "ended by the learner");
  // A finished drill's postmortem (session_postmortem.cc), from its shared
  // timeline; FailedPrecondition while the drill is live.
  StatusOr<v1::PostmortemResponse> Postmortem(const std::string& id,
                                              const std::vector<v1::TimelineItem>& timeline);
  // Called with every event a session records (the shared timeline's
  // controller entries). Set before Init.
  void SetEventSink(std::function<void(const std::string& session_id, const v1::SessionEvent&)> sink) {
    event_sink_ = std::move(sink);
  }
  // Posts an event on a live session's timeline (an exam's warnings).
  void Announce(const std::string& id, const std::string& kind, const std::string& message);

  // AgentListener
  void OnSteps(const std::string& agent_id, const v1::StepBatch& batch) override;
  void OnJobEvent(const std::string& agent_id, const v1::JobEvent& event) override;
  void OnAgentGone(const std::string& agent_id, const std::string& reason) override;
  void OnFlightRecord(const std::string& agent_id, const v1::FlightRecord& record) override;
  StatusOr<v1::FlightRecorderResponse> GetFlightRecorder(const v1::GetFlightRecorderRequest& req);
  void OnProbeReport(const std::string& agent_id, const v1::ProbeReport& report) override;
  // Runs a communication probe on the session's job between two of its
  // steps (session_probe.cc).
  StatusOr<v1::RunProbeResponse> RunProbe(const v1::RunProbeRequest& req);
  // From the local launcher: an agent process ended.
  void OnAgentExit(const std::string& agent_id, int pid, const std::string& how);

 private:
  struct Rank {
    std::string agent_id;
    std::string host;
    int pid = 0;
    RankState state = RankState::kIdle;
    std::string message;
    std::vector<v1::StepReport> steps;  // this run's newest reports, in order
    History history;                    // this run's training signals, the whole run
    std::chrono::steady_clock::time_point last_step_at;  // when the newest report arrived
  };
  struct Run {
    std::string id;
    RunKind kind = RunKind::kMain;
    int64_t steps_total = 0;
    // The first step any rank reported: 0 from scratch, a resumed run's
    // checkpoint step; -1 before any report (the kept reports are trimmed,
    // so they cannot say).
    int64_t first_step = -1;
    RunState state = RunState::kStarting;
    std::chrono::steady_clock::time_point last_progress;
    // The first rank that failed or was lost (torchrun's "root cause (first
    // observed failure)"); -1 while none has.
    int first_failed_rank = -1;
  };
  struct Session {
    std::mutex mu;
    std::condition_variable cv;
    SessionState state = SessionState::kCreated;  // rec.info().state() is its name
    v1::SessionRecord rec;
    const v1::Scenario* scenario = nullptr;
    std::vector<Rank> ranks;
    std::optional<Run> run;
    bool fix_pending = false;  // a fix was accepted; the driver applies it
    v1::JobSpec healthy_job;   // as the baseline ran it: measured beside the fix
    bool end_requested = false;
    std::string end_reason;    // why the learner (or the clock) ended it
    int run_counter = 0;
    int agent_counter = 0;
    std::string join_token;                // agents launched for this session present it
    std::set<std::string> retired;         // agents we stopped on purpose
    std::set<std::string> replaced_hosts;  // hosts the learner moved ranks off
    std::set<std::string> netns_hosts;     // the fabric's hosts made for this session (HostKey)
    int main_restarts = 0;    // elastic restarts of the drill's run so far
    int64_t main_newest_step = -1;  // the newest step the drill's run reached, across its restarts
    int64_t newest_valid_seen = -1;  // the newest checkpoint that verified when the job first failed
    bool main_down = false;   // its restarts are spent: it stays failed
    std::deque<v1::SessionEvent> events;
    // The baseline's and the main run's histories (by run name), kept when
    // the next run starts: `metrics --run baseline|main`.
    std::map<std::string, std::vector<History>> kept_history;
    // Flight-recorder dumps being collected, by request: concurrent `fr`
    // calls each get their own replies.
    std::map<int64_t, std::map<int, v1::FlightRecord>> fr_replies;
    std::mutex probe_mu;                     // one probe at a time
    int64_t probe_request = 0;               // the probe being collected
    std::map<int, v1::ProbeReport> probe_replies;  // by rank
    std::set<int> probe_started;             // ranks that began the probe
    std::mutex join_mu;                      // guards `driver` (assignment and join)
    std::thread driver;
  };
  using Lock = std::unique_lock<std::mutex>;

  std::atomic<int64_t> fr_counter_{0};
  StatusOr<std::shared_ptr<Session>> Find(const std::string& id);
  std::shared_ptr<Session> SessionOfAgent(const std::string& agent_id);
  const v1::Scenario* FindScenario(const std::string& id) const;
  std::string NewSessionIdLocked();  // mu_ held: unused in memory and in the store
  std::string UnknownScenario(const std::string& id) const;

  // Driver steps; each is called with the session lock held.
  void Drive(std::shared_ptr<Session> s);
  // Resolves every draw and seals the answer key in the record.
  Status SealAnswer(Session& s);
  Status LaunchRank(Session& s, Lock& lock, int rank, const std::string& host);
  // True if the rank's agent process is there and connected.
  bool AgentAlive(const Session& s, int rank);
  Status EnsureAgents(Session& s, Lock& lock);
  // `job`: run this instead of the session's job (which the learner reads
  // through status and config, so it is never swapped out).
  Status RunJob(Session& s, Lock& lock, RunKind kind, int64_t steps, bool with_faults,
                const v1::JobSpec* job = nullptr);
  // `restart`: the drill's run again after a failure (elastic), its curves
  // continued. A one-off fault (registry.h `once`) is sent to no run once
  // the drill's run has passed its trigger step.
  void StartRun(Session& s, RunKind kind, int64_t steps, bool with_faults,
                const v1::JobSpec* job = nullptr, bool restart = false);
  // The drill's run until the learner acts (true) or `deadline` (false),
  // restarted after failures as job.elastic says.
  bool SuperviseMain(Session& s, Lock& lock, std::chrono::steady_clock::time_point deadline);
  // Hosts a crash took for good (rank_crash stays_down, past its trigger).
  static std::set<std::string> DownHosts(const Session& s);
  // The job's hosts that are among `down`, against what job.elastic.min_nodes
  // needs to go on without them, and the words the events say it in.
  struct HostsLeft {
    std::string gone;  // the job's hosts among `down`, comma separated
    int up = 0, world = 0, min_nodes = 0;
    bool enough() const { return up >= min_nodes; }
    // "host(s) X did not come back, 2 of its 3 hosts are up and it needs 3 (elastic.min_nodes)"
    std::string shortfall() const;
    // "on the 2 hosts that are up (world size 3 -> 2, elastic.min_nodes 2; host(s) X did not come back)"
    std::string resized() const;
  };
  static HostsLeft CountHostsLeft(const Session& s, const std::set<std::string>& down);
  // The job goes on without the ranks on `down` hosts (elastic.min_nodes).
  void ShrinkWorld(Session& s, Lock& lock, const std::set<std::string>& down);
  bool RunOver(const Session& s) const;
  // finished/failed once every rank has ended.
  void UpdateRunState(Session& s);
  // `grace_s` >= 0: how long a rank may take to stop before it is killed
  // (default: the collective timeout plus 5 s, at most 15 s).
  void StopRun(Session& s, Lock& lock, double grace_s = -1);
  void RetireAgent(Session& s, Lock& lock, int rank);
  // `r` may be outside s.ranks; it is not touched after the lock is let go.
  void RetireAgent(Session& s, Lock& lock, Rank& r);
  // Where a rank of `host` runs: its namespace on the fabric (made on first
  // use), or the controller's own without a fabric.
  StatusOr<Placement> PlaceOnHost(Session& s, const std::string& host);
  // Removes the session's namespace for `host` (its agents are gone).
  void RemoveHost(Session& s, const std::string& host);
  void Teardown(Session& s, Lock& lock);
  void MarkRankLost(Session& s, int rank, const std::string& why);
  // The state and its name in the record, together (no save, no wake-up).
  void RecordState(Session& s, SessionState state);
  // RecordState, then saves and wakes whoever waits on the session.
  void SetState(Session& s, SessionState state);
  void AddEvent(Session& s, const std::string& kind, int rank, const std::string& message);
  void Save(Session& s);
  // Scores the session as it stands, stores the score, stops its agents and
  // moves it to `state` (scored or ended).
  void Finish(Session& s, Lock& lock, SessionState state);
  v1::ScoreReport ComputeScore(Session& s);
  // The measured verification of an applied fix (session_grading.cc).
  v1::Verification VerifyFix(Session& s, Lock& lock);
  // Every checkpoint under `dir`, newest first, as firedrill-ckpt verifies
  // them (run without the session's lock: it hashes every shard).
  StatusOr<std::vector<v1::CheckpointEntry>> CheckpointsIn(const std::string& dir) const;
  // The step of the newest of them that verifies; -1 for none (unlocked too).
  StatusOr<int64_t> NewestValidStep(const std::string& dir) const;
  // probe resume (session_resume_probe.cc); the caller holds s.probe_mu.
  StatusOr<v1::RunProbeResponse> RunResumeProbe(Session& s, const v1::ProbeSpec& spec);
  // The one checkpoint verification's runs resume from: the fix's
  // checkpoint.resume_from with "latest" resolved, now, as the trainer does
  // (the newest step with a manifest, valid or not)
  // checkpoint in the job's directory; "" for none (from step 0).
  StatusOr<std::string> VerifyResumePoint(Session& s, Lock& lock);
  // Runs `reference` (faults off) `steps` steps to `end_step` and compares
  // its parameters with `fixed` (by rank): verify.params_vs_reference.
  Status CompareWithReference(Session& s, Lock& lock, const v1::JobSpec& reference, int64_t steps, int64_t end_step,
                              const std::vector<std::string>& fixed, v1::Verification* out);
  // Where that reference starts: a checkpoint no fault had reached yet.
  StatusOr<std::string> CleanStart(Session& s, Lock& lock, const std::string& resume);
  // Runs `job` (or the session's) for one verification window and measures it.
  Status MeasureRun(Session& s, Lock& lock, RunKind kind, const v1::JobSpec* job, bool with_faults,
                    WindowStats* out);
  v1::RunSummary Summarize(const Session& s, int window) const;
  std::vector<std::vector<v1::StepReport>> StepsByRank(const Session& s) const;
  // A rank slot for a new agent: nothing of the old one's but the curve of
  // the run it was in, which StartRun keeps (`metrics --run main` after a
  // host was replaced).
  static void Renew(Rank& r);
  // A run of the healthy job (the baseline, or verification's healthy
  // side): what a learner reads of it withholds its settings (run_metrics.h).
  static bool HealthyRun(const Session& s);
  // A healthy run's timeline and collectives would show what its settings
  // make of a step (bucket sizes, micro-batches): `tool` is refused then.
  static Status NotHealthyRun(const Session& s, const std::string& tool);
  // FailedPrecondition unless the drill offers the tool.
  Status ToolOffered(const Session& s, const std::string& tool) const;
  // Joins the session's driver (once, whoever asks first).
  void JoinDriver(Session& s);

  SessionManagerOptions opts_;
  Store* store_;
  AgentPool* pool_;
  std::vector<v1::Scenario> scenarios_;
  std::unique_ptr<Launcher> launcher_;

  // Guards the maps below. Taken briefly, possibly inside a session's lock;
  // never held while taking one.
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  std::map<std::string, std::string> agent_session_;  // agent id -> session id
  std::atomic<bool> shutting_down_{false};  // set under mu_; StopRun reads it without
  std::function<void(const std::string&, const v1::SessionEvent&)> event_sink_;
};

}  // namespace firedrill::controller
