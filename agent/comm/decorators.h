// Backends that wrap a backend, in the style of c10d's ProcessGroupWrapper:
// each adds one concern and forwards everything else to the backend inside.
// A group builds the ones its options ask for (a recorder, a link seam):
// training groups have both on every rank alike, probe groups only the link
// (bench/decorator_bench.cc measures what both cost with no fault active).
#pragma once

#include <functional>
#include <memory>

#include "agent/comm/backend.h"
#include "agent/comm/flight_recorder.h"
#include "faults/seams.h"

namespace firedrill::agent::comm {

// Records every collective in `recorder`: started when posted (with the
// inner backend's name as its transport), completed or failed when a Wait
// first sees it finish, failed at once when it could not start.
std::shared_ptr<Backend> WithFlightRecorder(std::shared_ptr<Backend> inner, std::shared_ptr<FlightRecorder> recorder);

// One rank's link: the launches that wait out a degraded link run on its
// thread, one at a time in the order they were posted. While anything is
// queued, later launches queue behind it, so every rank still hands its
// collectives to the transports in the same order. Several backends of one
// rank share it (their bytes cross the same link).
class LinkQueue {
 public:
  LinkQueue();
  ~LinkQueue();  // runs what is still queued, then stops
  // Nothing queued or running: a launch that need not wait may go straight
  // to its backend without overtaking anything.
  bool Idle() const;
  void Post(std::function<void()> fn);
  // Blocks until everything queued so far has run.
  void Drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// While `link` (faults/seams.h) is degraded, each collective waits its delay
// for its link bytes before `inner` gets it: on `queue`'s thread, so that
// the caller (backward, for gradient buckets) is not held up and every rank
// sees the collective finish late. A receive is posted at once and waits
// out the delay after its data arrived: the message is only usable once it
// crossed this rank's link. Nothing is delayed while the link is healthy.
std::shared_ptr<Backend> WithLinkFaults(std::shared_ptr<Backend> inner, const faults::LinkModel* link,
                                        std::shared_ptr<LinkQueue> queue);

}  // namespace firedrill::agent::comm
