// Fixes every draw of a scenario's faults from the session seed, once, at
// session start. Kinds never draw anything themselves.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

// Resolves a value-or-draw; `label` keys the draw so each is independent.
int64_t ResolveInt(const v1::IntOrDraw& v, uint64_t seed, const std::string& label);

// hosts[r] is the host holding rank r when the session starts.
StatusOr<std::vector<v1::ResolvedFault>> ResolveFaults(const v1::Scenario& scenario, uint64_t seed,
                                                       const std::vector<std::string>& hosts);

// The answer key's findings: `answer.findings`, or the one finding of
// `answer.cause` + `answer.culprit_ranks` (unresolved).
std::vector<v1::AnswerFinding> AnswerKey(const v1::Scenario& scenario);

// Resolves a RankRef such as `$faults.0.target.rank` against resolved faults.
StatusOr<int> ResolveRankRef(const v1::RankRef& ref, const std::vector<v1::ResolvedFault>& faults);

// The faults that an agent on `host` running `rank` must carry.
std::vector<v1::ResolvedFault> FaultsFor(const std::vector<v1::ResolvedFault>& all, int rank,
                                         const std::string& host);

}  // namespace firedrill::faults
