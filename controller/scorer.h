// Rubric arithmetic. Every item says what earned or lost its points.
#pragma once

#include <optional>

#include "firedrill/v1/controller.pb.h"
#include "firedrill/v1/scenario.pb.h"
#include "firedrill/v1/store.pb.h"

namespace firedrill::controller {

struct ScoreInputs {
  const v1::Scenario* scenario = nullptr;
  const v1::SessionRecord* record = nullptr;
  std::optional<v1::SubmitDiagnosisRequest> diagnosis;  // the latest one
  bool fix_applied = false;
  bool fix_matches_remediation = false;
  double elapsed_s = 0;  // faulty run start -> fix applied
};

v1::ScoreReport Score(const ScoreInputs& in);

// True if the applied fix contains every action of one accepted remediation.
bool MatchesRemediation(const v1::Scenario& scenario, const v1::SessionRecord& record,
                        const v1::ApplyFixRequest& fix);

}  // namespace firedrill::controller
