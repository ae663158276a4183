#include "faults/deploy_change.h"

#include <set>
#include <string>

#include "faults/job_setting.h"

namespace firedrill::faults {

Status ValidateDeployChange(const v1::FaultSpec& spec) {
  const auto& set = spec.deploy_change().set();
  if (set.empty())
    return InvalidArgument(
        "params.set is empty: list the settings the deploy changed, [{key: K, value: V}, ...]");
  std::set<std::string> seen;
  v1::JobSpec scratch;
  for (int i = 0; i < set.size(); ++i) {
    const std::string where = "params.set[" + std::to_string(i) + "]";
    if (!seen.insert(set[i].key()).second)
      return InvalidArgument(where + ".key '" + set[i].key() + "' is set twice");
    if (Status st = SetJobKey(&scratch, set[i].key(), set[i].value()); !st.ok())
      return InvalidArgument(where + " does not apply: " + st.message());
  }
  // A deploy is the whole job's, from its start.
  if (!spec.target().all_ranks())
    return InvalidArgument("target must be {all_ranks: true}: a deploy changes the whole job's settings");
  if (spec.trigger().step().has_draw() || spec.trigger().step().value() != 0)
    return InvalidArgument("trigger.step must be 0: the deploy set them before the job started");
  return Status::Ok();
}

void ApplyDeployChange(const v1::ResolvedFault& fault, v1::JobSpec* job) {
  // Validated when the scenario loaded: every setting applies.
  for (const auto& kv : fault.deploy_change().set()) (void)SetJobKey(job, kv.key(), kv.value());
}

}  // namespace firedrill::faults
