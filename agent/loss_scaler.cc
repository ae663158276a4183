#include "agent/loss_scaler.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "firedrill/v1/scenario.pb.h"

namespace firedrill::agent {

std::string LossScaler::State::Serialize() const {
  // Hex float: the float scale survives the text form bit for bit.
  char buf[128];
  std::snprintf(buf, sizeof(buf), "scale=%a growth_tracker=%d skipped_total=%lld", static_cast<double>(scale),
                static_cast<int>(growth_tracker), static_cast<long long>(skipped_total));
  return buf;
}

StatusOr<LossScaler::State> LossScaler::State::Parse(const std::string& text) {
  State s;
  bool have_scale = false, have_tracker = false, have_skipped = false;
  std::istringstream in(text);
  std::string tok;
  auto bad = [&](const std::string& why) {
    return InvalidArgument("loss scaler state \"" + text + "\": " + why);
  };
  while (in >> tok) {
    const auto eq = tok.find('=');
    if (eq == std::string::npos) return bad("expected key=value, got \"" + tok + "\"");
    const std::string key = tok.substr(0, eq), val = tok.substr(eq + 1);
    char* end = nullptr;
    errno = 0;
    if (key == "scale") {
      const double d = std::strtod(val.c_str(), &end);
      if (end == val.c_str() || *end != '\0' || errno != 0) return bad("bad scale \"" + val + "\"");
      s.scale = static_cast<float>(d);
      have_scale = true;
    } else if (key == "growth_tracker" || key == "skipped_total") {
      const long long v = std::strtoll(val.c_str(), &end, 10);
      if (end == val.c_str() || *end != '\0' || errno != 0 || v < 0)
        return bad("bad " + key + " \"" + val + "\"");
      if (key == "growth_tracker") {
        if (v > INT32_MAX) return bad("growth_tracker out of range");
        s.growth_tracker = static_cast<int32_t>(v);
        have_tracker = true;
      } else {
        s.skipped_total = v;
        have_skipped = true;
      }
    } else {
      return bad("unknown key \"" + key + "\"");
    }
  }
  if (!have_scale || !have_tracker || !have_skipped)
    return bad("missing scale, growth_tracker or skipped_total");
  return s;
}

StatusOr<LossScaler> LossScaler::FromSpec(const v1::LossScaleSpec& spec, const std::string& precision) {
  Options o;
  const std::string& m = spec.mode();
  if (m.empty()) {
    o.mode = precision == "fp16" ? Mode::kDynamic : Mode::kNone;
  } else if (m == "none") {
    o.mode = Mode::kNone;
  } else if (m == "static") {
    o.mode = Mode::kStatic;
  } else if (m == "dynamic") {
    o.mode = Mode::kDynamic;
  } else {
    return InvalidArgument("loss_scale.mode must be \"none\", \"static\" or \"dynamic\", got \"" + m + "\"");
  }
  if (spec.init_scale() != 0)
    o.init_scale = spec.init_scale();
  else
    o.init_scale = o.mode == Mode::kStatic ? 1.0 : 65536.0;
  if (spec.growth_factor() != 0) o.growth_factor = spec.growth_factor();
  if (spec.backoff_factor() != 0) o.backoff_factor = spec.backoff_factor();
  if (spec.growth_interval() != 0) o.growth_interval = spec.growth_interval();
  return Create(o);
}

StatusOr<LossScaler> LossScaler::FromJob(const v1::JobSpec& job) {
  return FromSpec(job.loss_scale(), job.precision());
}

StatusOr<LossScaler> LossScaler::Create(const Options& o) {
  if (o.mode != Mode::kNone) {
    // float(init_scale) must be a usable finite positive scale.
    const float s = static_cast<float>(o.init_scale);
    if (!(o.init_scale > 0) || !std::isfinite(s) || s == 0.0f)
      return InvalidArgument("loss_scale.init_scale must be a positive finite fp32 value, got " +
                             std::to_string(o.init_scale));
  }
  if (o.mode == Mode::kDynamic) {
    // The same checks GradScaler.__init__ asserts.
    if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
      return InvalidArgument("loss_scale.growth_factor must be > 1.0, got " +
                             std::to_string(o.growth_factor));
    if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
      return InvalidArgument("loss_scale.backoff_factor must be in (0, 1), got " +
                             std::to_string(o.backoff_factor));
    if (o.growth_interval <= 0)
      return InvalidArgument("loss_scale.growth_interval must be > 0, got " +
                             std::to_string(o.growth_interval));
  }
  return LossScaler(o);
}

LossScaler::LossScaler(const Options& opts) : opts_(opts) {
  state_.scale = opts_.mode == Mode::kNone ? 1.0f : static_cast<float>(opts_.init_scale);
}

const char* LossScaler::mode_name() const {
  switch (opts_.mode) {
    case Mode::kNone:
      return "none";
    case Mode::kStatic:
      return "static";
    case Mode::kDynamic:
      return "dynamic";
  }
  return "?";
}

double LossScaler::inv_scale() const {
  // GradScaler: inv_scale = self._scale.double().reciprocal().float()
  return static_cast<double>(static_cast<float>(1.0 / static_cast<double>(state_.scale)));
}

void LossScaler::Update(bool found_inf) {
  last_skipped_ = ShouldSkipStep(found_inf);
  if (last_skipped_) ++state_.skipped_total;
  if (opts_.mode != Mode::kDynamic) return;
  // torch._amp_update_scale_: the scale is float32; the product is formed in
  // double (float * double) and stored back to float.
  if (found_inf) {
    state_.scale = static_cast<float>(static_cast<double>(state_.scale) * opts_.backoff_factor);
    state_.growth_tracker = 0;
    return;
  }
  const int32_t successful = state_.growth_tracker + 1;
  if (successful == opts_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(state_.scale) * opts_.growth_factor);
    if (std::isfinite(grown)) state_.scale = grown;  // never grow past fp32's range
    state_.growth_tracker = 0;
  } else {
    state_.growth_tracker = successful;
  }
}

Status LossScaler::set_state(const State& s) {
  // 0 is a state GradScaler reaches (backing off on every step, no floor)
  // and saves; a negative or non-finite scale is none.
  if (!std::isfinite(s.scale) || !(s.scale >= 0))
    return InvalidArgument("loss scaler state: scale must be finite and >= 0, got " +
                           std::to_string(s.scale));
  if (s.growth_tracker < 0 || s.skipped_total < 0)
    return InvalidArgument("loss scaler state: negative growth_tracker or skipped_total");
  if (opts_.mode == Mode::kDynamic && s.growth_tracker >= opts_.growth_interval)
    return InvalidArgument("loss scaler state: growth_tracker " + std::to_string(s.growth_tracker) +
                           " is not below growth_interval " + std::to_string(opts_.growth_interval));
  state_.skipped_total = s.skipped_total;
  // Only a dynamic scale is state; a static scale (or none's 1) is
  // configuration, so a resumed run with a changed static scale (a typical
  // fix) uses the new one.
  if (opts_.mode == Mode::kDynamic) {
    state_.scale = s.scale;
    state_.growth_tracker = s.growth_tracker;
  }
  last_skipped_ = false;
  return Status::Ok();
}

}  // namespace firedrill::agent
