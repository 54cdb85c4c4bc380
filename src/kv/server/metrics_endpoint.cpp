// MetricsEndpoint: see metrics_endpoint.hpp.
#include "kv/server/metrics_endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <system_error>

namespace rkv::kv::server {

namespace {

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

// A bound, listening, non-blocking TCP socket on address:port (numeric).
reactor::UniqueFd listen_on(const std::string& address, std::uint16_t port, std::uint16_t& bound) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    throw std::invalid_argument("metrics address must be a numeric IPv4 or IPv6 address: " + address);
  }
  reactor::UniqueFd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("metrics socket");
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart binds at once
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) throw_errno("metrics bind");
  if (::listen(fd.get(), 64) != 0) throw_errno("metrics listen");
  sockaddr_storage got{};
  socklen_t got_len = sizeof got;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&got), &got_len) != 0) throw_errno("metrics getsockname");
  bound = ntohs(got.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&got)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&got)->sin6_port);
  return fd;
}

std::string response(std::string_view status, std::string_view content_type, std::string_view body, bool head) {
  std::string out = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status, content_type,
      body.size());
  if (!head) out += body;
  return out;
}

constexpr std::string_view kText = "text/plain; charset=utf-8";
// What Prometheus asks for the text format (exposition format 0.0.4).
constexpr std::string_view kExposition = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

MetricsEndpoint::MetricsEndpoint(reactor::Reactor& reactor, Options options, Body metrics, Healthy healthy)
    : reactor_(reactor),
      options_(std::move(options)),
      metrics_(std::move(metrics)),
      healthy_(std::move(healthy)),
      scrapers_(options_.max_scrapers) {
  if (options_.max_scrapers == 0) throw std::invalid_argument("metrics: max_scrapers must be at least 1");
  listen_fd_ = listen_on(options_.address, options_.port, port_);
  listen_watch_ = reactor_.watch(listen_fd_.get(), EPOLLIN, [this](std::uint32_t) { on_listener(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  listen_watch_.reset();
  scrapers_.clear();
}

void MetricsEndpoint::append_stats(store::StatRows& rows) const {
  using store::StatKind;
  rows.insert(rows.end(), {
      {"metrics_scrapes", scrapes_, StatKind::counter, "GET /metrics answered (kvd --metrics)"},
      {"metrics_health_checks", health_checks_, StatKind::counter, "GET /health answered, 200 or 503"},
      {"metrics_bad_requests", bad_requests_, StatKind::counter,
       "metrics requests answered 400, 404, 405 or 431"},
      {"metrics_timeouts", timed_out_, StatKind::counter,
       "metrics connections dropped at their deadline (silent or slow scrapers)"},
      {"metrics_refused", refused_, StatKind::counter,
       "metrics connections closed at accept: too many open already"},
  });
}

void MetricsEndpoint::on_listener() noexcept {
  for (;;) {  // accept what is queued; EAGAIN ends the batch
    reactor::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err != EAGAIN && err != EWOULDBLOCK && err != last_accept_errno_) {
        spdlog::warn("metrics: accept: {}", std::strerror(err));  // e.g. EMFILE: logged once, retried
      }
      last_accept_errno_ = err;
      return;
    }
    last_accept_errno_ = 0;
    if (scrapers_.full()) {
      ++refused_;
      continue;  // fd closes here
    }
    const int raw = fd.get();
    Scraper s;
    s.fd = std::move(fd);
    const auto key = scrapers_.try_insert(std::move(s));
    if (!key) {
      ++refused_;
      continue;
    }
    Scraper& in = *scrapers_.find(*key);
    try {
      in.watch = reactor_.watch(raw, EPOLLIN | EPOLLRDHUP, [this, k = *key](std::uint32_t ev) { on_event(k, ev); });
      in.deadline = reactor_.after(options_.deadline, [this, k = *key] {
        ++timed_out_;
        drop(k);
      });
    } catch (const std::exception& e) {
      spdlog::warn("metrics: cannot watch a scraper: {}", e.what());
      drop(*key);
    }
  }
}

bool MetricsEndpoint::read_request(Scraper& s, bool& closed) noexcept {
  char buf[1024];
  for (;;) {
    const ssize_t n = ::recv(s.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      const std::size_t room = kMaxRequest + 1 - std::min(s.in.size(), kMaxRequest + 1);
      s.in.append(buf, std::min(static_cast<std::size_t>(n), room));  // one byte over the limit marks it
      if (s.in.find("\r\n\r\n") != std::string::npos || s.in.find("\n\n") != std::string::npos) return true;
      if (s.in.size() > kMaxRequest) return true;  // respond() refuses it
      continue;
    }
    if (n == 0) {
      closed = true;  // the scraper went away before a whole request
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) closed = true;
    return false;
  }
}

std::string MetricsEndpoint::respond(std::string_view request) {
  if (request.size() > kMaxRequest) {
    ++bad_requests_;
    return response("431 Request Header Fields Too Large", kText, "request head too large\n", false);
  }
  const std::size_t eol = request.find_first_of("\r\n");
  const std::string_view line = request.substr(0, eol);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || !line.substr(sp2 + 1).starts_with("HTTP/1.")) {
    ++bad_requests_;
    return response("400 Bad Request", kText, "bad request\n", false);
  }
  const std::string_view method = line.substr(0, sp1);
  std::string_view path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));  // a scraper may add parameters; none is used
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    ++bad_requests_;
    return response("405 Method Not Allowed", kText, "only GET and HEAD\n", false);
  }
  if (path == "/metrics") {
    ++scrapes_;
    return response("200 OK", kExposition, metrics_(), head);
  }
  if (path == "/health") {
    ++health_checks_;
    return healthy_() ? response("200 OK", kText, "ok\n", head)
                      : response("503 Service Unavailable", kText, "unhealthy\n", head);
  }
  ++bad_requests_;
  return response("404 Not Found", kText, "not found: /metrics and /health are served\n", head);
}

bool MetricsEndpoint::write_response(Scraper& s) noexcept {
  while (s.sent < s.out.size()) {
    const ssize_t n = ::send(s.fd.get(), s.out.data() + s.sent, s.out.size() - s.sent, MSG_NOSIGNAL);
    if (n > 0) {
      s.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;  // EAGAIN: wait for EPOLLOUT; an error: the deadline or the hangup ends it
  }
  return true;
}

void MetricsEndpoint::on_event(Key key, std::uint32_t events) noexcept {
  Scraper* s = scrapers_.find(key);
  if (s == nullptr) return;  // dropped earlier in this batch
  switch (s->phase) {
    case Phase::reading: {
      bool closed = false;
      if (!read_request(*s, closed)) {
        if (closed || (events & (EPOLLERR | EPOLLHUP)) != 0) drop(key);
        return;
      }
      try {
        s->out = respond(s->in);
      } catch (const std::exception& e) {
        spdlog::warn("metrics: cannot build a response: {}", e.what());
        drop(key);
        return;
      }
      s->in.clear();
      s->phase = Phase::writing;
      break;
    }
    case Phase::writing:
      if ((events & (EPOLLERR | EPOLLHUP)) != 0) {
        drop(key);
        return;
      }
      break;
  }
  if (write_response(*s)) {
    ::shutdown(s->fd.get(), SHUT_WR);  // the response is whole; the close follows
    drop(key);
    return;
  }
  try {
    s->watch.modify(EPOLLOUT);  // the rest when the socket takes it (the deadline bounds the wait)
  } catch (const std::exception&) {
    drop(key);
  }
}

void MetricsEndpoint::drop(Key key) noexcept { scrapers_.erase(key); }

}  // namespace rkv::kv::server
