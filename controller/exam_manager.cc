#include "controller/exam_manager.h"

#include <algorithm>

#include "common/clock.h"
#include "common/log.h"
#include "common/text.h"
#include "controller/exam/crypto.h"
#include "controller/exam/exam_clock.h"
#include "controller/exam/json_read.h"
#include "controller/exam/variants.h"
#include "controller/session_state.h"
#include "controller/store.h"
#include "scenario/exam_file.h"

namespace firedrill::controller {

using json = nlohmann::json;
using namespace json_read;  // NOLINT: readers that never throw

namespace {

bool IsProctor(const Grant& g) { return (g.roles & (kRoleProctor | kRoleOwner)) != 0; }

std::string Actor(const Grant& g) {
  const char* role = g.roles & kRoleOwner       ? "owner"
                     : g.roles & kRoleCandidate ? "candidate"
                     : g.roles & kRoleProctor   ? "proctor"
                                                : "user";
  return std::string(role) + ":" + g.name;
}

std::string Minutes(int64_t ms) {
  const int64_t min = (ms + 59999) / 60000;
  return std::to_string(min) + (min == 1 ? " minute" : " minutes");
}

}  // namespace

std::string ExamManager::AuditScope(const std::string& exam_id, const std::string& candidate) {
  return "exam:" + exam_id + (candidate.empty() ? "" : "/candidate:" + candidate);
}

ExamManager::ExamManager(ExamManagerOptions opts, Store* store, Gatekeeper* gate, ExamSessions* sessions)
    : opts_(std::move(opts)), store_(store), gate_(gate), sessions_(sessions) {}

ExamManager::~ExamManager() { Shutdown(); }

int64_t ExamManager::Now() const { return opts_.now_ms ? opts_.now_ms() : UnixNowMs(); }

Status ExamManager::Init(bool clock_thread) {
  auto signer = ResultSigner::LoadOrCreate(opts_.key_file);
  if (!signer.ok()) return signer.status();
  signer_ = std::move(signer).value();
  auto exams = store_->LoadExams();
  if (!exams.ok()) return exams.status();
  auto docs = store_->LoadSittings();
  if (!docs.ok()) return docs.status();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : *exams) exams_[e.spec.id()] = Exam{e.spec, e.secret, e.created_unix_ms};
  for (const std::string& text : *docs) {
    const json d = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (d.is_discarded() || !d.is_object())
      return DataLoss("store " + store_->path() + ": a stored exam sitting cannot be read");
    auto s = std::make_unique<Sitting>();
    s->exam_id = Str(d, "exam_id");
    s->candidate = Str(d, "candidate");
    s->number = static_cast<int>(Int(d, "sitting"));
    s->started_ms = Int(d, "started_unix_ms");
    s->ended_ms = Int(d, "ended_unix_ms");
    s->ended_by = Str(d, "ended_by");
    for (const auto& m : json_read::List(d, "warned"))
      s->warned.insert(m.is_number_integer() ? m.get<int>() : 0);
    for (const auto& w : json_read::List(d, "warnings")) s->warnings.push_back(Text(w));
    for (const auto& i : json_read::List(d, "items")) {
      Item it;
      it.scenario = Str(i, "scenario");
      it.seed = Int(i, "seed");
      for (const auto& id : json_read::List(i, "sessions")) it.sessions.push_back(Text(id));
      s->items.push_back(std::move(it));
    }
    for (const auto& r : json_read::List(d, "rescores"))
      s->rescores.push_back({static_cast<int>(Int(r, "item")), static_cast<int>(Int(r, "points")),
                             Str(r, "by"), Str(r, "reason"), Int(r, "unix_ms")});
    s->signed_result = Str(d, "signed_result");
    s->total = static_cast<int>(Int(d, "total"));
    s->max_total = static_cast<int>(Int(d, "max_total"));
    s->passed = Bool(d, "passed");
    s->retake_allowed = Bool(d, "retake_allowed");
    // A sitting of an exam this store does not hold (or of another shape)
    // cannot be run or scored: it is left out, loudly, not guessed at.
    auto exam = exams_.find(s->exam_id);
    if (exam == exams_.end() || exam->second.spec.items_size() != static_cast<int>(s->items.size())) {
      spdlog::error("store {}: sitting {} of '{}' in exam '{}' does not match a stored exam; it is left out",
                    store_->path(), s->number, s->candidate, s->exam_id);
      continue;
    }
    sittings_[{s->exam_id, s->candidate}].push_back(std::move(s));
  }
  if (clock_thread) clock_ = std::thread([this] { ClockLoop(); });
  return Status::Ok();
}

