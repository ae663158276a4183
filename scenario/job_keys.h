// The job's settable keys (dotted JobSpec paths, as `firedrill fix --set`
// and `firedrill config` name them) and, in one table, what each one is:
//   workload     the job being trained: model, data shape and dataset,
//                batch, world size, precision, optimiser maths, steps. A fix
//                may change one only where the drill's `may_change` names it,
//                or throughput would be compared across different jobs.
//   operational  how the job is run: loader workers and read-ahead, buckets,
//                sampler, timeouts, interfaces, checkpoint cadence, threads.
//   environment  what the simulated machine is (storage latency, the device
//                budget): no fix changes those.
#pragma once

#include <string>
#include <vector>

namespace firedrill::scenario {

enum class JobKeyClass { kWorkload, kOperational, kEnvironment };

const char* JobKeyClassName(JobKeyClass c);

// All settable dotted keys, sorted.
std::vector<std::string> JobSettingKeys();

// The class of a settable key (every key of JobSettingKeys has one; a test
// holds the table to the key list). Unknown keys are kEnvironment.
JobKeyClass ClassOfJobKey(const std::string& key);
// True if the table names `key` or one of its prefixes.
bool InJobKeyTable(const std::string& key);

// True if `key` is named by `allowed` (a dotted key or one of its prefixes:
// "loss_scale" allows "loss_scale.mode").
bool KeyAllowed(const std::string& key, const std::vector<std::string>& allowed);

}  // namespace firedrill::scenario
