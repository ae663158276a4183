// The one explicit list of fault kinds. Adding a kind: write its file pair,
// add a params field to FaultSpec/ResolvedFault, and add one entry here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "faults/fault.h"

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
  std::function<std::unique_ptr<Fault>(const v1::ResolvedFault&, Env&)> make;
};

const std::vector<FaultKind>& BuiltinFaultKinds();
const FaultKind* FindFaultKind(const std::string& name);
std::vector<std::string> FaultKindNames();

}  // namespace firedrill::faults

namespace firedrill::faults {
// The shared cause taxonomy a learner diagnoses from. Broader than the kinds
// implemented so far, so the list itself gives nothing away.
const std::vector<std::string>& KnownCauses();
bool IsKnownCause(const std::string& cause);
}  // namespace firedrill::faults
