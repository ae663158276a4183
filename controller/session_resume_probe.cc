// SessionManager::RunResumeProbe (`firedrill probe resume`): does a save and
// resume carry the whole state of the job through? From one of the job's
// checkpoints, the job as deployed (its config as the learner reads it,
// settings a fault deployed included; no fault's hooks act in it) runs
// 2k steps straight, checkpointing every k; then the checkpoint written
// after the first k is resumed, with the job's own checkpoint settings, for
// the other k. Compared part by part, bitwise (firedrill-ckpt diff): the
// parameters, the optimiser state, the generator, the loss scale, the data
// position and the step, of the state the resumed run held before its
// first step against the checkpoint it resumed from (what the resume put
// back), and of the two runs' checkpoints of the last step (what that made
// of the next k). A resume that carries everything ends bitwise where the
// straight run did (training here is deterministic: same seed, data and
// reduction order).
//
// Both runs are firedrill-train processes (one per rank, on this machine,
// against the job's checkpoint storage), beside the running job: the job
// itself is not touched. Neither gets the drill's faults.
#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "controller/session_manager.h"

namespace firedrill::controller {

namespace {

namespace fs = std::filesystem;

constexpr int kDefaultResumeSteps = 10;
constexpr int kRunLimitS = 120;  // coreutils timeout around each run

// The line rank 0 logged when it resumed ("resumed from ... at step N ..."),
// without the log's own prefix; "" if none.
std::string ResumeLine(const std::string& output) {
  size_t at = output.find("rank 0: resumed from ");
  if (at == std::string::npos) at = output.find("resumed from ");
  if (at == std::string::npos) return "";
  const size_t end = output.find('\n', at);
  return output.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// A failed run's first rank error ("firedrill-train: rank 1: ..."; its peers'
// follow-on errors come after it), else its last line.
std::string RunError(const std::string& output) {
  const size_t at = output.find("firedrill-train: ");
  if (at != std::string::npos) return output.substr(at, output.find('\n', at) - at);
  const size_t nl = output.find_last_of('\n');
  return nl == std::string::npos ? output : output.substr(nl + 1);
}

// A part as firedrill-ckpt diff printed it; a number JSON cannot hold (an
// infinite difference prints as null) reads as infinite.
void FillParts(const nlohmann::json& parts, const std::function<v1::ResumeProbePart*()>& add) {
  if (!parts.is_array()) return;
  auto text = [](const nlohmann::json& p, const char* key) {
    const auto it = p.find(key);
    return it != p.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [](const nlohmann::json& p, const char* key) {
    const auto it = p.find(key);
    return it != p.end() && it->is_number() ? it->get<double>() : std::numeric_limits<double>::infinity();
  };
  auto count = [](const nlohmann::json& p, const char* key) {
    const auto it = p.find(key);
    return it != p.end() && it->is_number_integer() ? it->get<int32_t>() : 0;
  };
  for (const auto& p : parts) {
    if (!p.is_object()) continue;
    v1::ResumeProbePart* part = add();
    part->set_part(text(p, "part"));
    part->set_entries(count(p, "entries"));
    part->set_differ(count(p, "differ"));
    part->set_missing(count(p, "missing"));
    if (const auto r = p.find("ranks"); r != p.end() && r->is_array())
      for (const auto& rank : *r)
        if (rank.is_number_integer()) part->add_ranks(rank.get<int>());
    part->set_max_abs_diff(num(p, "max_abs_diff"));
    part->set_straight_value(text(p, "a_value"));
    part->set_resumed_value(text(p, "b_value"));
    part->set_first_differing(text(p, "first_differing"));
  }
}

}  // namespace

StatusOr<v1::RunProbeResponse> SessionManager::RunResumeProbe(Session& s, const v1::ProbeSpec& spec) {
  const auto started = std::chrono::steady_clock::now();
  v1::JobSpec job;
  std::string session_id, scratch;
  int64_t seed = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    FD_RETURN_IF_ERROR(ToolOffered(s, "probes"));
    FD_RETURN_IF_ERROR(ToolOffered(s, "checkpoints"));
    if (s.state == SessionState::kCreated || s.state == SessionState::kBaseline)
      return FailedPrecondition("the job has not started yet: it has no checkpoints to resume from");
    // Only while the drill's job is the learner's to look at: its runs
    // train beside whatever else runs here, and verification's
    // measurements must have the machine to themselves.
    if (s.state != SessionState::kRunning || s.fix_pending || s.end_requested)
      return FailedPrecondition("probe resume runs while the session's job is being investigated, before its fix; "
                                "session " + s.rec.info().session_id() + " is " + Name(s.state) +
                                (s.fix_pending ? " (its fix is being verified)" : ""));
    job = s.rec.job();  // as deployed: the faults' settings and the learner's fixes
    session_id = s.rec.info().session_id();
    seed = static_cast<int64_t>(s.rec.info().seed());
    scratch = SessionFilesDir(opts_.state_dir, session_id, "resume-probe");
  }
  const std::string dir = job.checkpoint().dir();
  if (dir.empty() || job.checkpoint().every() <= 0)
    return FailedPrecondition("this job writes no checkpoints (checkpoint.every is 0 or it has no checkpoint.dir): "
                              "there is nothing to resume");
  const bool chosen_by_us = spec.from_step() == 0;
  const int k = spec.resume_steps() > 0 ? spec.resume_steps() : kDefaultResumeSteps;
  int64_t from = spec.from_step();
  std::string from_dir, start;
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::create_directories(scratch, ec);
  if (ec) return Internal("cannot make " + scratch + ": " + ec.message());
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code e;
      fs::remove_all(dir, e);
    }
  } cleanup{scratch};

