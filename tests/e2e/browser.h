// A real headless Chromium (Debian's `chromium`), driven through the
// DevTools protocol over its WebSocket: navigate, evaluate JavaScript,
// take screenshots, and collect what the page logged as errors (console
// errors and uncaught exceptions). For the dashboard's browser tests.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace firedrill::e2e {

class HeadlessBrowser {
 public:
  ~HeadlessBrowser();  // kills the browser and removes its profile
  // Starts chromium with a fresh profile in `profile_dir` and attaches to
  // its first page.
  static StatusOr<std::unique_ptr<HeadlessBrowser>> Start(const std::string& profile_dir);
  // Navigates and waits for the load event (at most `timeout_s`).
  Status Navigate(const std::string& url, int timeout_s = 20);
  // The value of a JavaScript expression (awaited if it is a promise).
  StatusOr<nlohmann::json> Eval(const std::string& expression);
  // Polls `expression` until it is true, at most `timeout_s`.
  Status WaitFor(const std::string& expression, int timeout_s);
  // A PNG of the page (the viewport at `width` x `height`) written to `path`.
  Status Screenshot(const std::string& path, int width = 1280, int height = 900);
  // Console errors and uncaught exceptions the page has raised so far.
  std::vector<std::string> Errors();

 private:
  HeadlessBrowser() = default;
  StatusOr<nlohmann::json> Call(const std::string& method, nlohmann::json params, int timeout_s = 20);
  void Collect(const nlohmann::json& event);
  struct Ws;
  std::unique_ptr<Ws> ws_;
  pid_t pid_ = -1;
  std::string profile_;
  int next_id_ = 1;
  std::vector<std::string> errors_;
  bool loaded_ = false;
};

}  // namespace firedrill::e2e
