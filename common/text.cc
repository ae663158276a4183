#include "common/text.h"

#include <cstdio>
#include <ctime>

namespace firedrill {

std::string EscapeMarkdown(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r') {
      out += ' ';
      continue;
    }
    if (c != '\0' && std::string("\\`*_[]<>|#").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string EscapeHtml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string UtcText(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

std::string UtcClockText(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S UTC", &tm);
  return buf;
}

std::string DurationText(int64_t ms) {
  if (ms < 0) return "-";
  const int64_t s = ms / 1000;
  char buf[48];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%lld h %02lld min", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%lld min %02lld s", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(s));
  return buf;
}

}  // namespace firedrill
