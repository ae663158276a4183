// `firedrill autopilot SCENARIO`: plays a learner through the public Drill
// API only. It never reads scenario files or answer keys: it watches the
// job's telemetry and config as a learner can, reasons its way to a cause
// (printing the evidence), applies a fix and reports the measured score. It
// proves a scenario is solvable from its evidence, and lets an instructor
// check a new one.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "firedrill/v1/controller.pb.h"

namespace firedrill::cli {

struct AutopilotFinding {
  bool found = false;
  std::string cause;       // from the shared cause taxonomy
  std::vector<int> ranks;  // culprit ranks; empty when the whole job is affected
  v1::ApplyFixRequest fix; // session_id left empty
  std::string evidence;    // the reasoning, in words
  // The telemetry points at the interconnect but cannot say where: run the
  // probes and let ReasonProbes() decide.
  bool needs_probes = false;
  // fp16 overflows although the scale backs off: a value of the forward
  // pass does not fit. Run `probe activations` and let ReasonActivations()
  // say which layer.
  bool needs_activations = false;
};

// One look at the job: everything the telemetry and config point at (two
// faults at once give two findings). Pure (no I/O), so the rules are
// unit-tested on recorded statuses. A finding must be a change from the
// healthy baseline the status shows: padding that the baseline had too is
// how the job always ran, not this incident's cause.
// `held`: the findings of the look before, where there was one. A
// straggler seen there stays on a lower bar (hysteresis): a comm-bound job
// on shared cores shows its straggler's slowdown at 1.1-1.25x its
// baseline's step, and a bar of 1.15 alone flickered look to look.
std::vector<AutopilotFinding> ReasonAll(const v1::SessionStatus& st,
                                        const std::vector<AutopilotFinding>* held = nullptr);
// The first of ReasonAll, or none.
AutopilotFinding Reason(const v1::SessionStatus& st);
// The hosts' mean time between failures a briefing states ("MTBF 600 s",
// "MTBF 10 min"), in seconds; 0 when it states none.
double BriefedMtbfS(const std::string& briefing);
// The first host count a briefing states ("trained on four hosts", "on 8
// nodes"): the world size the job ran at before the incident; 0 when it
// states none.
int BriefedWorldSize(const std::string& briefing);
// True when nothing is wrong that the telemetry can show: every rank steps,
// throughput is at the healthy baseline's and the ranks are balanced.
// `why` says so in numbers.
bool LooksHealthy(const v1::SessionStatus& st, std::string* why);
// True when every running rank stopped reporting steps (a hang).
bool LooksHung(const v1::SessionStatus& st);
// A hung job: what the flight recorders say.
AutopilotFinding ReasonHang(const v1::SessionStatus& st, const v1::FlightRecorderResponse& fr);

// A communication-bound job (needs_probes): what the all-reduce sweep and
// the pairwise matrix say.
AutopilotFinding ReasonProbes(const AutopilotFinding& before, const v1::RunProbeResponse& allreduce,
                              const v1::RunProbeResponse& p2p);

// What the merged timeline says about the gradient all-reduces: how many a
// step makes, how big and how long each is (medians over ranks and steps).
std::string TraceEvidence(const v1::TraceResponse& trace);
// What the loss and gradient-norm curves of a run show, in words.
std::string MetricsEvidence(const v1::MetricsResponse& m);

// A job that steps as fast as its baseline and as evenly may still not be
// learning as it did: the main run's loss curve beside the healthy
// baseline's over the steps both ran (same seed, data and initial weights).
// `diverged` is set when the main run's loss is well above the baseline's
// (or not finite); the finding says why when the job's learning-rate
// settings explain it (the rate it trains at, from the main run's lr
// series, against optim.lr and the scaling rule in `job`; the global batch
// against the one the same launch command made at `briefed_world` ranks).
struct CurveFinding {
  bool diverged = false;
  AutopilotFinding finding;  // found only when the settings explain the gap
  std::string evidence;      // the curves in numbers, whether or not explained
};
CurveFinding ReasonCurves(const v1::MetricsResponse& main, const v1::MetricsResponse& baseline,
                          const v1::JobSpec& job, int briefed_world = 0);

// Where the forward pass first holds an inf or a NaN (`probe activations`):
// the layer whose op produced it runs in fp32 (model.keep_fp32). Found
// only when that point is a layer's (not the input, not the loss).
AutopilotFinding ReasonActivations(const AutopilotFinding& before, const v1::RunProbeResponse& activations);

// Replicas compared (`probe checksum`): tensors whose hash is not the same
// on every rank mean the data-parallel copies went apart. The culprits are
// the ranks that hold other bytes than most ranks do; found only then.
AutopilotFinding ReasonChecksums(const v1::RunProbeResponse& checksums);
// Where to roll back to: the newest checkpoint (of `verified`, each as
// `ckpt verify` answered, newest first) that is valid and whose replicas
// all agree; "" if none is. `why` says what each one showed.
std::string RollbackPoint(const std::vector<v1::VerifyCheckpointResponse>& verified, std::string* why);

// The newest checkpoint in `list` (newest first, as `ckpt list` gives it)
// that verifies, its directory; "" for none. `why` gets each one looked at
// and its verdict.
std::string NewestValidCheckpoint(const v1::ListCheckpointsResponse& list, std::string* why);

// The step the job's first elastic restart resumed from (its job_restarted
// event: "... resuming from latest (step-N) ..."); -1 if it has not
// restarted, or restarted from step 0.
int64_t FirstRestartStep(const v1::SessionStatus& st);

// A save and resume against the same steps straight (`probe resume`): the
// parts of the state that differ mean the job's resume path loses them.
// The fix loads all of it and resumes from the newest checkpoint in `list`
// written before the first restart (`restart_step`): every later one
// descends from the lossy resume. Found only when parts differ.
AutopilotFinding ReasonResume(const v1::RunProbeResponse& resume, const v1::ListCheckpointsResponse& list,
                              int64_t restart_step);

// Starts a session of `scenario` and plays it (PilotSession).
int RunAutopilot(CliContext& ctx, const std::string& scenario, int64_t seed);
// Plays a session already started, from where it stands, to its score.
// Not a command: a learner's own session is theirs to play. The e2e tests
// use it to read every learner surface of a session first and then solve
// that same session, instead of starting each scenario twice.
int PilotSession(CliContext& ctx, const std::string& id);

}  // namespace firedrill::cli
