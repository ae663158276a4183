// dataloader_starvation: storage got slow and the loader cannot hide it.
// Every sample costs `sample_latency_ms` in the thread that makes the batch
// (a sleep, so it costs wall time, not CPU), from the trigger step, on the
// targeted ranks (one host, or every rank for shared storage). The deploy
// also runs the loader with too few workers and too little read-ahead (a job
// overlay), so the training loop waits on data. Raising data.num_workers /
// data.prefetch_depth hides the latency again; the latency itself stays.
#pragma once

#include "faults/fault.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

class DataLoaderStarvation : public Fault {
 public:
  DataLoaderStarvation(FaultId id, double sample_latency_ms) : id_(id), latency_ms_(sample_latency_ms) {}
  Status Apply(Seams& s) override;
  Status Recover(Seams& s) override;

 private:
  FaultId id_;
  double latency_ms_;
};

Status ValidateDataLoaderStarvation(const v1::FaultSpec& spec);
// The loader settings the deploy runs with.
void ApplyDataLoaderStarvation(const v1::ResolvedFault& fault, v1::JobSpec* job);

}  // namespace firedrill::faults
