#pragma once
// Client: the C++ client API over one RDMA connection to a kvd server.
//
// Owns: the rdma_cm event channel and cm_id (inside the Endpoint), the
// Endpoint (QP, CQ, registered pools), the ClientConn protocol state machine
// and its reactor registrations. The Reactor is the caller's and must outlive
// the Client.
//
// Thread: everything runs on the reactor's thread; every public member
// function (connect() included) asserts it in debug builds
// (Reactor::assert_owner_thread). Async set()/get()/del()/call() queue
// the request and schedule one flush on the reactor (requests submitted
// together coalesce); completions arrive from Reactor::run()/run_once(). The
// sync helpers run the reactor themselves until their op completes; they must
// not be called from a reactor callback (they return Status::invalid_use).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kv/client/client_conn.hpp"
#include "kv/client/landing.hpp"
#include "kv/conn/registrar.hpp"
#include "reactor/reactor.hpp"
#include "verbs/event_channel.hpp"

namespace rkv::kv::conn {
class Endpoint;
}

namespace rkv::kv::client {

using conn::Endpoint;
using conn::PdRegistrar;

inline constexpr std::uint16_t kDefaultPort = 7471;


struct ClientOptions {
  std::uint32_t max_in_flight = 16;  // receive buffers posted = credits announced to the server
  std::uint32_t recv_size = 8192;    // each receive buffer (a coalesced batch of replies)
  std::uint32_t send_count = 16;     // send buffers (SENDs in flight)
  std::uint32_t send_size = 8192;    // each send buffer (a coalesced batch of requests)
  std::chrono::milliseconds resolve_timeout{10'000};  // address and route resolution, each
  std::chrono::milliseconds connect_timeout{30'000};  // rdma_connect -> ESTABLISHED
  // The sync helpers' wait (then Status::timeout), and the watchdog of every
  // request: while requests are in flight and no reply or completion came
  // for op_timeout plus a quarter of it (at most 1 s more; looked at every
  // such quarter), the connection fails with "no reply for N ms" and its
  // requests complete with connection_failed; e.g. a server that is stopped
  // but whose transport still acknowledges. 0: neither (waits forever).
  std::chrono::milliseconds op_timeout{30'000};
  std::chrono::milliseconds close_timeout{5'000};     // DISCONNECTED wait, and the flush drain
  RdvOptions rdv{};  // large values: landing buffers, registration cache (client_conn.hpp)
  // Spin budget of the client's CQ poller (reactor.hpp, "Spin, then block"):
  // after any completion or post the reactor keeps polling the CQ this long
  // before it arms it and sleeps. 0: pure completion events;
  // reactor::kSpinForever: busy polling (a core at 100 % while the client lives).
  std::chrono::microseconds poll{reactor::kDefaultSpin};
  // Post requests as soon as this many are queued, instead of at the end of
  // the loop turn (0: at the end of the turn only), so the server works on
  // the first ones while the rest are submitted.
  std::uint32_t request_batch = 8;
  // GetMode::read: GETs by RDMA READ of the server's index (no message; a
  // message GET only as the documented fallback). Against a server without
  // an index GETs stay messages (logged once at connect).
  GetMode get_mode = GetMode::rpc;
  // Every GET by message says an in-sync backup of the key's shard may
  // answer it (wire.hpp kFlagBackupRead; a cluster's --read-from backups,
  // which ShardSet sets: docs/cluster.md "Reads from backups").
  bool backup_reads = false;
  // Ask the server for grants (docs/protocol.md "SET by grant"): a large SET
  // then goes as one RDMA WRITE WITH IMMEDIATE into landing space the reply
  // to an earlier large SET granted, instead of a request the server answers
  // with a READ of the value (kvload --grants on). Off by default: half the
  // control messages, but slower on Soft-RoCE as measured so far
  // (docs/performance.md "SET by grant").
  bool grants = false;
  // The server's auth token (kvd --auth-token-file; conn::read_auth_token_file
  // reads one): its digest goes in the connect request. Empty: none. A server
  // that refuses it fails connect() with EACCES.
  std::string auth_token;
};

// Setup failure: what() says which step failed and why; code() is an errno
// value (ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, EPROTO, EINVAL, ENODEV...).
class ConnectError : public std::runtime_error {
 public:
  ConnectError(int code, const std::string& what, bool no_listener = false)
      : std::runtime_error(what), code_(code), no_listener_(no_listener) {}
  [[nodiscard]] int code() const noexcept { return code_; }
  // ECONNREFUSED by the peer's node itself: nothing listens on that port
  // there (a kvd listens from before it joins a cluster until it exits, so
  // the process at that address is gone). Other refusals and timeouts: false.
  [[nodiscard]] bool no_listener() const noexcept { return no_listener_; }

 private:
  int code_;
  bool no_listener_;
};

class Client {
 public:
  // Resolves `host` (numeric or a name), connects and returns an established
  // client. Throws ConnectError (or std::bad_alloc).
  static std::unique_ptr<Client> connect(reactor::Reactor& reactor, const std::string& host, std::uint16_t port,
                                         const ClientOptions& options = {});

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  Client(Client&&) = delete;
  Client& operator=(Client&&) = delete;
  ~Client();  // close() if still open; never throws

  // Async: the callback runs on the reactor thread (see client_conn.hpp for
  // its contract). The value must stay alive until the callback; the key is
  // copied. A refused request returns its status and never calls back.
  // Values of 4 KiB and more go by rendezvous: the server RDMA READs them
  // from `value`, which is registered through a pin-down cache and STAYS
  // registered for reuse: call forget() before freeing/unmapping such a
  // buffer (or the cache could later serve its stale registration).
  // `path`, if given: how an accepted request travels (ClientConn::submit decides).
  // ttl_ms > 0: the key expires that many ms after the server stores it; 0:
  // no expiry (a TTL the key had is cleared, as a Redis SET does).
  [[nodiscard]] Status set(std::string_view key, std::span<const std::byte> value, Callback cb,
                           Path* path = nullptr, std::uint64_t ttl_ms = 0);
  [[nodiscard]] Status set(std::string_view key, std::string_view value, Callback cb, std::uint64_t ttl_ms = 0) {
    return set(key, std::as_bytes(std::span<const char>(value.data(), value.size())), std::move(cb), nullptr,
               ttl_ms);
  }
  [[nodiscard]] Status get(std::string_view key, Callback cb);
  // GET into the caller's memory (ClientConn::submit_get_into): `into` must
  // stay valid until the callback; the callback's value lies in `into` when
  // it landed there directly, else (a small value) the caller copies it.
  [[nodiscard]] Status get_into(std::string_view key, std::span<std::byte> into, Callback cb);
  // Removes the key; the callback's `found` says whether it existed. Queued
  // behind earlier requests like set()/get() (no value moves).
  [[nodiscard]] Status del(std::string_view key, Callback cb);
  // The key expires ttl_ms from now (0: it persists); `found`: the key existed.
  [[nodiscard]] Status expire(std::string_view key, std::uint64_t ttl_ms, Callback cb);
  // `found`: the key exists; its remaining time is then ClientConn::ttl_of(value) ms (-1: no expiry).
  [[nodiscard]] Status ttl(std::string_view key, Callback cb);
  // A replication record at shard epoch `epoch` (ClientConn::submit_record):
  // what a shard's primary sends its backups. `value` as set()'s.
  [[nodiscard]] Status record(proto::Opcode op, std::string_view key, std::span<const std::byte> value,
                              std::uint64_t ttl_ms, std::uint64_t epoch, Callback cb);

  // A user-defined operation (docs/protocol.md "CALL"): runs the server's
  // handler of user opcode `op` on `request` (which must stay alive until
  // the callback; from 4 KiB it goes by rendezvous, registered through the
  // pin-down cache like a large set() value: forget() it before freeing).
  // The callback gets the handler's reply bytes (status ok, found true), or
  // no_handler / handler_failed / refused / io_error / ... with no bytes. A
  // large reply (4 KiB and more) is READ from the server into a landing
  // buffer: adopt_landing() inside the callback takes it without a copy
  // (over 64 KiB; see there).
  // Not ordered with other requests: a CALL and a SET behind it may run in
  // either order (the handler's keys are unknown to the client). `path`: as set()'s.
  [[nodiscard]] Status call(std::uint16_t op, std::span<const std::byte> request, Callback cb,
                            Path* path = nullptr);

  // Sync: run the reactor until the op completes or options.op_timeout passes
  // (then the connection is failed and Status::timeout returned).
  [[nodiscard]] Status set_sync(std::string_view key, std::string_view value, std::uint64_t ttl_ms = 0);
  // found = the key existed (its TTL is now ttl_ms, or none for 0); set only when ok.
  [[nodiscard]] Status expire_sync(std::string_view key, std::uint64_t ttl_ms, bool& found);
  // found = the key exists; ttl_ms its remaining time (-1: no expiry); set only when ok.
  [[nodiscard]] Status ttl_sync(std::string_view key, std::int64_t& ttl_ms, bool& found);
  [[nodiscard]] Status get_sync(std::string_view key, std::string& out, bool& found);  // copies the value
  // Zero-copy: a large value stays in the registered buffer it landed in,
  // now owned by `out`. found = false (and `out` empty) for a missing key.
  [[nodiscard]] Status get_sync(std::string_view key, Value& out, bool& found);
  // found = the key existed (and was removed); set only when ok.
  [[nodiscard]] Status del_sync(std::string_view key, bool& found);
  // CALL, sync: the reply's bytes in `reply` (a large one in the buffer it
  // was READ into, no copy). Set only when ok.
  [[nodiscard]] Status call_sync(std::uint16_t op, std::span<const std::byte> request, Value& reply);
  [[nodiscard]] Status call_sync(std::uint16_t op, std::string_view request, std::string& reply);
  // The server's STATS text ("name value" lines: counters, pinned, connections...).
  [[nodiscard]] Status stats_sync(std::string& out);
  // Drop cached registrations of a buffer given to set() (before freeing it).
  void forget(std::span<const std::byte> bytes) noexcept;
  [[nodiscard]] std::uint64_t server_max_value() const noexcept {
    assert_owner();
    return server_max_value_;
  }
  // GETs go by RDMA READ (read mode asked for and the server has an index).
  [[nodiscard]] bool onesided() const noexcept {
    assert_owner();
    return conn_ && conn_->onesided();
  }

  // Runs the reactor until nothing is pending or `timeout` passes; true if drained.
  bool wait_idle(std::chrono::milliseconds timeout);

  // Inside a GET callback whose value is large (over 64 KiB,
  // ClientConn::kCopyOutMax): takes the registered buffer the value landed
  // in (no copy; the server's access to it ends). Null for a smaller value
  // (copy it out of the callback's view; the buffer serves the next GET), or
  // outside such a callback.
  [[nodiscard]] std::unique_ptr<LandingBuffer> adopt_landing() noexcept {
    assert_owner();
    return conn_ ? conn_->adopt_landing() : nullptr;
  }
  // The account a copy of a value this connection delivered passes to
  // proto::copy_bytes / copy_to_string, so it counts in bytes_copied (null:
  // no connection, nothing counted).
  [[nodiscard]] std::uint64_t* copy_account() noexcept { return conn_ ? conn_->copy_account() : nullptr; }
  // For callers that track async ops themselves (the C API's sync calls):
  // flush, then run the reactor until done() or options.op_timeout (then the
  // connection is failed, so every pending op completes, and Status::timeout
  // is returned). Status::invalid_use from a reactor callback.
  [[nodiscard]] Status await(const std::function<bool()>& done, std::string_view what);

  // Disconnect, wait for DISCONNECTED (bounded), drain flushed completions,
  // release the verbs resources. Pending requests complete with Status::closed.
  // Idempotent; never throws. From a reactor callback it only disconnects
  // (the loop cannot be run there); a later close() or ~Client outside
  // callbacks waits for DISCONNECTED and releases. Destroying a Client inside
  // a callback releases its QP without that wait (logged): ShardSet parks
  // the Clients it retires there until it runs outside callbacks.
  void close() noexcept;

  [[nodiscard]] ConnState state() const noexcept;
  // Requests submitted and not completed yet (queued or on the wire).
  [[nodiscard]] std::size_t pending() const noexcept {
    assert_owner();
    return conn_ ? conn_->pending() : 0;
  }
  [[nodiscard]] const std::string& failure() const noexcept;  // why the connection failed
  [[nodiscard]] ClientCounters counters() const noexcept;  // live, or as of close()
  [[nodiscard]] std::uint32_t server_credits() const noexcept {
    assert_owner();
    return server_credits_;
  }
  [[nodiscard]] std::uint32_t server_recv_size() const noexcept {
    assert_owner();
    return server_recv_size_;
  }
  [[nodiscard]] const std::string& peer() const noexcept {
    assert_owner();
    return peer_;
  }

 private:
  Client(reactor::Reactor& reactor, const ClientOptions& options);

  // Debug builds: the caller is the reactor's thread (its owner). Nothing in
  // release builds, not even the call.
  void assert_owner() const noexcept {
#ifndef NDEBUG
    reactor_->assert_owner_thread();
#endif
  }

  void do_connect(const std::string& host, std::uint16_t port);
  verbs::CmEvent wait_cm_event(std::chrono::milliseconds timeout, const char* step);
  void on_cm_readable() noexcept;
  void handle_cm_event(const verbs::CmEvent& ev) noexcept;
  void on_cq_readable() noexcept;  // take the event, poll
  bool on_cq_poll() noexcept;      // while unarmed: poll; true if completions were handled
  bool on_cq_arm() noexcept;       // before the loop sleeps: arm, poll; true if completions were handled
  int poll_cq() noexcept;          // up to kPollBatch completions into ClientConn, or a negative errno
  // Completions handled (n >= 0) or a CQ error (negative errno): the flush or the failure.
  bool after_cq(int n, const char* what) noexcept;
  void schedule_flush(bool rendezvous = false);
  // The request watchdog (ClientOptions::op_timeout): armed when a request is
  // submitted and none is pending, gone again when nothing is in flight.
  void arm_watchdog() noexcept;
  void on_watchdog() noexcept;
  [[nodiscard]] std::chrono::milliseconds watchdog_period() const noexcept;  // a quarter of op_timeout, <= 1 s
  [[nodiscard]] std::uint64_t progress() const noexcept;  // replies and completions so far
  bool on_flush_poll() noexcept;
  void do_flush() noexcept;
  Status await_reply(const std::optional<Status>& status, std::string_view what);
  Status wait_for(const std::function<bool()>& done, std::string_view what);  // flush, run until done() or the op timeout
  // Both get_sync forms: `take` runs inside the reply callback with the value
  // (only when the GET succeeded) and fills the caller's output.
  Status get_sync_with(std::string_view key, bool& found, std::function<void(std::span<const std::byte>)> take);
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);
  void teardown() noexcept;

  static constexpr int kPollBatch = 64;

  reactor::Reactor* reactor_;
  ClientOptions options_;
  std::string peer_;
  std::uint32_t server_credits_ = 0;
  std::uint32_t server_recv_size_ = 0;
  std::uint64_t server_max_value_ = 0;
  bool flush_scheduled_ = false;
  bool in_cq_pass_ = false;     // completions are being handled: submits wait for the pass's flush
  // Feeds one completion to ClientConn (noexcept, as CompletionQueue requires).
  struct Feed {
    Client* self;
    void operator()(const verbs::Completion& c) const noexcept { self->conn_->on_completion(c); }
  };
  Feed feed_{this};
  std::string cm_error_;        // a CM event channel failure, for the connect path
  std::deque<verbs::CmEvent> cm_events_;  // connect path: events not yet consumed
  ClientCounters counters_;     // copy kept after close()
  std::string failure_;         // copy kept after close()
  ConnState final_state_ = ConnState::connecting;

  // Destroyed in reverse: registrations first, then the protocol state, then
  // the verbs resources (QP before buffers, cm_id last), then the channel.
  verbs::EventChannel events_;
  std::unique_ptr<Endpoint> ep_;
  std::unique_ptr<PdRegistrar> registrar_;  // outlives conn_ (its cache and landing buffers)
  std::unique_ptr<ClientConn> conn_;
  reactor::Registration cm_watch_;
  reactor::Registration cq_watch_;  // the CQ's first completion after it was armed
  reactor::Poller cq_poller_;       // polls while unarmed; arms before the loop sleeps
  reactor::Poller flush_poller_;    // end-of-turn flush (schedule_flush)
  reactor::Timer watchdog_;         // while requests are in flight (arm_watchdog)
  std::uint64_t watch_progress_ = 0;                 // progress() at the last look
  reactor::Reactor::Clock::time_point watch_since_;  // when it last moved
};

// to_errno(Status), the C API's code for a Status: kv/client/errors.hpp.

}  // namespace rkv::kv::client
