#include "common/paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#ifndef FIREDRILL_SOURCE_DIR
#define FIREDRILL_SOURCE_DIR ""
#endif

namespace firedrill {

std::string DefaultStateDir() {
  if (const char* env = std::getenv("FIREDRILL_STATE_DIR"); env && *env) return env;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/firedrill";
  }
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/share/firedrill";
}

std::string ExecutableDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = 0;
  return std::filesystem::path(buf).parent_path().string();
}

std::string DefaultScenarioDir() {
  if (const char* env = std::getenv("FIREDRILL_SCENARIOS"); env && *env) return env;
  std::error_code ec;
  std::string src = std::string(FIREDRILL_SOURCE_DIR) + "/scenarios";
  if (std::string(FIREDRILL_SOURCE_DIR).size() && std::filesystem::is_directory(src, ec)) return src;
  return ExecutableDir() + "/../share/firedrill/scenarios";
}

std::string DefaultSkillsFile() {
  if (const char* env = std::getenv("FIREDRILL_SKILLS"); env && *env) return env;
  std::error_code ec;
  std::string src = std::string(FIREDRILL_SOURCE_DIR) + "/docs/SKILLS.md";
  if (std::string(FIREDRILL_SOURCE_DIR).size() && std::filesystem::is_regular_file(src, ec)) return src;
  return ExecutableDir() + "/../share/firedrill/SKILLS.md";
}

std::string DefaultControllerAddress() {
  if (const char* env = std::getenv("FIREDRILL_CONTROLLER"); env && *env) return env;
  return "127.0.0.1:50071";
}

bool MakeDirs(const std::string& path, std::string* err) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    if (err) *err = "cannot create directory " + path + ": " + ec.message();
    return false;
  }
  return true;
}

bool MakePrivateDir(const std::string& path, std::string* err) {
  if (!MakeDirs(path, err)) return false;
  if (::chmod(path.c_str(), 0700) != 0) {
    if (err) *err = "cannot make " + path + " private (chmod 0700): " + std::strerror(errno);
    return false;
  }
  return true;
}

int WriteNewFile(const std::string& path, const std::string& text, unsigned mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return errno;
  // The mode as asked, whatever the umask.
  int err = ::fchmod(fd, mode) == 0 ? 0 : errno;
  for (size_t done = 0; err == 0 && done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0 || errno != EINTR) {
      err = n == 0 ? EIO : errno;
    }
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) ::unlink(path.c_str());  // never half a file where a whole one is expected
  return err;
}

}  // namespace firedrill