  // One run: the job from `resume` for `steps` steps, checkpointing every k
  // under `out`.
  auto run = [&](const std::string& name, const std::string& resume, int64_t steps,
                 std::string* output) -> Status {
    v1::JobSpec j = job;
    auto* ck = j.mutable_checkpoint();
    ck->set_dir(scratch + "/" + name);
    ck->set_every(k);
    ck->set_keep(0);
    ck->set_keep_period(0);
    ck->set_resume_from(resume);
    std::string text;
    google::protobuf::TextFormat::PrintToString(j, &text);
    const std::string job_file = scratch + "/" + name + ".job.txtpb";
    std::ofstream jf(job_file, std::ios::trunc);
    jf << text;
    jf.close();
    if (!jf) return Internal("cannot write " + job_file);
    std::vector<std::string> argv = {opts_.train_bin, "--job", job_file, "--steps", std::to_string(steps),
                                     "--seed", std::to_string(seed), "--log-every", "0"};
    if (name == "resumed") argv.push_back("--checkpoint-at-start");  // what the resume put back
    // Its ranks die with it, and it with this thread, at the limit, or as
    // soon as the session ends; its temporary files stay in the scratch.
    RunLimits limits;
    limits.limit = std::chrono::seconds(kRunLimitS);
    limits.cancelled = [&s] {
      std::lock_guard<std::mutex> g(s.mu);
      return s.end_requested || s.state != SessionState::kRunning;
    };
    limits.env = {"TMPDIR=" + scratch};
    auto r = RunCommand(argv, limits);
    if (!r.ok()) return Internal("cannot run firedrill-train (" + opts_.train_bin + "): " + r.status().message());
    *output = r->output;
    if (r->cancelled) return Aborted("the session stopped running while the " + name + " run ran; nothing was compared");
    if (r->timed_out)
      return DeadlineExceeded("the " + name + " run did not finish within " + std::to_string(kRunLimitS) + " s");
    if (r->exit_code != 0)
      return FailedPrecondition("the " + name + " run (from " + (name == "straight" ? from_dir : "its own checkpoint") +
                                ") failed: " + RunError(r->output));
    return Status::Ok();
  };
  // A copy to start from: the running job prunes its checkpoints as it
  // writes new ones, the newest few within seconds, and storage may damage
  // one at any time. The step the learner named is that step or nothing;
  // "the newest that verifies" is chosen again when the one chosen stops
  // verifying between the listing and the copy.
  for (int attempt = 0;; ++attempt) {
    const bool again = chosen_by_us && attempt < 2;
    if (chosen_by_us) {
      auto newest = NewestValidStep(dir);
      if (!newest.ok()) return newest.status();
      if (*newest < 0) return FailedPrecondition("the job has no checkpoint that verifies yet; `firedrill ckpt list`");
      from = *newest;
    }
    from_dir = CheckpointStepDir(dir, from);
    if (!fs::is_directory(from_dir, ec) && again) continue;
    if (!fs::is_directory(from_dir, ec))
      return NotFound("there is no checkpoint of step " + std::to_string(from) + " (" + from_dir +
                      "); `firedrill ckpt list` shows those there are");
    start = CheckpointStepDir(scratch + "/from", from);
    fs::remove_all(scratch + "/from", ec);
    fs::create_directories(scratch + "/from", ec);
    fs::copy(from_dir, start, fs::copy_options::recursive, ec);
    if (ec && again) continue;
    if (ec)
      return Unavailable("could not copy " + from_dir + " (" + ec.message() +
                         "): the job may have pruned it meanwhile; name a checkpoint it keeps (`firedrill ckpt list`)");
    // As a resume would check it (a step the job is still writing has no
    // manifest yet).
    auto v = RunCommand({opts_.ckpt_bin, "verify", start});
    if (!v.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + v.status().message());
    if (v->exit_code == 0) break;
    if (again) continue;
    return FailedPrecondition("the checkpoint of step " + std::to_string(from) + " does not verify: " +
                              v->output.substr(0, 300) + "; `firedrill ckpt list` shows the ones that do");
  }
  const int64_t saved_at = (from / k + 1) * k;  // the straight run's first checkpoint
  const int64_t to = saved_at + k;
  std::string straight_out, resumed_out;
  FD_RETURN_IF_ERROR(run("straight", start, to - from, &straight_out));
  FD_RETURN_IF_ERROR(run("resumed", CheckpointStepDir(scratch + "/straight", saved_at), k, &resumed_out));

