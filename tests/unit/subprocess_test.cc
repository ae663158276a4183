// RunCommand with limits: the command and everything it started are killed
// at the limit or when the caller cancels; what it printed is kept.
#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>

#include "common/format.h"

namespace firedrill {
namespace {

// Whether process `pid` is gone (or a zombie nobody has reaped yet), within
// a few seconds.
bool GoneSoon(long pid) {
  for (int i = 0; i < 100; ++i) {
    struct stat st {};
    const std::string proc = "/proc/" + std::to_string(pid);
    if (stat(proc.c_str(), &st) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(RunCommandLimits, PastItsLimitTheCommandAndWhatItStartedAreKilled) {
  RunLimits limits;
  limits.limit = std::chrono::milliseconds(300);
  // A child in the background, as a launcher's ranks are: it must go too.
  // (timed_out is set only where the limit killed the group.)
  auto r = RunCommand({"sh", "-c", "sleep 30 & echo $!; wait"}, limits);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->timed_out);
  EXPECT_FALSE(r->cancelled);
  EXPECT_NE(r->exit_code, 0);
  const long child = std::atol(r->output.c_str());
  ASSERT_GT(child, 0) << r->output;
  EXPECT_TRUE(GoneSoon(child)) << "the background sleep " << child << " outlived the limit";
}

TEST(RunCommandLimits, TheCallerCancelsAndTheEnvironmentIsPassed) {
  std::atomic<bool> stop{false};
  RunLimits limits;
  limits.cancelled = [&] { return stop.load(); };
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  auto r = RunCommand({"sh", "-c", "sleep 30"}, limits);
  t.join();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->cancelled);
  EXPECT_FALSE(r->timed_out);

  RunLimits env;
  env.limit = std::chrono::seconds(30);
  env.env = {"FD_PROBE_DIR=/some/where"};
  r = RunCommand({"sh", "-c", "echo $FD_PROBE_DIR"}, env);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_FALSE(r->timed_out);
  EXPECT_EQ(r->output, "/some/where");
}

TEST(PartDiffText, SaysWhatDiffersAndKeepsANaN) {
  EXPECT_EQ(PartDiffText(0, 0, 0, "", ""), "-");
  EXPECT_EQ(PartDiffText(1, 0, 0, "batch=5", "batch=0"), "batch=5 | batch=0");
  EXPECT_EQ(PartDiffText(13, 13, 0, "", ""), "only one holds them");
  EXPECT_EQ(PartDiffText(2, 0, 0.0123, "", ""), "max |diff| 0.0123");
  EXPECT_EQ(PartDiffText(2, 0, std::nan(""), "", ""), "max |diff| nan");
  EXPECT_EQ(PartDiffText(2, 0, 0, "", ""), "other bytes");
}

}  // namespace
}  // namespace firedrill
