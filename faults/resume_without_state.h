// resume_without_state: the job's restart path loads the weights and
// nothing else. The overlay sets checkpoint.restore to the parts a resume
// puts back (params.restore, e.g. "model": what a script written for
// fine-tuning does, Megatron's --no-load-optim --no-load-rng, or Hugging
// Face's ignore_data_skip for the data position). The checkpoints still
// hold all of the state; a resume leaves the rest as a fresh process has
// it: AdamW's moments and step count at zero (its first updates are
// lr-sized in every coordinate: the loss jumps), the loss scale at its
// initial value, the data loader at the start of the dataset (samples the
// job already trained on come again), the default generator as the new
// process left it (nothing in training draws from it here: the validator
// refuses a resume that leaves out only that). Only a
// restart shows it, so a scenario pairs it with one (rank_crash); every
// checkpoint written after that restart carries the damaged trajectory.
#pragma once

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

Status ValidateResumeWithoutState(const v1::FaultSpec& spec);
void ApplyResumeWithoutState(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