  // The two runs' checkpoints of one step, part by part (firedrill-ckpt diff).
  auto diff = [&](int64_t step, nlohmann::json* d) -> Status {
    const std::string a = CheckpointStepDir(scratch + "/straight", step), b = CheckpointStepDir(scratch + "/resumed", step);
    auto r = RunCommand({opts_.ckpt_bin, "diff", a, b, "--json"});
    if (!r.ok()) return Internal("cannot run firedrill-ckpt (" + opts_.ckpt_bin + "): " + r.status().message());
    if (r->exit_code != 0 && r->exit_code != 1)
      return Internal(opts_.ckpt_bin + " diff exited " + std::to_string(r->exit_code) + ": " + r->output);
    const size_t brace = r->output.find('{');
    *d = brace == std::string::npos ? nlohmann::json() : nlohmann::json::parse(r->output.substr(brace), nullptr, false);
    if (!d->is_object() || !d->contains("parts")) return Internal(opts_.ckpt_bin + " diff printed no JSON: " + r->output);
    return Status::Ok();
  };
  nlohmann::json d, at_resume;
  FD_RETURN_IF_ERROR(diff(saved_at, &at_resume));
  FD_RETURN_IF_ERROR(diff(to, &d));

  v1::RunProbeResponse out;
  out.set_session_id(session_id);
  *out.mutable_spec() = spec;
  out.mutable_spec()->set_from_step(from);
  out.mutable_spec()->set_resume_steps(k);
  out.set_world_size(job.world_size());
  out.set_step(from);
  v1::ResumeProbe* rp = out.mutable_resume();
  rp->set_from_dir(from_dir);
  rp->set_saved_at(saved_at);
  rp->set_to_step(to);
  rp->set_restore(job.checkpoint().restore().empty() ? "all" : job.checkpoint().restore());
  rp->set_resume_log(ResumeLine(resumed_out));
  rp->set_same(d.contains("same") && d["same"].is_boolean() && d["same"].get<bool>());
  FillParts(d["parts"], [rp] { return rp->add_parts(); });
  FillParts(at_resume["parts"], [rp] { return rp->add_at_resume(); });
  rp->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return out;
}

}  // namespace firedrill::controller
