// One field of a job from its text form: what a scenario file's scalar,
// `firedrill fix --set` and a deploy change (faults/deploy_change.h) all
// do. Syntax only: whether the job still makes sense afterwards is for
// scenario::ApplyJobSetting (which runs the job's checks) to say.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "firedrill/v1/scenario.pb.h"

namespace firedrill::faults {

// What a field takes, for messages: "an integer", "one of A, B", ...
std::string ExpectedValue(const google::protobuf::FieldDescriptor* f);
// Whole-string integer parse: no spaces, no trailing garbage, no overflow.
std::optional<int64_t> ParseInt(const std::string& s, int64_t lo, int64_t hi);
// Sets (or appends to, when repeated) a scalar field from text. Returns what
// was expected on failure, e.g. "expected an integer, got 'abc'".
std::optional<std::string> SetScalar(google::protobuf::Message* msg,
                                     const google::protobuf::FieldDescriptor* f, const std::string& text);
// Sets the scalar `key` of `job` ("data.batch_size", dotted through its
// sections) from `text`. An unknown key, a section or list named as a key,
// or text the field cannot take is an error, and leaves `job` as it was.
Status SetJobKey(v1::JobSpec* job, const std::string& key, const std::string& text);

}  // namespace firedrill::faults
