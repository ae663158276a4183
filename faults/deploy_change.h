// deploy_change: someone deployed a change to the job's settings, and the
// job does not run as it did: a per-rank batch raised past what the device
// holds, another optimiser whose state does not fit, a deeper model, a
// pipeline split into too few micro-batches, another parallel layout. The
// faulted run starts with the settings (the controller applies them to the
// job before the learner's fix, so a fix can set them back or compensate
// for them); what they do is the trainer's own: an allocation the device
// cannot hold, a stage that idles, traffic on a slow link. The learner
// sees the settings as deployed in `firedrill config`, as the job's owner
// would, and the briefing says what the owners wanted from the change.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

// Each key named once, each value one its field takes; the whole job's
// settings, from its start. Whether the deployed job is a job the trainer
// runs is scenario validation's (it knows the job).
Status ValidateDeployChange(const v1::FaultSpec& spec);
void ApplyDeployChange(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