void ExamManager::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(clock_mu_);
    stop_ = true;
  }
  clock_cv_.notify_all();
  if (clock_.joinable()) clock_.join();
}

void ExamManager::ClockLoop() {
  std::unique_lock<std::mutex> lock(clock_mu_);
  while (!stop_) {
    lock.unlock();
    Tick();
    lock.lock();
    clock_cv_.wait_for(lock, opts_.tick, [&] { return stop_; });
  }
}

Status ExamManager::Save(const Sitting& s) {
  json items = json::array();
  for (const Item& it : s.items)
    items.push_back({{"scenario", it.scenario}, {"seed", it.seed}, {"sessions", it.sessions}});
  json rescores = json::array();
  for (const controller::Rescore& r : s.rescores)
    rescores.push_back(
        {{"item", r.item}, {"points", r.points}, {"by", r.by}, {"reason", r.reason}, {"unix_ms", r.unix_ms}});
  const json d = {{"exam_id", s.exam_id},
                  {"candidate", s.candidate},
                  {"sitting", s.number},
                  {"started_unix_ms", s.started_ms},
                  {"ended_unix_ms", s.ended_ms},
                  {"ended_by", s.ended_by},
                  {"warned", std::vector<int>(s.warned.begin(), s.warned.end())},
                  {"warnings", s.warnings},
                  {"items", items},
                  {"rescores", rescores},
                  {"signed_result", s.signed_result},
                  {"total", s.total},
                  {"max_total", s.max_total},
                  {"passed", s.passed},
                  {"retake_allowed", s.retake_allowed}};
  return store_->SaveSitting(s.exam_id, s.candidate, s.number,
                             d.dump(-1, ' ', false, json::error_handler_t::replace));
}

StatusOr<AuditHead> ExamManager::Audit(const std::string& exam_id, const std::string& candidate,
                                       const std::string& actor, const std::string& action,
                                       const json& args) {
  auto r = store_->AppendAudit(AuditScope(exam_id, candidate), Now(), actor, action,
                               args.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!r.ok()) return r.status();
  return HeadAfter(*r);
}

StatusOr<AuditHead> ExamManager::Audit(const Sitting& s, const std::string& actor, const std::string& action,
                                       const json& args) {
  json a = args;
  a["sitting"] = s.number;
  return Audit(s.exam_id, s.candidate, actor, action, a);
}

StatusOr<const ExamManager::Exam*> ExamManager::ProctorExam(const Grant& by,
                                                            const std::string& exam_id) const {
  auto it = exams_.find(exam_id);
  // A proctor scoped to one exam is told of no other.
  if (it == exams_.end() || (!(by.roles & kRoleOwner) && !by.exam_id.empty() && by.exam_id != exam_id))
    return NotFound("no exam '" + exam_id + "' on this controller; `firedrill exam list` shows them");
  return &it->second;
}

ExamClock ExamManager::ClockOf(const Sitting& s) const {
  return ExamClock(s.started_ms, exams_.at(s.exam_id).spec.time_limit_min() * opts_.minute_ms);
}

ExamManager::Sitting* ExamManager::Latest(const std::string& exam_id, const std::string& candidate) {
  auto it = sittings_.find({exam_id, candidate});
  if (it == sittings_.end() || it->second.empty()) return nullptr;
  return it->second.back().get();
}

