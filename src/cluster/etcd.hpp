#pragma once
// EtcdClient: HTTP POSTs to etcd's v3 JSON gateway (etcd_wire.hpp), driven by
// a Reactor so a kvd keeps its lease alive without blocking its data path
// (docs/cluster.md "Talking to etcd").
//
// libcurl's multi interface does the HTTP: curl tells us which sockets to
// watch (each becomes a reactor Registration) and when to call it back (one
// reactor Timer); the reactor's events go back to curl_multi_socket_action.
// Connections to etcd are kept and reused between requests.
//
// Owns: the curl multi handle, one easy handle per request in flight, the
// Registrations of curl's sockets and the timer. The Reactor is the caller's
// and must outlive it.
//
// Thread: the reactor's. A request's callback runs on the reactor, once; it
// may post more requests but must not destroy the EtcdClient. The destructor
// drops requests still in flight without calling their callbacks.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reactor/reactor.hpp"

namespace rkv::cluster {

// A failure to reach or use etcd where the caller cannot go on (setup:
// kvd --cluster joining, a client reading a cluster's members). `code` is
// an errno value for the C API (ECONNREFUSED, ETIMEDOUT, EPROTO, EHOSTDOWN, ...).
class ClusterError : public std::runtime_error {
 public:
  ClusterError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

struct EtcdReply {
  bool ok = false;       // an HTTP 200 reply arrived; body holds it
  long http_status = 0;  // 0: no HTTP reply at all (connect failed, timed out)
  std::string body;
  std::string error;     // why not ok: curl's message or the gateway's
  int code = 0;          // why not ok, as an errno value

  // Throws ClusterError(code, what + ": " + error) unless ok.
  void check(std::string_view what) const;
};
using EtcdCallback = std::function<void(EtcdReply&)>;
// One line of a streamed reply (without its newline); false ends the stream.
using EtcdLineCallback = std::function<bool(std::string_view)>;

class EtcdClient {
 public:
  // `endpoints`: "http://HOST:PORT" of one or more members of the etcd
  // cluster (ClusterUrl::endpoints()). Requests go to one of them; a request
  // that gets no HTTP reply from it (refused, unreachable, timed out, a
  // stream cut) fails as ever, and the following ones go to the next (the
  // callers' retries, a watch's restart). A new client starts at the one
  // the process's clients of the same list moved on to last (a
  // process-wide table, under a mutex), not at a member already found
  // down. `timeout` bounds each request,
  // connecting included. Throws ClusterError if there is no endpoint or
  // libcurl cannot be set up.
  EtcdClient(reactor::Reactor& reactor, std::vector<std::string> endpoints, std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;
  EtcdClient(EtcdClient&&) = delete;
  EtcdClient& operator=(EtcdClient&&) = delete;

  // Async: POSTs `body` to endpoint + path; `cb` runs with the reply (or the
  // failure) from a reactor callback, at most `timeout` later (0: the
  // client's). Throws std::bad_alloc, ClusterError if curl refuses the
  // request (out of memory).
  void post(std::string_view path, std::string body, EtcdCallback cb,
            std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Async, streaming (a watch): POSTs `body`; while the reply is HTTP 200,
  // each newline-terminated line of it goes to `on_line` as it arrives (a
  // line over kMaxLine ends the stream). `on_end` runs once when the stream
  // ended, for whatever reason (etcd closed it, the connection broke,
  // on_line returned false: the reply is then not ok). Only connecting is
  // bounded by the timeout; the stream itself may last forever (TCP
  // keepalive notices a peer that vanished). Throws like post().
  void stream(std::string_view path, std::string body, EtcdLineCallback on_line, EtcdCallback on_end);
  static constexpr std::size_t kMaxLine = 1 << 20;

  // Sync, for setup and shutdown: posts and runs the reactor until the reply
  // (at most `timeout`; 0: the client's), and when no HTTP reply came, tries
  // each other endpoint the same way. Outside reactor callbacks only.
  [[nodiscard]] EtcdReply call(std::string_view path, std::string body,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  [[nodiscard]] std::size_t in_flight() const noexcept { return requests_.size(); }
  // The endpoint requests go to now.
  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoints_[current_]; }

 private:
  struct Request;
  // post() and stream() (on_line set): its CURL*. timeout 0: no overall bound.
  [[nodiscard]] void* start(std::string_view path, std::string body, EtcdCallback cb,
                            std::chrono::milliseconds timeout, EtcdLineCallback on_line = nullptr);
  void cancel(void* easy) noexcept;  // drops a request in flight; its callback is not called
  static int on_socket(void* easy, int fd, int what, void* self, void* socketp);
  static int on_timer(void* multi, long timeout_ms, void* self);
  void socket_action(int fd, int flags);
  void complete_done();
  // A request to endpoints_[failed] got no HTTP reply: requests go to the next one from now on.
  void next_endpoint(std::size_t failed) noexcept;

  reactor::Reactor* reactor_;
  std::vector<std::string> endpoints_;  // at least one
  std::size_t current_ = 0;             // where requests go
  std::chrono::milliseconds timeout_;
  void* multi_ = nullptr;  // CURLM*
  std::unordered_map<void*, std::unique_ptr<Request>> requests_;  // by CURL*
  std::unordered_map<int, reactor::Registration> sockets_;       // curl's sockets
  reactor::Timer timer_;
};

}  // namespace rkv::cluster
