// Rubric arithmetic, and the sealed view of a score before it exists. Every
// item says what earned or lost its points; nothing here is reachable by a
// learner before the session is scored except Unscored(), which repeats
// what was submitted and nothing else.
#pragma once

#include <string>
#include <vector>

#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/scenario.pb.h"
#include "firedrill/v1/store.pb.h"

namespace firedrill::controller {

struct ScoreInputs {
  const v1::Scenario* scenario = nullptr;
  // Answer findings, faults, hosts, verification, the fix and whether it
  // matched, hints, and the diagnosis in force at the fix.
  const v1::SessionRecord* record = nullptr;
  std::vector<v1::DiagnosisRecord> diagnoses;  // every revision, oldest first
  double elapsed_s = 0;                        // fault onset -> fix applied
};

// The final score (the session is scored or ended).
v1::ScoreReport Score(const ScoreInputs& in);

// Before scoring: the submitted diagnoses and fix, "not scored yet".
v1::ScoreReport Unscored(const v1::SessionRecord& record, const std::vector<v1::DiagnosisRecord>& diagnoses);

// The findings a diagnosis request names: `findings`, or the one finding of
// `cause` + `culprit_ranks`.
std::vector<v1::Finding> FindingsOf(const v1::SubmitDiagnosisRequest& req);

// True if the fix does every action of one accepted remediation and nothing
// beyond it (no other host replaced, no setting outside the remediation's
// own and its may_also_set).
bool MatchesRemediation(const v1::Scenario& scenario, const v1::SessionRecord& record,
                        const v1::ApplyFixRequest& fix);

// The fix's collateral actions, one line each ("replaced the host of rank 1,
// which is not a culprit"); a machine of several ranks (ranks_per_host
// consecutive ranks) counts once, and only if none of its ranks is a culprit.
std::vector<std::string> CollateralActions(const v1::SessionRecord& record, const v1::ApplyFixRequest& fix,
                                           int ranks_per_host = 1);

// The step of a checkpoint directory ".../step-<N>"; -1 if it names none.
int64_t CheckpointStepOf(const std::string& dir);

// Rubric values with their documented defaults filled in.
int RevisionCost(const v1::Rubric& r);
int CollateralCost(const v1::Rubric& r);
int TimeLimitS(const v1::Rubric& r);
// Points a hint costs in this session: an exam's price, else the rubric's.
int HintCost(const v1::SessionRecord& rec, const v1::Rubric& r);

}  // namespace firedrill::controller