StatusOr<ExamManager::Sitting*> ExamManager::FindSitting(const std::string& exam_id,
                                                         const std::string& candidate, int number) {
  auto it = sittings_.find({exam_id, candidate});
  if (it != sittings_.end() && !it->second.empty()) {
    if (number <= 0) return it->second.back().get();
    for (auto& s : it->second)
      if (s->number == number) return s.get();
  }
  return NotFound("candidate '" + candidate + "' has " +
                  (number > 0 ? "no sitting " + std::to_string(number) : std::string("not started")) +
                  " of exam '" + exam_id + "'");
}

v1::SittingInfo ExamManager::Describe(const Sitting& s, bool for_proctor) const {
  const Exam& exam = exams_.at(s.exam_id);
  const ExamClock clock = ClockOf(s);
  v1::SittingInfo out;
  out.set_exam_id(s.exam_id);
  out.set_exam_title(exam.spec.title());
  out.set_candidate(s.candidate);
  out.set_sitting(s.number);
  out.set_state(s.open() ? "open" : s.ended_by == "candidate" ? "finished" : s.ended_by);
  out.set_started_unix_ms(s.started_ms);
  out.set_deadline_unix_ms(clock.deadline_ms());
  out.set_remaining_ms(s.open() ? clock.RemainingMs(Now()) : 0);
  out.set_ended_unix_ms(s.ended_ms);
  const int attempts = std::max(1, exam.spec.attempts());
  for (size_t i = 0; i < s.items.size(); ++i) {
    const Item& it = s.items[i];
    v1::SittingItem* o = out.add_items();
    o->set_index(static_cast<int>(i) + 1);
    o->set_points(scenario::ItemPoints(exam.spec.items(static_cast<int>(i))));
    o->set_attempts(attempts);
    o->set_attempts_used(static_cast<int>(it.sessions.size()));
    o->set_state("not opened");
    if (it.sessions.empty()) continue;
    o->set_session_id(it.sessions.back());
    auto info = sessions_->Info(it.sessions.back());
    if (info.ok()) o->set_title(info->title());
    o->set_state(info.ok() && !TerminalState(info->state()) && s.open() ? "open" : "closed");
  }
  for (const auto& w : s.warnings) out.add_warnings(w);
  if (for_proctor && !s.signed_result.empty()) {
    out.set_total(s.total);
    out.set_max_total(s.max_total);
    out.set_passed(s.passed);
    // The points and flags as signed: what the result says, not a second
    // reckoning that could drift from it.
    const json signed_doc = json::parse(s.signed_result, nullptr, /*allow_exceptions=*/false);
    const json& items = json_read::List(Field(signed_doc, "result"), "items");
    for (size_t i = 0; i < items.size() && i < static_cast<size_t>(out.items_size()); ++i) {
      v1::SittingItem* o = out.mutable_items(static_cast<int>(i));
      o->set_scored_points(static_cast<int>(Int(items[i], "points")));
      for (const auto& f : json_read::List(items[i], "flags")) o->add_flags(Text(f));
    }
  }
  return out;
}

// ------------------------------------------------------------- proctors

StatusOr<v1::ExamInfo> ExamManager::Create(const Grant& by, const std::string& yaml,
                                           const std::string& filename) {
  if (!(by.roles & kRoleOwner) && !by.exam_id.empty())
    return PermissionDenied("a proctor token scoped to exam '" + by.exam_id + "' cannot create exams");
  auto spec = scenario::ParseExam(yaml, filename.empty() ? "exam.yaml" : filename, sessions_->Catalogue());
  if (!spec.ok()) return spec.status();
  const std::string secret = RandomBytes(32);
  const int64_t now = Now();
  std::lock_guard<std::mutex> lock(mu_);
  FD_RETURN_IF_ERROR(store_->AddExam(*spec, secret, now));
  exams_[spec->id()] = Exam{*spec, secret, now};
  auto head = Audit(spec->id(), "", Actor(by), "CreateExam",
                    {{"title", spec->title()}, {"file", filename}, {"sha256", Sha256Hex(yaml)}});
  if (!head.ok()) return head.status();
  v1::ExamInfo info;
  info.set_exam_id(spec->id());
  info.set_title(spec->title());
  info.set_items(spec->items_size());
  info.set_points(scenario::ExamPoints(*spec));
  info.set_time_limit_min(spec->time_limit_min());
  info.set_pass_mark(spec->pass_mark());
  info.set_retakes(spec->retakes());
  info.set_created_unix_ms(now);
  return info;
}

