#include "controller/draws.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "controller/exam/crypto.h"

namespace firedrill::controller {

StatusOr<std::string> LoadOrCreateDrawKey(const std::string& path) {
  {
    std::ifstream in(path);
    std::string key;
    if (std::getline(in, key) && key.size() == 64) return key;
  }
  const std::string key = HexEncode(RandomBytes(32));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return FailedPrecondition("cannot write the draw key " + path + ": " + std::strerror(errno));
  const std::string line = key + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return FailedPrecondition("cannot write the draw key " + path + ": " + std::strerror(errno));
  return key;
}

uint64_t DrawSeed(const std::string& key, int64_t seed) {
  const std::string mac = HmacSha256(key, "firedrill draw seed " + std::to_string(seed));
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i) out = (out << 8) | static_cast<unsigned char>(mac[i]);
  return out;
}

}  // namespace firedrill::controller
