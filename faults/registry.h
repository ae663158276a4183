// The one explicit list of fault kinds. Adding a kind: write its file pair,
// add a params field to FaultSpec/ResolvedFault, and add one entry here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

enum class Scope {
  kRank,  // follows the rank (software: config, data, code)
  kHost,  // follows the host (hardware): replacing the host removes it
};

struct FaultKind {
  std::string name;  // scenario `kind`, proto params field, file pair, runbook
  Scope scope;
  // Checks the kind's params; the message names the offending field.
  std::function<Status(const v1::FaultSpec&)> validate;
  // What acts at run time, on the agent's seams (runner.h); null for kinds
  // that act only through the deployed configuration.
  std::function<std::unique_ptr<Fault>(const v1::ResolvedFault&, FaultId)> make;
  // Optional: what the faulty deploy changes in the job's configuration
  // (the controller applies it to every run with faults armed, before the
  // learner's own settings, so a fix can undo it): the seam of the
  // deployed configuration, which holds for the whole run. Null for kinds
  // that only act at run time.
  std::function<void(const v1::ResolvedFault&, v1::JobSpec*)> apply_to_job;
  // Acts only where a run starts (what the process group is built from):
  // its trigger must be step 0, with no end and no flapping.
  bool at_start = false;
  // An event, not a condition: it happens once, in the drill's first run,
  // and is never sent to a later run (an elastic restart, verification),
  // whatever host that run is on. What it did (damaged files) stays done.
  bool once = false;
};

// Applies every fault's apply_to_job to `job` (unknown kinds are skipped:
// they were refused when the scenario loaded).
void ApplyFaultsToJob(const std::vector<v1::ResolvedFault>& faults, v1::JobSpec* job);

const std::vector<FaultKind>& BuiltinFaultKinds();
const FaultKind* FindFaultKind(const std::string& name);
std::vector<std::string> FaultKindNames();

}  // namespace firedrill::faults

namespace firedrill::faults {
// The shared cause taxonomy a learner diagnoses from: one spelling each
// (lower case, words joined by '-'), the symptom class ("compute", "input
// pipeline", "communication", "numerics", "state", "memory", "process", or
// "none" for no-fault) and a one-line meaning.
struct CauseInfo {
  std::string cause;
  std::string cause_class;
  std::string meaning;
};
const std::vector<CauseInfo>& CauseTaxonomy();
const std::vector<std::string>& KnownCauses();
bool IsKnownCause(const std::string& cause);
// The class of a cause; "" if unknown or no-fault. Rubrics may give partial
// credit for a wrong cause of the right class.
std::string CauseClass(const std::string& cause);
}  // namespace firedrill::faults
