// A minimal blocking HTTP/1.1 client over a POSIX socket (IPv4): the CLI's
// calls to the controller's HTTP side (`firedrill dashboard`) and the tests
// that check that side through a real socket. No Beast here: the tests'
// client must not share the server's parser.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <string>

namespace firedrill::http {

struct Reply {
  int status = 0;                              // 0: no reply (connection refused, closed, timed out)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A connection to host:port ("127.0.0.1:8080"); -1 on failure.
inline int Dial(const std::string& addr, int timeout_ms = 10000) {
  const size_t colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  if (inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one response from `fd` (`buffered` holds bytes read past an earlier
// one). A body with Content-Length is read to its length; one without it
// up to the connection's close, or `stop_after` bytes (an event stream).
inline Reply ReadReply(int fd, std::string* buffered, size_t stop_after = std::string::npos) {
  Reply r;
  std::string& buf = *buffered;
  char chunk[4096];
  size_t head_end;
  while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return r;
    buf.append(chunk, static_cast<size_t>(n));
  }
  const std::string head = buf.substr(0, head_end);
  buf.erase(0, head_end + 4);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.size() < 12) return r;
  r.status = std::atoi(status_line.c_str() + 9);
  while (line_end != std::string::npos) {
    const size_t next = head.find("\r\n", line_end + 2);
    const std::string line =
        head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
    }
    line_end = next;
  }
  const std::string len = r.Header("content-length");
  const size_t want = len.empty() ? stop_after : std::stoul(len);
  while (buf.size() < want) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
  }
  const size_t take = std::min(want, buf.size());
  r.body = buf.substr(0, take);
  buf.erase(0, take);
  return r;
}

// One request on a new connection ("Connection: close"). `headers`: extra
// header lines, each ending in "\r\n".
inline Reply Request(const std::string& addr, const std::string& method, const std::string& target,
                     const std::string& headers = "", const std::string& body = "") {
  const int fd = Dial(addr);
  if (fd < 0) return Reply();
  std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n" + headers;
  if (!body.empty() || method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  Reply r;
  std::string buf;
  if (SendAll(fd, req)) r = ReadReply(fd, &buf);
  ::close(fd);
  return r;
}

inline Reply Get(const std::string& addr, const std::string& target, const std::string& token = "") {
  return Request(addr, "GET", target, token.empty() ? "" : "Authorization: Bearer " + token + "\r\n");
}

}  // namespace firedrill::http