StatusOr<std::vector<v1::ExamInfo>> ExamManager::List(const Grant& by) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::ExamInfo> out;
  for (const auto& [id, e] : exams_) {
    if (!ProctorExam(by, id).ok()) continue;
    v1::ExamInfo info;
    info.set_exam_id(id);
    info.set_title(e.spec.title());
    info.set_items(e.spec.items_size());
    info.set_points(scenario::ExamPoints(e.spec));
    info.set_time_limit_min(e.spec.time_limit_min());
    info.set_pass_mark(e.spec.pass_mark());
    info.set_retakes(e.spec.retakes());
    info.set_created_unix_ms(e.created_ms);
    for (const auto& [key, list] : sittings_)
      if (key.first == id)
        for (const auto& s : list) *info.add_sittings() = Describe(*s, true);
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<std::string> ExamManager::IssueCandidate(const Grant& by, const std::string& exam_id,
                                                  const std::string& name, Grant* issued) {
  std::lock_guard<std::mutex> lock(mu_);
  auto exam = ProctorExam(by, exam_id);
  if (!exam.ok()) return exam.status();
  issued->name = name;
  issued->roles = kRoleCandidate;
  issued->exam_id = exam_id;
  issued->session.clear();
  auto token = gate_->Issue(issued);
  if (!token.ok()) return token.status();
  for (const std::string& trail : {std::string(), name}) {
    auto head = Audit(exam_id, trail, Actor(by), "IssueCandidate", {{"candidate", name}});
    if (!head.ok()) return head.status();
  }
  return token;
}

v1::ExamPublicKey ExamManager::PublicKey() const {
  v1::ExamPublicKey k;
  k.set_pem(signer_->PublicKeyPem());
  k.set_key_id(signer_->KeyId());
  return k;
}

StatusOr<v1::ExamResultResponse> ExamManager::Result(const Grant& by, const v1::GetExamResultRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto exam = ProctorExam(by, req.exam_id());
  if (!exam.ok()) return exam.status();
  auto s = FindSitting(req.exam_id(), req.candidate(), req.sitting());
  if (!s.ok()) return s.status();
  if ((*s)->signed_result.empty()) {
    const ExamClock clock = ClockOf(**s);
    return FailedPrecondition("sitting " + std::to_string((*s)->number) + " of '" + req.candidate() +
                              "' is still open (" + Minutes(clock.RemainingMs(Now())) +
                              " left): its result is signed when it ends");
  }
  const json signed_doc = json::parse((*s)->signed_result, nullptr, /*allow_exceptions=*/false);
  const json& result = Field(signed_doc, "result");
  v1::ExamResultResponse out;
  out.set_signed_json((*s)->signed_result);
  out.set_markdown(ResultMarkdown(result));
  out.set_html(ResultHtml(result));
  return out;
}

StatusOr<v1::ExamResultResponse> ExamManager::Rescore(const Grant& by, const v1::RescoreItemRequest& req) {
  {
    Lock lock(mu_);
    auto exam = ProctorExam(by, req.exam_id());
    if (!exam.ok()) return exam.status();
    auto s = FindSitting(req.exam_id(), req.candidate(), req.sitting());
    if (!s.ok()) return s.status();
    Sitting& sit = **s;
    if (sit.signed_result.empty())
      return FailedPrecondition("sitting " + std::to_string(sit.number) + " of '" + req.candidate() +
                                "' has no result yet: rescore it after it ends");
    const int n = (*exam)->spec.items_size();
    if (req.item() < 1 || req.item() > n)
      return InvalidArgument("item " + std::to_string(req.item()) + ": the exam has items 1-" +
                             std::to_string(n));
    const int weight = scenario::ItemPoints((*exam)->spec.items(req.item() - 1));
    if (req.points() < 0 || req.points() > weight)
      return InvalidArgument("points " + std::to_string(req.points()) + ": item " +
                             std::to_string(req.item()) + " is worth 0-" + std::to_string(weight));
    if (req.reason().find_first_not_of(" \t\n") == std::string::npos)
      return InvalidArgument("a rescore needs a reason (--reason): it is signed into the result");
    const controller::Rescore r{req.item() - 1, req.points(), by.name, req.reason(), Now()};
    auto head = Audit(sit, Actor(by), "RescoreItem",
                      {{"item", req.item()}, {"points", req.points()}, {"reason", req.reason()}});
    if (!head.ok()) return head.status();
    sit.rescores.push_back(r);
    FD_RETURN_IF_ERROR(SignResult(lock, sit));
  }
  v1::GetExamResultRequest get;
  get.set_exam_id(req.exam_id());
  get.set_candidate(req.candidate());
  get.set_sitting(req.sitting());
  return Result(by, get);
}

StatusOr<v1::ExportAuditResponse> ExamManager::ExportAudit(const Grant& by,
                                                           const v1::ExportAuditRequest& req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto exam = ProctorExam(by, req.exam_id());
    if (!exam.ok()) return exam.status();
  }
  auto records = store_->LoadAudit(AuditScope(req.exam_id(), req.candidate()));
  if (!records.ok()) return records.status();
  if (records->empty() && !req.candidate().empty())
    return NotFound("exam '" + req.exam_id() + "' has no candidate '" + req.candidate() + "'");
  v1::ExportAuditResponse out;
  out.set_text(AuditText(*records));
  out.set_records(static_cast<int64_t>(records->size()));
  return out;
}

