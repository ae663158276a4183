#include "controller/web/http_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <exception>
#include <optional>
#include <thread>

#include "common/log.h"

namespace firedrill::web {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Str(beast::string_view v) { return std::string(v.data(), v.size()); }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool PercentDecode(std::string_view in, std::string* out, bool plus_is_space) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexDigit(in[i + 1]), lo = HexDigit(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      *out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      *out += ' ';
    } else {
      *out += c;
    }
  }
  return true;
}

bool ParseTarget(std::string_view target, std::string* path, std::map<std::string, std::string>* query,
                 std::string* why) {
  query->clear();
  if (target.empty() || target[0] != '/') {
    *why = "the request target must be a path starting with '/'";
    return false;
  }
  const size_t q = target.find('?');
  if (!PercentDecode(target.substr(0, q), path)) {
    *why = "a malformed percent escape in the path";
    return false;
  }
  if (path->find('\0') != std::string::npos) {
    *why = "a NUL byte in the path";
    return false;
  }
  if (q == std::string_view::npos) return true;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key, value;
    if (!PercentDecode(pair.substr(0, eq), &key, true) ||
        (eq != std::string_view::npos && !PercentDecode(pair.substr(eq + 1), &value, true))) {
      *why = "a malformed percent escape in the query";
      return false;
    }
    (*query)[key] = value;
  }
  return true;
}

std::string CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    const size_t semi = header.find(';');
    std::string_view part = header.substr(0, semi);
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    const size_t eq = part.find('=');
    if (eq != std::string_view::npos && part.substr(0, eq) == name) {
      std::string_view v = part.substr(eq + 1);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return std::string(v);
    }
  }
  return "";
}

const char* ReasonPhrase(int status) {
  const beast::string_view r = http::obsolete_reason(static_cast<http::status>(status));
  return r.empty() ? "Unknown" : r.data();
}

struct HttpServer::Impl {
  HttpServerOptions opts;
  HttpHandler handler;
  std::string bound;
  std::unique_ptr<asio::io_context> ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<int> open{0};
  std::atomic<uint64_t> answered{0};
  std::atomic<bool> stopped{false};

  void Accept();
};

namespace {

// One client connection: requests in order, each answered before the next
// is read (HTTP/1.1 without pipelining's overlap), on its own strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const HttpServerOptions& opts, const HttpHandler& handler,
             std::atomic<int>* open, std::atomic<uint64_t>* answered, bool refuse)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        opts_(opts),
        handler_(handler),
        open_(open),
        answered_(answered),
        refuse_(refuse) {
    open_->fetch_add(1);
    beast::error_code ec;
    const tcp::endpoint ep = stream_.socket().remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Connection() { open_->fetch_sub(1); }

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (self->refuse_) {
        HttpResponse busy;
        busy.status = 503;
        busy.body = "too many connections; try again shortly\n";
        self->keep_alive_ = false;
        return self->Write(busy, 11);
      }
      self->Read();
    });
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(opts_.max_header_bytes));
    parser_->body_limit(opts_.max_body_bytes);
    stream_.expires_after(opts_.idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      HttpResponse r;
      r.status = ec == http::error::body_limit ? 413 : 431;
      r.body = ec == http::error::body_limit
                   ? "request body over " + std::to_string(opts_.max_body_bytes) + " bytes\n"
                   : "request header over " + std::to_string(opts_.max_header_bytes) + " bytes\n";
      keep_alive_ = false;
      return Write(r, 11);
    }
    if (ec) return Close();  // end of stream, timeout, reset: nothing to answer
    http::request<http::string_body> req = parser_->release();
    HttpRequest in;
    in.method = Str(req.method_string());
    in.target = Str(req.target());
    in.peer = peer_;
    in.body = std::move(req.body());
    for (const auto& f : req) {
      std::string& v = in.headers[Lower(Str(f.name_string()))];
      v += v.empty() ? Str(f.value()) : ", " + Str(f.value());
    }
    keep_alive_ = req.keep_alive();
    const unsigned version = req.version();
    HttpResponse out;
    std::string why;
    if (!ParseTarget(in.target, &in.path, &in.query, &why)) {
      out.status = 400;
      out.body = why + "\n";
    } else {
      try {
        out = handler_(in);
      } catch (const std::exception& e) {
        spdlog::error("http {} {}: the handler threw: {}", in.method, in.path, e.what());
        out = HttpResponse();
        out.status = 500;
        out.body = "internal error\n";
      }
    }
    answered_->fetch_add(1);
    if (out.stream) return OpenStream(std::move(out));
    Write(out, version);
  }

  void Write(const HttpResponse& r, unsigned version) {
    auto msg =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), version);
    msg->set(http::field::server, "firedrill");
    msg->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) msg->set(beast::string_view(k.data(), k.size()), v);
    msg->keep_alive(keep_alive_);
    msg->body() = r.body;
    msg->prepare_payload();
    stream_.expires_after(opts_.write_timeout);
    http::async_write(stream_, *msg, [self = shared_from_this(), msg](beast::error_code ec, std::size_t) {
      if (ec || msg->need_eof()) return self->Close();
      self->Read();
    });
  }

  // An event stream: the header, then whatever the source gives, each write
  // as it comes; the body ends when the connection closes (HTTP/1.1 allows
  // a close-delimited body, and EventSource reads it as it arrives).
  void OpenStream(HttpResponse r) {
    source_ = r.stream;
    poll_ = std::max(r.poll, std::chrono::milliseconds(50));
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + ReasonPhrase(r.status) +
                       "\r\nServer: firedrill\r\nContent-Type: " + r.content_type +
                       "\r\nCache-Control: no-cache\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    WriteRaw(head + "\r\n" + r.body);
  }

  void WriteRaw(std::string data) {
    auto buf = std::make_shared<std::string>(std::move(data));
    stream_.expires_after(opts_.write_timeout);
    asio::async_write(stream_, asio::buffer(*buf),
                      [self = shared_from_this(), buf](beast::error_code ec, std::size_t) {
                        if (ec) return self->Close();
                        self->stream_.expires_never();
                        self->WaitStream();
                      });
  }

  void WaitStream() {
    timer_.expires_after(poll_);
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->PollStream();
    });
  }

  void PollStream() {
    std::string out;
    bool more = false;
    try {
      more = source_->Poll(&out);
    } catch (const std::exception& e) {
      spdlog::error("http event stream: the source threw: {}", e.what());
    }
    if (!more) {
      if (out.empty()) return Close();
      // The last words, then the end.
      auto buf = std::make_shared<std::string>(std::move(out));
      stream_.expires_after(opts_.write_timeout);
      asio::async_write(stream_, asio::buffer(*buf),
                        [self = shared_from_this(), buf](beast::error_code, std::size_t) { self->Close(); });
      return;
    }
    if (out.empty()) {
      idle_ += poll_;
      if (idle_ < opts_.stream_keepalive) return WaitStream();
      out = ": keep-alive\n\n";  // a comment: tells a dead client apart, keeps proxies open
    }
    idle_ = std::chrono::milliseconds(0);
    WriteRaw(std::move(out));
  }

  void Close() {
    beast::error_code ec;
    timer_.cancel();
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpServerOptions& opts_;
  const HttpHandler& handler_;
  std::atomic<int>* open_;
  std::atomic<uint64_t>* answered_;
  bool refuse_ = false;
  bool keep_alive_ = true;
  std::string peer_;
  std::shared_ptr<EventSource> source_;
  std::chrono::milliseconds poll_{1000};
  std::chrono::milliseconds idle_{0};
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor->async_accept(asio::make_strand(*ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (stopped.load()) return;
    if (!ec) {
      const bool refuse = open.load() >= opts.max_connections;
      std::make_shared<Connection>(std::move(socket), opts, handler, &open, &answered, refuse)->Start();
    } else if (ec != asio::error::operation_aborted) {
      spdlog::warn("http: accept failed: {}", ec.message());
    }
    if (ec != asio::error::operation_aborted) Accept();
  });
}

