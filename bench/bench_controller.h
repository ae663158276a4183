// A firedrill-controller for a benchmark: started from the build's bin
// directory on a free port and a private state dir, stopped (SIGTERM) and
// its state removed when the object goes. It dies with the benchmark.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace firedrill::bench {

class BenchController {
 public:
  // `extra`: more controller flags ("--hosts", "netns").
  BenchController(const std::string& scenarios, const std::vector<std::string>& extra = {});
  ~BenchController();
  BenchController(const BenchController&) = delete;
  BenchController& operator=(const BenchController&) = delete;

  bool ok() const { return !addr_.empty(); }
  const std::string& addr() const { return addr_; }
  const std::string& dir() const { return dir_; }  // its state dir (controller.log, draw.key)
  pid_t pid() const { return pid_; }
  // Where its agents run, as its log says at start: "netns" or "loopback".
  std::string hosts_mode() const;

 private:
  pid_t pid_ = -1;
  std::string addr_, dir_;
};

}  // namespace firedrill::bench