// ----------------------------------------------------------- candidates

StatusOr<v1::SittingInfo> ExamManager::StartSitting(const Grant& who) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exams_.find(who.exam_id);
  if (it == exams_.end()) return NotFound("your exam '" + who.exam_id + "' is not on this controller");
  const Exam& exam = it->second;
  Sitting* last = Latest(who.exam_id, who.name);
  if (last && (last->open() || closing_.count(last))) return Describe(*last, false);  // reconnected
  int number = 1;
  if (last) {
    // The same words whatever the result: the result is the proctor's to
    // give, and so is a retake.
    if (!last->retake_allowed)
      return FailedPrecondition(
          "your sitting " + std::to_string(last->number) + " of exam '" + who.exam_id +
          "' has ended; a retake, where the exam allows one, is opened by your proctor");
    number = last->number + 1;
  }
  auto s = std::make_unique<Sitting>();
  s->exam_id = who.exam_id;
  s->candidate = who.name;
  s->number = number;
  s->started_ms = Now();
  // A retake draws new variants: the candidate has seen the first ones.
  const std::string key = number == 1 ? who.name : who.name + "\nsitting " + std::to_string(number);
  for (int i = 0; i < exam.spec.items_size(); ++i) {
    const auto pool = scenario::ItemScenarios(exam.spec.items(i));
    if (pool.empty())
      return Internal("exam '" + who.exam_id + "' item " + std::to_string(i + 1) + " has no scenario");
    const ItemVariant v = DrawItemVariant(exam.secret, who.exam_id, key, i, pool.size());
    s->items.push_back(Item{pool[v.pool_index], v.seed, {}});
  }
  const ExamClock clock = ClockOf(*s);
  auto head = Audit(*s, "controller", "sitting started",
                    {{"deadline_unix_ms", clock.deadline_ms()}, {"items", exam.spec.items_size()}});
  if (!head.ok()) return head.status();
  FD_RETURN_IF_ERROR(Save(*s));
  Sitting& stored = *s;
  sittings_[{who.exam_id, who.name}].push_back(std::move(s));
  return Describe(stored, false);
}

StatusOr<v1::SittingInfo> ExamManager::GetSitting(const Grant& who, const v1::GetSittingRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  if (who.roles & kRoleCandidate) {
    // A candidate reads their own sitting, whatever the request names.
    Sitting* s = Latest(who.exam_id, who.name);
    if (!s) return NotFound("you have not started exam '" + who.exam_id + "': `firedrill exam start`");
    return Describe(*s, false);
  }
  auto exam = ProctorExam(who, req.exam_id());
  if (!exam.ok()) return exam.status();
  auto s = FindSitting(req.exam_id(), req.candidate(), req.sitting());
  if (!s.ok()) return s.status();
  return Describe(**s, true);
}

