#include "controller/draws.h"

#include <fcntl.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

namespace firedrill::controller {

StatusOr<std::string> LoadOrCreateDrawKey(const std::string& path) {
  {
    std::ifstream in(path);
    std::string key;
    if (std::getline(in, key) && key.size() == 64) return key;
  }
  std::random_device rd;
  std::string key;
  char buf[3];
  for (int i = 0; i < 32; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned>(rd() & 0xff));
    key += buf;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return FailedPrecondition("cannot write the draw key " + path + ": " + std::strerror(errno));
  const std::string line = key + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return FailedPrecondition("cannot write the draw key " + path + ": " + std::strerror(errno));
  return key;
}

uint64_t DrawSeed(const std::string& key, int64_t seed) {
  const std::string msg = "firedrill draw seed " + std::to_string(seed);
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), mac, &len);
  uint64_t out = 0;
  for (int i = 0; i < 8; ++i) out = (out << 8) | mac[i];
  return out;
}

}  // namespace firedrill::controller