HttpServer::HttpServer(HttpServerOptions opts, HttpHandler handler) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  impl_->handler = std::move(handler);
}

HttpServer::~HttpServer() {
  Stop();
  // Pending handlers hold connections, which count themselves out of
  // `open`: destroy them while the rest of Impl is still there.
  impl_->acceptor.reset();
  impl_->ioc.reset();
}

Status HttpServer::Start() {
  Impl& m = *impl_;
  const std::string& listen = m.opts.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("http listen address '" + listen + "': want host:port");
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  if (host.empty()) host = "0.0.0.0";
  int port = 0;
  try {
    size_t used = 0;
    port = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1 || port < 0 || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    return InvalidArgument("http listen address '" + listen + "': the port must be a number from 0 to 65535");
  }
  beast::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("http listen address '" + listen + "': '" + host + "' is not an IP address");
  m.ioc = std::make_unique<asio::io_context>(std::max(1, m.opts.threads));
  m.acceptor.emplace(*m.ioc);
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  m.acceptor->open(ep.protocol(), ec);
  if (!ec) m.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor->bind(ep, ec);
  if (!ec) m.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Unavailable("cannot serve http on " + listen + ": " + ec.message() +
                       " (in use? pick another address, or port 0 for a free one)");
  }
  const tcp::endpoint local = m.acceptor->local_endpoint(ec);
  const std::string shown =
      local.address().is_v6() ? "[" + local.address().to_string() + "]" : local.address().to_string();
  m.bound = shown + ":" + std::to_string(local.port());
  m.Accept();
  for (int i = 0; i < std::max(1, m.opts.threads); ++i)
    m.threads.emplace_back([ioc = m.ioc.get()] { ioc->run(); });
  return Status::Ok();
}

const std::string& HttpServer::address() const { return impl_->bound; }
int HttpServer::connections() const { return impl_->open.load(); }
uint64_t HttpServer::requests() const { return impl_->answered.load(); }

void HttpServer::Stop() {
  Impl& m = *impl_;
  if (m.stopped.exchange(true) || !m.ioc) return;
  m.ioc->stop();
  for (auto& t : m.threads) t.join();
  m.threads.clear();
  beast::error_code ec;
  if (m.acceptor) m.acceptor->close(ec);
}

}  // namespace firedrill::web