StatusOr<v1::SessionInfo> ExamManager::OpenItem(const Grant& who, const v1::OpenItemRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  Sitting* s = Latest(who.exam_id, who.name);
  if (!s || !s->open() || closing_.count(s))
    return FailedPrecondition("you have no open sitting of exam '" + who.exam_id +
                              "': `firedrill exam start`");
  const Exam& exam = exams_.at(s->exam_id);
  const ExamClock clock = ClockOf(*s);
  if (clock.Expired(Now())) return FailedPrecondition("the exam's time is up: its items are being scored");
  const int n = static_cast<int>(s->items.size());
  if (req.item() < 1 || req.item() > n)
    return InvalidArgument("item " + std::to_string(req.item()) + ": the exam has items 1-" +
                           std::to_string(n));
  Item& it = s->items[req.item() - 1];
  const int attempts = std::max(1, exam.spec.attempts());
  // Attempts the controller aborted (it restarted under them) do not count.
  int used = 0;
  bool aborted_last = false;
  for (const std::string& id : it.sessions) {
    auto info = sessions_->Info(id);
    aborted_last = info.ok() && info->state() == "aborted";
    if (!aborted_last) ++used;
  }
  if (!it.sessions.empty() && !aborted_last) {
    auto info = sessions_->Info(it.sessions.back());
    if (!info.ok()) return info.status();
    if (!TerminalState(info->state())) return info;  // reconnected: the same session
    if (!req.new_attempt())
      return FailedPrecondition(
          "item " + std::to_string(req.item()) + " is closed (its session " + it.sessions.back() + " ended)" +
          (used < attempts
               ? "; `firedrill exam open " + std::to_string(req.item()) + " --new-attempt` starts attempt " +
                     std::to_string(used + 1) + " of " + std::to_string(attempts)
               : std::string("")));
    if (used >= attempts)
      return FailedPrecondition("item " + std::to_string(req.item()) + " has used its " +
                                std::to_string(attempts) + " attempt(s)");
  }
  // Each attempt is a variant of its own (the item's scenario, another
  // draw): what the first one showed does not answer the second.
  const int attempt = used + 1;
  int64_t seed = it.seed;
  if (attempt > 1) {
    const std::string key =
        (s->number == 1 ? who.name : who.name + "\nsitting " + std::to_string(s->number)) + "\nattempt " +
        std::to_string(attempt);
    seed = DrawItemVariant(exam.secret, s->exam_id, key, req.item() - 1, 1).seed;
  }
  auto info = sessions_->StartItem(it.scenario, seed, who.name, exam.spec.hints().allowed(),
                                   exam.spec.hints().cost());
  if (!info.ok()) return info.status();
  it.sessions.push_back(info->session_id());
  if (Status st = Save(*s); !st.ok()) {
    // Unrecorded, it would be a session no clock ends: end it now.
    it.sessions.pop_back();
    (void)sessions_->EndItem(info->session_id(), "the exam could not record this item");
    return st;
  }
  auto head = Audit(*s, "controller", "item opened",
                    {{"item", req.item()}, {"attempt", attempt}, {"session", info->session_id()}});
  if (!head.ok()) return head.status();
  return info;
}

Status ExamManager::MayAct(const Grant& who, const std::string& session_id) {
  if (!(who.roles & kRoleCandidate)) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  const Sitting* s = Latest(who.exam_id, who.name);
  bool item = false;
  if (s && s->open() && !closing_.count(s))
    for (const Item& it : s->items)
      item |= std::find(it.sessions.begin(), it.sessions.end(), session_id) != it.sessions.end();
  if (!item) return FailedPrecondition("this item's sitting has ended: nothing more can be done in it");
  const ExamClock clock = ClockOf(*s);
  if (clock.Expired(Now())) return FailedPrecondition("the exam's time is up: its items are being scored");
  return Status::Ok();
}

