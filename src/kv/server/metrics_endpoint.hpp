#pragma once
// MetricsEndpoint: kvd --metrics ADDR:PORT, a minimal HTTP/1.1 server on the
// reactor for scrapers and supervisors (docs/observability.md):
//   GET /metrics  200, the Prometheus text exposition (the body callback)
//   GET /health   200 "ok" while the healthy callback says so, else 503
//   HEAD of both; anything else 404 (path), 405 (method), 400 (malformed),
//   431 (a request head over kMaxRequest bytes).
// One request per connection ("Connection: close"). Everything is
// non-blocking and runs on the reactor's thread between its other events: a
// scraper costs one accept, one read, one write and a close. A scraper that
// sends nothing, garbage or reads slowly cannot hold the loop: each
// connection has a deadline from its accept (Options::deadline) after which
// it is dropped whatever it is doing, at most Options::max_scrapers are open
// at once (more are accepted and closed at once), and a request head is read
// into at most kMaxRequest bytes.
//
// Owns: the listening socket, the scrapers' sockets, their watches and
// timers (a SlotTable; callbacks carry slot + generation keys). Thread: the
// reactor's. Register in the constructor, unregister in the destructor.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "kv/store/stats.hpp"
#include "reactor/fd.hpp"
#include "reactor/reactor.hpp"
#include "reactor/slot_table.hpp"

namespace rkv::kv::server {

class MetricsEndpoint {
 public:
  static constexpr std::size_t kMaxRequest = 4096;

  struct Options {
    std::string address = "127.0.0.1";  // numeric IPv4 or IPv6
    std::uint16_t port = 0;             // 0: the kernel picks one (port())
    std::chrono::milliseconds deadline{5000};  // accept to closed, whatever the scraper does
    std::uint32_t max_scrapers = 16;
  };
  using Body = std::function<std::string()>;
  using Healthy = std::function<bool()>;

  // Binds and listens; throws std::system_error (bind, listen) or
  // std::invalid_argument (address).
  MetricsEndpoint(reactor::Reactor& reactor, Options options, Body metrics, Healthy healthy);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  // Its rows of the server's statistics (metrics_*).
  void append_stats(store::StatRows& rows) const;

 private:
  enum class Phase : std::uint8_t { reading, writing };
  struct Scraper {
    reactor::UniqueFd fd;
    reactor::Registration watch;  // destroyed before fd is closed (declared after it)
    reactor::Timer deadline;
    Phase phase = Phase::reading;
    std::string in;
    std::string out;
    std::size_t sent = 0;
  };
  using Key = reactor::SlotKey;

  void on_listener() noexcept;
  void on_event(Key key, std::uint32_t events) noexcept;
  // Reads what is there; true once the request head is complete (or must be refused).
  [[nodiscard]] bool read_request(Scraper& s, bool& closed) noexcept;
  // The whole response to s.in (status line, headers, body).
  [[nodiscard]] std::string respond(std::string_view request);
  // Writes what the socket takes; true when everything was sent.
  [[nodiscard]] bool write_response(Scraper& s) noexcept;
  void drop(Key key) noexcept;

  reactor::Reactor& reactor_;
  Options options_;
  Body metrics_;
  Healthy healthy_;
  reactor::UniqueFd listen_fd_;
  reactor::Registration listen_watch_;
  std::uint16_t port_ = 0;
  reactor::SlotTable<Scraper> scrapers_;
  // Counted here, printed as the metrics_* rows.
  std::uint64_t scrapes_ = 0;         // /metrics answered 200
  std::uint64_t health_checks_ = 0;   // /health answered (200 or 503)
  std::uint64_t bad_requests_ = 0;    // answered 400, 404, 405 or 431
  std::uint64_t timed_out_ = 0;       // dropped at their deadline
  std::uint64_t refused_ = 0;         // closed at accept: max_scrapers open already
  int last_accept_errno_ = 0;         // an accept error is logged when it first appears
};

}  // namespace rkv::kv::server
