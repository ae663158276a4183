// Scenario files: YAML mapped onto v1::Scenario by protobuf reflection, then
// validated. Every error names file:line:column and the dotted field path,
// and says what was expected.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "scenario/job_keys.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::scenario {

// Parses YAML text; `filename` is used only in messages. Validates too.
StatusOr<v1::Scenario> ParseScenario(const std::string& yaml_text, const std::string& filename);
StatusOr<v1::Scenario> LoadScenarioFile(const std::string& path);
// Every *.yaml / *.yml in `dir`, sorted by id; the first bad file is an error.
StatusOr<std::vector<v1::Scenario>> LoadScenarioDir(const std::string& dir);
// Every scenario of every folder (the shipped catalogue and an instructor's
// own), sorted by id; an id used twice is an error naming both files, and
// so is finding no scenario at all.
StatusOr<std::vector<v1::Scenario>> LoadScenarioDirs(const std::vector<std::string>& dirs);

// Semantic checks on an already-parsed scenario (ranges, fault kinds and
// their params, references, rubric). `where` prefixes messages.
Status ValidateScenario(const v1::Scenario& s, const std::string& where);
Status ValidateJob(const v1::JobSpec& job, const std::string& where);
// The model-parallel checks alone (job.parallel against the model, the
// world size and what the model-parallel trainer does), for the trainer.
Status ValidateParallel(const v1::JobSpec& job, const std::string& where);

// What a learner reads before diagnosing (id, title, briefing) that names a
// fault kind or a cause ("straggler", "slow link"): legal, but it gives the
// drill away. One line per finding, for `scenarios validate` to warn with.
std::vector<std::string> ScenarioWarnings(const v1::Scenario& s);

// `firedrill fix --set KEY=VALUE`: KEY is a dotted JobSpec path such as
// `data.batch_size` or `comm.timeout_s`. Unknown keys and unparsable values
// are InvalidArgument with the list of known keys / the expected type. The
// resulting job is validated.
Status ApplyJobSetting(v1::JobSpec* job, const std::string& key, const std::string& value);

}  // namespace firedrill::scenario