bool ExamManager::SessionInExam(const std::string& session_id, const std::string& exam_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, list] : sittings_) {
    if (key.first != exam_id) continue;
    for (const auto& s : list)
      for (const Item& it : s->items)
        if (std::find(it.sessions.begin(), it.sessions.end(), session_id) != it.sessions.end()) return true;
  }
  return false;
}

StatusOr<v1::SittingInfo> ExamManager::AllowRetake(const Grant& by, const v1::AllowRetakeRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto exam = ProctorExam(by, req.exam_id());
  if (!exam.ok()) return exam.status();
  auto s = FindSitting(req.exam_id(), req.candidate(), 0);
  if (!s.ok()) return s.status();
  Sitting& last = **s;
  if (last.signed_result.empty())
    return FailedPrecondition("sitting " + std::to_string(last.number) + " of '" + req.candidate() +
                              "' has no result yet");
  if (last.passed)
    return FailedPrecondition("'" + req.candidate() + "' passed sitting " + std::to_string(last.number) +
                              ": there is nothing to retake");
  if (last.number > (*exam)->spec.retakes())
    return FailedPrecondition("'" + req.candidate() + "' has sat " + std::to_string(last.number) +
                              " time(s); the exam allows " + std::to_string((*exam)->spec.retakes()) +
                              " retake(s)");
  if (!last.retake_allowed) {
    auto head = Audit(last, Actor(by), "AllowRetake", json::object());
    if (!head.ok()) return head.status();
    last.retake_allowed = true;
    FD_RETURN_IF_ERROR(Save(last));
  }
  return Describe(last, true);
}

StatusOr<v1::SittingInfo> ExamManager::Finish(const Grant& who) {
  Lock lock(mu_);
  Sitting* s = Latest(who.exam_id, who.name);
  if (!s || !s->open() || closing_.count(s))
    return FailedPrecondition("you have no open sitting of exam '" + who.exam_id + "'");
  FD_RETURN_IF_ERROR(Close(lock, *s, "candidate", Actor(who)));
  return Describe(*s, false);
}

Status ExamManager::RecordCall(const Grant& who, const std::string& method, const std::string& request_json,
                               const Status& admitted) {
  if (!(who.roles & kRoleCandidate)) return Status::Ok();
  json args = {{"request", json::parse(request_json, nullptr, /*allow_exceptions=*/false)}};
  if (args["request"].is_discarded()) args["request"] = request_json;
  if (!admitted.ok())
    args["refused"] = std::string(StatusCodeName(admitted.code())) + ": " + admitted.message();
  std::lock_guard<std::mutex> lock(mu_);
  const Sitting* s = Latest(who.exam_id, who.name);
  args["sitting"] = s ? s->number : 0;
  return Audit(who.exam_id, who.name, Actor(who), method, args).status();
}

// ----------------------------------------------------------- the clock

Status ExamManager::Close(Lock& lock, Sitting& s, const std::string& ended_by, const std::string& actor) {
  closing_.insert(&s);
  std::vector<std::string> live;
  for (const Item& it : s.items)
    for (const std::string& id : it.sessions) live.push_back(id);
  const std::string reason = ended_by == "time-up"     ? "the exam's time ran out"
                             : ended_by == "candidate" ? "the candidate finished the exam"
                                                       : "the proctor ended the sitting";
  // Ending waits for each session to be scored: outside the lock, so the
  // clock and the other candidates go on.
  lock.unlock();
  for (const std::string& id : live) {
    auto info = sessions_->Info(id);
    if (info.ok() && TerminalState(info->state())) continue;
    if (auto ended = sessions_->EndItem(id, reason); !ended.ok())
      spdlog::error("exam {}: ending session {} of {}: {}", s.exam_id, id, s.candidate,
                    ended.status().message());
  }
  lock.lock();
  closing_.erase(&s);
  s.ended_ms = Now();
  s.ended_by = ended_by;
  auto head = Audit(s, actor, "sitting ended", {{"ended_by", ended_by}});
  if (!head.ok()) return head.status();
  return SignResult(lock, s);
}

