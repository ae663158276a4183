// A small HTTP/1.1 server on Boost.Beast: one io_context and a few threads
// for every connection (no thread per connection), keep-alive, limits on
// header and body sizes, an idle timeout, and Server-Sent Events. It knows
// nothing of firedrill: a handler maps each request to a response, and an
// event stream's response to a source the server polls on a timer. Only
// http_server.cc includes Beast.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace firedrill::web {

struct HttpRequest {
  std::string method;                          // "GET"
  std::string target;                          // as sent: "/api/sessions?x=1"
  std::string path;                            // the target before '?', percent-decoded
  std::map<std::string, std::string> query;    // decoded; a repeated key keeps its last value
  std::map<std::string, std::string> headers;  // names lower-cased; repeats joined with ", "
  std::string body;
  std::string peer;  // "127.0.0.1:40312"
  // A header's value, "" when absent; `name` lower-case.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string Query(const std::string& key) const {
    auto it = query.find(key);
    return it == query.end() ? std::string() : it->second;
  }
};

// The source of an open event stream (text/event-stream). The server calls
// Poll on one of its threads every `HttpResponse::poll`: it appends what to
// send now to `out` (nothing is fine) and returns false to end the stream.
// It must not block.
class EventSource {
 public:
  virtual ~EventSource() = default;
  virtual bool Poll(std::string* out) = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;  // with a stream: sent first (the first events)
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<EventSource> stream;
  std::chrono::milliseconds poll{1000};
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// "/a%20b" -> "/a b"; false on a malformed escape. `plus_is_space` for
// query strings (application/x-www-form-urlencoded).
bool PercentDecode(std::string_view in, std::string* out, bool plus_is_space = false);
// Splits a request target into its decoded path and query; false (and a
// reason) on a malformed one.
bool ParseTarget(std::string_view target, std::string* path, std::map<std::string, std::string>* query,
                 std::string* why);
// The value of cookie `name` in a Cookie header; "" when it is not there.
std::string CookieValue(std::string_view header, std::string_view name);
// "404 Not Found"'s reason phrase for a status code.
const char* ReasonPhrase(int status);

struct HttpServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  int threads = 2;
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 64 * 1024;
  std::chrono::seconds idle_timeout{30};      // a keep-alive connection waiting for its next request
  std::chrono::seconds write_timeout{30};     // a client that stops reading
  std::chrono::seconds stream_keepalive{15};  // an idle event stream sends a comment this often
  int max_connections = 256;                  // beyond: 503 and close
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions opts, HttpHandler handler);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  // Binds the listener and starts the threads; Unavailable saying where
  // when the address cannot be bound, InvalidArgument when it cannot be read.
  Status Start();
  // host:port actually bound.
  const std::string& address() const;
  // Connections open now; requests answered so far.
  int connections() const;
  uint64_t requests() const;
  // Closes the listener and every connection, joins the threads. Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace firedrill::web
