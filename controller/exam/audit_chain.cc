#include "controller/exam/audit_chain.h"

#include <nlohmann/json.hpp>

#include "controller/exam/crypto.h"

namespace firedrill::controller {

namespace {

using json = nlohmann::json;

// Canonical text: keys sorted (nlohmann's default map), no spaces, UTF-8 as
// is; a byte sequence that is not UTF-8 becomes U+FFFD, the same on writing
// and on checking, so the hash is always of what the file holds.
std::string Canonical(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json Body(const AuditRecord& r, const json& args) {
  return json{{"seq", r.seq},       {"ms", r.unix_ms}, {"actor", r.actor},
              {"action", r.action}, {"args", args},    {"prev", r.prev}};
}

std::string Str(int64_t n) { return std::to_string(n); }

}  // namespace

StatusOr<AuditRecord> NextAuditRecord(const AuditHead& head, int64_t unix_ms, const std::string& actor,
                                      const std::string& action, const std::string& args_json) {
  json args;
  try {
    args = json::parse(args_json.empty() ? "{}" : args_json);
  } catch (const json::exception& e) {
    return InvalidArgument("audit record '" + action + "': its arguments are not JSON: " + e.what());
  }
  if (!args.is_object())
    return InvalidArgument("audit record '" + action + "': its arguments must be a JSON object, got " +
                           std::string(args.type_name()));
  AuditRecord r;
  r.seq = head.count + 1;
  r.unix_ms = unix_ms;
  r.actor = actor;
  r.action = action;
  r.prev = head.hash;
  // Read back through the canonical text, so that what the record holds is
  // what its line will say (a byte that was not UTF-8 replaced here too).
  const json line = json::parse(Canonical(Body(r, args)));
  r.actor = line["actor"].get<std::string>();
  r.action = line["action"].get<std::string>();
  r.args = Canonical(line["args"]);
  r.hash = Sha256Hex(Canonical(line));
  return r;
}

std::string AuditLine(const AuditRecord& r) {
  // Arguments that no longer parse (an edited database row) are written as
  // a string: the line then fails verification, naming the record.
  json args = json::parse(r.args.empty() ? "{}" : r.args, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) args = r.args;
  json body = Body(r, args);
  body["hash"] = r.hash;
  return Canonical(body);
}

std::string AuditText(const std::vector<AuditRecord>& records) {
  std::string out;
  for (const auto& r : records) out += AuditLine(r) + "\n";
  return out;
}

StatusOr<AuditHead> VerifyAuditText(const std::string& text, const std::string& where,
                                    std::vector<std::string>* hashes) {
  AuditHead head;
  if (hashes != nullptr) hashes->clear();
  if (text.empty()) return head;
  if (text.back() != '\n')
    return DataLoss(where + ": the last line has no newline: the trail was cut off or edited");
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const std::string at = where + ":" + Str(line_no) + ": ";
    if (line.empty()) return DataLoss(at + "an empty line: a record was removed or the file edited");
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      return DataLoss(at + "not a JSON record: the line was edited or damaged");
    }
    static const char* kStrings[] = {"actor", "action", "prev", "hash"};
    bool shaped = j.is_object() && j.size() == 7 && j.contains("seq") && j["seq"].is_number_integer() &&
                  j.contains("ms") && j["ms"].is_number_integer() && j.contains("args") &&
                  j["args"].is_object();
    for (const char* k : kStrings) shaped = shaped && j.contains(k) && j[k].is_string();
    if (!shaped)
      return DataLoss(at +
                      "not an audit record (it needs exactly seq, ms, actor, action, args, prev and hash): "
                      "the line was edited");
    if (Canonical(j) != line)
      return DataLoss(
          at + "not as firedrill wrote it (spacing, key order or escapes differ): the line was edited");
    const int64_t seq = j["seq"].get<int64_t>();
    if (seq != line_no)
      return DataLoss(at + "holds record " + Str(seq) + " where record " + Str(line_no) +
                      " belongs: records were removed, added or reordered");
    if (j["prev"].get<std::string>() != head.hash)
      return DataLoss(
          at + "record " + Str(seq) + " does not follow the record before it (its prev is not " +
          (line_no == 1 ? std::string("the start of a trail") : "record " + Str(line_no - 1) + "'s hash") +
          "): a record before it was edited, removed or reordered");
    const std::string hash = j["hash"].get<std::string>();
    j.erase("hash");
    if (Sha256Hex(Canonical(j)) != hash)
      return DataLoss(at + "record " + Str(seq) +
                      "'s hash does not match its contents: the record was edited");
    head = {seq, hash};
    if (hashes != nullptr) hashes->push_back(hash);
  }
  return head;
}

Status CheckAuditAnchor(const std::vector<std::string>& hashes, const AuditHead& anchored,
                        const std::string& where) {
  if (anchored.count <= 0) return DataLoss(where + ": the signed result anchors no audit trail");
  const int64_t n = static_cast<int64_t>(hashes.size());
  if (n < anchored.count)
    return DataLoss(where + ": the trail ends at record " + Str(n) + " but the signed result anchors " +
                    Str(anchored.count) + " records: records were cut off the end");
  if (hashes[anchored.count - 1] != anchored.hash)
    return DataLoss(where + ": record " + Str(anchored.count) +
                    "'s hash is not the one the signed result anchors: the trail was rewritten");
  return Status::Ok();
}

}  // namespace firedrill::controller
