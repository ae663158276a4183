#include "scenario/job_keys.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <utility>

#include "firedrill/v1/scenario.pb.h"

namespace firedrill::scenario {

namespace {

namespace pb = google::protobuf;

// Scalar leaves of a message, by dotted path.
void CollectLeaves(const pb::Descriptor* d, const std::string& prefix, std::vector<std::string>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;
    const std::string name = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectLeaves(f->message_type(), name, out);
    } else {
      out->push_back(name);
    }
  }
}

using C = JobKeyClass;

// Longest matching prefix wins. Every key JobSettingKeys() lists must match
// an entry (job_keys_test holds them together).
const std::vector<std::pair<std::string, C>>& Table() {
  static const std::vector<std::pair<std::string, C>> t = {
      {"world_size", C::kWorkload},
      {"model", C::kWorkload},
      // Recomputing activations trades memory for time; the maths is the same.
      {"model.activation_checkpointing", C::kOperational},
      // Which layers run in fp32 under fp16 or bf16: the numerics, as precision.
      {"model.keep_fp32", C::kWorkload},
      {"data.batch_size", C::kWorkload},
      {"data.seed", C::kWorkload},
      {"data.variable_length", C::kWorkload},
      {"data.min_seq_len", C::kWorkload},
      {"data.source", C::kWorkload},
      {"data.dataset_size", C::kWorkload},
      {"data.feature_scale", C::kWorkload},  // the features' units: what the data is
      // The pipeline standardising the features before the model sees them
      // (the data stays what it is).
      {"data.normalize", C::kOperational},
      {"data.num_workers", C::kOperational},
      {"data.prefetch_depth", C::kOperational},
      {"data.sampler", C::kOperational},
      {"data.drop_last", C::kOperational},          // the sampler's (DistributedSampler) setting
      {"data.sample_latency_ms", C::kEnvironment},  // what the storage is
      {"optim", C::kWorkload},
      // Where the optimiser's state lives (ZeRO-1 partitions it across the
      // ranks); the update is the same.
      {"optim.zero_stage", C::kOperational},
      {"precision", C::kWorkload},
      {"loss_scale", C::kWorkload},
      {"grad_accum_steps", C::kWorkload},  // changes the effective batch
      {"steps", C::kWorkload},
      {"memory.device_budget_mb", C::kEnvironment},  // what the device is
      {"checkpoint", C::kOperational},
      // Where checkpoints live is the storage's business; a fix that points
      // them elsewhere would write wherever the controller's account can.
      {"checkpoint.dir", C::kEnvironment},
      {"comm", C::kOperational},
      {"elastic", C::kOperational},  // the launcher's restart policy
      {"threads_per_rank", C::kOperational},
      // How the model is split across the ranks (tensor and pipeline
      // parallel sizes, the mesh order, the pipeline schedule): the model,
      // the global batch and the maths are the same.
      {"parallel", C::kOperational},
  };
  return t;
}

bool HasPrefix(const std::string& key, const std::string& prefix) {
  return key == prefix || (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
                           key[prefix.size()] == '.');
}

}  // namespace

const char* JobKeyClassName(JobKeyClass c) {
  switch (c) {
    case C::kWorkload:
      return "workload";
    case C::kOperational:
      return "operational";
    case C::kEnvironment:
      return "environment";
  }
  return "?";
}

std::vector<std::string> JobSettingKeys() {
  std::vector<std::string> keys;
  CollectLeaves(v1::JobSpec::descriptor(), "", &keys);
  std::sort(keys.begin(), keys.end());
  return keys;
}

JobKeyClass ClassOfJobKey(const std::string& key) {
  size_t best = 0;
  C cls = C::kEnvironment;
  for (const auto& [prefix, c] : Table()) {
    if (HasPrefix(key, prefix) && prefix.size() >= best) {
      best = prefix.size();
      cls = c;
    }
  }
  return cls;
}

bool InJobKeyTable(const std::string& key) {
  for (const auto& entry : Table())
    if (HasPrefix(key, entry.first)) return true;
  return false;
}

bool KeyAllowed(const std::string& key, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (HasPrefix(key, a)) return true;
  return false;
}

}  // namespace firedrill::scenario
