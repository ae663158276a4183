// An exam's audit trail as a hash chain. Each record carries the SHA-256 of
// the record before it, so editing, removing or reordering any record breaks
// the chain at that point, and `firedrill exam verify-audit` names the line.
//
// What a chain cannot show on its own: that its newest records were cut off
// (nothing follows them to disagree), or that someone rewrote every hash
// after an edit (SHA-256 needs no key). Both are closed by the head: the
// count and the last hash, which each signed result carries (signing.h), so
// a trail checked against a result it produced must end exactly there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::controller {

// The `prev` of the first record.
inline const std::string kAuditGenesis(64, '0');

struct AuditRecord {
  int64_t seq = 0;      // 1 for the first record, then one more each
  int64_t unix_ms = 0;  // when the controller recorded it
  std::string actor;    // who: "candidate:ada", "proctor:lee", "controller"
  std::string action;   // what: an RPC ("Diagnose"), or an event ("warning")
  std::string args;     // its arguments, as a JSON object's text
  std::string prev;     // hex SHA-256 of the previous record (kAuditGenesis)
  std::string hash;     // hex SHA-256 of this record without `hash`
};

// The count of records and the hash of the last one (kAuditGenesis, 0 when
// empty): what a result anchors.
struct AuditHead {
  int64_t count = 0;
  std::string hash = kAuditGenesis;
  bool operator==(const AuditHead& o) const { return count == o.count && hash == o.hash; }
};

// The record that follows `head`, hashed. `args_json` must be a JSON object
// (InvalidArgument otherwise: the trail must stay verifiable).
StatusOr<AuditRecord> NextAuditRecord(const AuditHead& head, int64_t unix_ms, const std::string& actor,
                                      const std::string& action, const std::string& args_json);

// The head after `r`.
inline AuditHead HeadAfter(const AuditRecord& r) { return {r.seq, r.hash}; }

// One line of the exported trail: canonical JSON (keys sorted, no spaces)
// with the hash, and no newline.
std::string AuditLine(const AuditRecord& r);
// The whole trail: one line per record, each ending in '\n'.
std::string AuditText(const std::vector<AuditRecord>& records);

// Checks an exported trail (the text of AuditText). `where` (a file name)
// prefixes messages. On success returns the head, and each record's hash in
// `hashes` when given; on the first problem, DataLoss naming the line and
// what it means ("audit.jsonl:7: record 7's hash does not match its
// contents: the record was edited").
StatusOr<AuditHead> VerifyAuditText(const std::string& text, const std::string& where,
                                    std::vector<std::string>* hashes = nullptr);

// Checks that a verified trail (its records' hashes) holds the head a signed
// result anchors: record `anchored.count` has `anchored.hash`. A trail may
// go on after the result was made (a rescore is recorded after it); the
// chain fixes everything up to the anchor, so nothing before it can differ.
Status CheckAuditAnchor(const std::vector<std::string>& hashes, const AuditHead& anchored,
                        const std::string& where);

}  // namespace firedrill::controller