ItemOutcome ExamManager::Outcome(const Sitting& s, int index) {
  ItemOutcome o;
  o.index = index;
  const Item& it = s.items[index];
  o.scenario_id = it.scenario;
  if (it.sessions.empty()) {
    o.state = "not started";
    for (const auto& sc : sessions_->Catalogue())
      if (sc.id() == it.scenario) o.title = sc.title();
    return o;
  }
  o.session_id = it.sessions.back();
  auto info = sessions_->Info(o.session_id);
  if (info.ok()) o.title = info->title();
  auto score = sessions_->FinalScore(o.session_id);
  if (score.ok()) o.score = *score;
  o.events = sessions_->Events(o.session_id);
  const bool scored = info.ok() && info->state() == "scored";
  o.state = scored ? "scored" : s.ended_by == "time-up" ? "frozen at time-up" : "ended";
  return o;
}

Status ExamManager::SignResult(Lock&, Sitting& s) {
  const Exam& exam = exams_.at(s.exam_id);
  std::vector<ItemOutcome> items;
  for (size_t i = 0; i < s.items.size(); ++i) items.push_back(Outcome(s, static_cast<int>(i)));
  auto trail = store_->LoadAudit(AuditScope(s.exam_id, s.candidate));
  if (!trail.ok()) return trail.status();
  SittingFacts facts;
  facts.candidate = s.candidate;
  facts.sitting = s.number;
  facts.started_unix_ms = s.started_ms;
  facts.ended_unix_ms = s.ended_ms;
  facts.ended_by = s.ended_by;
  facts.audit_scope = AuditScope(s.exam_id, s.candidate);
  if (!trail->empty()) facts.audit = HeadAfter(trail->back());
  const json result = ExamResult(exam.spec, facts, items, s.rescores);
  auto text = signer_->SignResult(result);
  if (!text.ok()) return text.status();
  s.signed_result = *text;
  s.total = static_cast<int>(Int(result, "total"));
  s.max_total = static_cast<int>(Int(result, "max"));
  s.passed = Bool(result, "passed");
  FD_RETURN_IF_ERROR(Save(s));
  return Audit(s, "controller", "result signed",
               {{"total", s.total},
                {"max", s.max_total},
                {"passed", s.passed},
                {"key", signer_->KeyId()},
                {"sha256", Sha256Hex(*text)}})
      .status();
}

void ExamManager::Tick() {
  Lock lock(mu_);
  const int64_t now = Now();
  std::vector<Sitting*> expired;
  for (auto& [key, list] : sittings_) {
    for (auto& sp : list) {
      Sitting& s = *sp;
      if (!s.open() || closing_.count(&s)) continue;
      const ExamClock clock = ClockOf(s);
      if (clock.Expired(now)) {
        expired.push_back(&s);
        continue;
      }
      const int due = clock.DueWarning(now, s.warned);
      if (due == 0) continue;
      for (int m : ExamClock::Settled(due)) s.warned.insert(m);
      const std::string text = "exam: " + std::to_string(due) + " minutes left; at " +
                               UtcClockText(clock.deadline_ms()) +
                               " every open item is ended and scored as it stands";
      s.warnings.push_back(text);
      if (Status st = Save(s); !st.ok()) spdlog::error("{}", st.message());
      if (auto h = Audit(s, "controller", "warning", {{"minutes_left", due}}); !h.ok())
        spdlog::error("{}", h.status().message());
      for (const Item& it : s.items)
        if (!it.sessions.empty()) sessions_->Announce(it.sessions.back(), "exam", text);
    }
  }
  for (Sitting* s : expired) {
    if (!s->open() || closing_.count(s)) continue;  // finished while another closed
    spdlog::info("exam {}: {}'s time ran out; ending and scoring sitting {}", s->exam_id, s->candidate,
                 s->number);
    if (Status st = Close(lock, *s, "time-up", "controller"); !st.ok())
      spdlog::error("exam {}: closing {}'s sitting: {}", s->exam_id, s->candidate, st.message());
  }
}

}  // namespace firedrill::controller
