#pragma once
// Server: the kvd network side. Owns the rdma_cm event channel (watched by
// the reactor), the listening cm_id, one ProtectionDomain shared by every
// connection, and the connection table. Each connection is a kv::conn::Endpoint
// (cm_id, CQ + completion channel, QP, registered buffers) driven by a
// kv::server::ServerConn. Completions are found by spin, then block
// (reactor.hpp, verbs/cq.hpp): a CQ's first completion after it was armed
// raises an event (its channel fd is watched); the connection then joins the
// poll list, which one reactor poller polls on every loop turn while the loop
// spins (ServerOptions::poll: how long it spins after the last work), and
// right before the loop sleeps every listed CQ is armed again and leaves the
// list. Each pass over a connection is one poll followed by one
// ServerConn::flush(), so the replies of one batch share SENDs.
//
// The connection table is a reactor::SlotTable bounded by max_clients:
// cm_id tokens, wr_id generations, durability tokens and the reactor
// callbacks carry its SlotKey (slot + generation), never pointers, and an
// event for a slot whose generation moved on is dropped.
//
// A connection's state is ServerConn's one state machine (connecting,
// established, draining, flushing, closed); the Server keeps no flags of its
// own. Every Verdict it gets back is acted on (act()): `disconnect` starts
// the teardown of verbs/qp.hpp: cm_id.disconnect() (which also answers a
// peer's DREQ), wait for DISCONNECTED, then cm_done(): qp.to_error(), drain
// the flushed completions, destroy once drained(). A deadline
// (disconnect_timeout + drain_timeout) forces the destroy if the CM or the
// flush never comes back. A connection accepted but not established within
// connect_timeout (the peer never sent the RTU, nor any request: a flood of
// connects that never finish) is torn down the same way and counted
// (connect_timeouts), so half-open peers cannot hold the table's slots and
// their registered buffers longer than that. A connection with RDMA
// transfers in flight of which none finished for transfer_timeout is
// dropped too (transfer_timeouts): a peer whose QP vanished without a
// disconnect never answers our READ or WRITE, and the transport's retries
// need not end (on rxe, with the retry_count 7 the client asks for, a READ
// of a destroyed QP had no completion after 3 minutes), which would pin the
// transfer's block and the slot for good.
// One reactor timer checks every connection's progress mark each quarter
// of transfer_timeout.
//
// User-defined operations: handle(op, fn) registers a Handler (handler.hpp)
// in the one Handlers table every ServerConn runs CALLs from.
//
// Durability (optional): every ServerConn records its SETs with it; its
// deferred acknowledgements come back through on_durable(token, wait, status),
// routed by the connection's slot + generation (dropped if it has gone). Large
// values already in the Store when the arena is created (recovered from disk
// as plain strings) are moved into the arena then (migrate_large_values), so
// rendezvous GETs can serve them: at construction when the bound address has
// a device, else at the first connect request.
//
// Access control (ServerOptions::auth_token): a connect request without the
// token's digest, or with a wrong one, is rejected (constant-time compare,
// logged with the peer's address, counted in auth_failures) before a slot,
// a QP or any registered memory is made for it; the reject carries only a
// proto::RejectReason, so the index's rkey (in the accept) never reaches it.
//
// Thread: everything runs on the reactor's thread; the public calls assert it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/server/arena.hpp"
#include "proto/auth.hpp"
#include "kv/server/handler.hpp"
#include "kv/store/durability.hpp"
#include "kv/conn/endpoint.hpp"
#include "kv/server/index_region.hpp"
#include "kv/server/metrics_endpoint.hpp"
#include "kv/conn/registrar.hpp"
#include "kv/server/server_conn.hpp"
#include "kv/store/stats.hpp"
#include "kv/store/store.hpp"
#include "reactor/reactor.hpp"
#include "reactor/slot_table.hpp"
#include "verbs/cm_id.hpp"
#include "verbs/device.hpp"
#include "verbs/event_channel.hpp"
#include "verbs/pd.hpp"

namespace rkv::kv::server {

using store::Durability;
using conn::Endpoint;
using conn::PdRegistrar;
using store::Store;


struct ServerOptions {
  std::string bind_address = "0.0.0.0";  // numeric IPv4/IPv6
  std::uint16_t port = 0;                 // 0: the kernel picks one (see Server::port())
  // Elastic credits (docs/protocol.md "Flow control"): a client starts with
  // initial_credits receive buffers and grows to `credits` while it spends
  // them all; the buffers come from a pool every connection shares.
  std::uint16_t credits = 16;             // receive buffers (credits) a client may hold at most
  std::uint16_t initial_credits = 2;      // ... and at the start (clamped to credits)
  std::uint32_t buf_size = 8192;          // each receive and send buffer (multiple of 64)
  std::uint32_t max_clients = 1024;
  std::uint32_t max_value = static_cast<std::uint32_t>(proto::kDefaultMaxValue);
  std::uint32_t max_send_buffers = 64;    // per connection, capped by the client's credits
  std::uint32_t max_transfers = 64;       // RDMA READ/WRITEs in flight per connection, capped by its credits
  // Grants a client that asks for them (ConnectParams kFeatureGrants) may hold at
  // once, capped by its credits (docs/protocol.md "SET by grant"); 0: kvd
  // grants none (kvd --max-grants). Every connection's unwritten grants
  // together hold at most 1/kGrantShare of the memory limit (Server::grant_budget_).
  std::uint32_t max_grants = 16;
  static constexpr std::uint64_t kGrantShare = 8;
  ArenaConfig arena{};                    // registered memory for large values
  // One-sided GET index (docs/protocol.md): home buckets, a power of two; 0
  // disables it (clients in read mode then GET by message).
  std::uint32_t index_buckets = 1u << 17;
  ArenaConfig small_arena{64, std::size_t{4} << 20, std::size_t{1} << 30};  // small values, index on
  int backlog = 128;
  // Spin budget of the server's CQ poller (reactor.hpp, "Spin, then block"):
  // how long the loop keeps polling after the last work before it arms the
  // CQs and sleeps. 0: pure completion events; reactor::kSpinForever: busy
  // polling (never sleeps; a core at 100 % even when idle).
  std::chrono::microseconds poll{reactor::kDefaultSpin};
  // Replies per SEND before it is posted early, mid-batch (ServerConnConfig::reply_batch); 0: one SEND per pass.
  std::uint32_t reply_batch = 8;
  // Access control (docs/protocol.md, "Authentication"): non-empty = a
  // connect request must carry proto::auth_digest(auth_token), else it is
  // rejected before any verbs resource is made for it.
  std::string auth_token;
  // Accept -> ESTABLISHED (or a first request): longer and the connection is
  // dropped (connect_timeouts). The kernel's CM gives up on a missing RTU only
  // after its REP retries, about a minute.
  std::chrono::milliseconds connect_timeout{10000};
  // RDMA transfers in flight and none finished for this long: the peer is
  // gone, the connection is dropped (transfer_timeouts).
  std::chrono::milliseconds transfer_timeout{30000};
  std::chrono::milliseconds disconnect_timeout{3000};  // wait for DISCONNECTED
  std::chrono::milliseconds drain_timeout{2000};       // then for the flushed WRs
  // kvd --metrics: the HTTP endpoint for /metrics and /health (metrics_endpoint.hpp); none if unset.
  std::optional<MetricsEndpoint::Options> metrics;
};

// Snapshot for Server::stats().
struct ServerStats {
  ServerCounters counters;
  std::size_t keys = 0;
  std::size_t bytes = 0;
};

class Server {
 public:
  // Binds and listens; throws verbs::Error / std::invalid_argument on setup failure.
  Server(reactor::Reactor& reactor, Store& store, ServerOptions options, Durability* durability = nullptr);
  // Destroys every connection at once (no waiting): prefer shutdown() first.
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  Server(Server&&) = delete;
  Server& operator=(Server&&) = delete;

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  [[nodiscard]] const ServerOptions& options() const noexcept { return options_; }
  [[nodiscard]] ServerStats stats() const noexcept;
  // The counter table's values now: what is counted as it happens, and the
  // "now:" gauges (connections, conn_bytes, transfers, pinned,
  // durable_waits) computed from the live connections when read.
  [[nodiscard]] ServerCounters counters() const noexcept;
  [[nodiscard]] std::size_t connections() const noexcept { return conns_.live(); }
  // Every counter (counters.hpp) and gauge (store, arena, index, durability):
  // the one list the STATS reply, stats_text() and stats_json() print.
  [[nodiscard]] store::StatRows stats_rows() const;
  [[nodiscard]] std::string stats_text() const;  // name=value ... (SIGUSR1)
  [[nodiscard]] std::string stats_json() const;  // {"name": value, ...}
  // The one-sided GET index, or null (disabled, or no device seen yet).
  [[nodiscard]] const IndexRegion* index() const noexcept { return index_.get(); }
  // The metrics endpoint's port (options().metrics), 0 without one.
  [[nodiscard]] std::uint16_t metrics_port() const noexcept { return metrics_ ? metrics_->port() : 0; }
  // What /health answers: true while kvd accepts connections (its listener
  // is up and it is not shutting down; the reactor answering is the rest)
  // and its RDMA device is usable (device_state(): its port is up, it has
  // not failed).
  [[nodiscard]] bool healthy() const noexcept {
    return !shutting_down_ && listener_.has_value() && device_ == DeviceState::usable;
  }
  // The device's state as its asynchronous events tell it (on_device_readable).
  enum class DeviceState : std::uint8_t {
    usable,     // no event said otherwise (also before the device is known)
    port_down,  // IBV_EVENT_PORT_ERR, until IBV_EVENT_PORT_ACTIVE
    failed,     // IBV_EVENT_DEVICE_FATAL: for good (restart kvd)
  };
  [[nodiscard]] DeviceState device_state() const noexcept { return device_; }

  // Stops accepting (the listener is destroyed), disconnects every client
  // and calls on_done once the last connection is torn down (at once if
  // none). on_done runs on the reactor thread and must not destroy the Server.
  void shutdown(std::function<void()> on_done);
  // Called (on the reactor thread) when a connection that brought
  // replication records is lost other than by shutdown(), with the shard of
  // its last record: kvd probes that shard's primary, which may have died.
  void set_on_record_peer_lost(std::function<void(std::uint32_t shard)> fn) { on_record_peer_lost_ = std::move(fn); }
  // Rows of a part the Server does not own (kvd's cluster membership),
  // appended last to every stats_rows() (STATS, SIGUSR1, /metrics) while
  // set; on the reactor thread. Empty: none.
  void set_extra_stats(std::function<void(store::StatRows&)> fn) { extra_stats_ = std::move(fn); }
  [[nodiscard]] bool shutting_down() const noexcept { return shutting_down_; }

  // Registers (or replaces) the handler of CALLs of user opcode `op`
  // (handler.hpp; proto::kFirstCallOp and up: 0x0100..0x0FFF are kvd's own
  // operations, 0x1000 and up are free for the embedding program). It runs
  // on this reactor's thread and must not block. Throws
  // std::invalid_argument for a reserved opcode or an empty handler.
  void handle(std::uint16_t op, Handler fn);
  // Which keys the connections answer for (shard_gate.hpp): open unless a
  // cluster member's kvd closes it and keeps it up to date from etcd.
  [[nodiscard]] ShardGate& gate() noexcept { return gate_; }
  // A cluster member's part in each shard of a new map (ShardGate::serve:
  // primary, backup or none), after which its keys of every shard it no
  // longer holds (as primary or backup) are dropped: before the first map,
  // every shard counts as one it held (recovered values). They could only
  // go stale there: other members hold the shard now, or will, and write it
  // (docs/cluster.md "Fencing"). The drop is a sweep of the store,
  // kDropSlots slots of its map per reactor turn; a shard held again before its
  // sweep ended is swept to the end first, so its old values are never
  // served. A shard it starts to back having had no part in it (or before
  // the first map) is emptied at once, before it takes a record: the
  // primary's catch-up brings what is current. Each dropped key is a
  // tombstone in the log (as an eviction is), and counts as dropped_keys.
  // An empty `parts`: no map.
  void serve_shards(std::vector<proto::ShardPart> parts);
  // True while keys of lost shards are still being dropped.
  [[nodiscard]] bool dropping() const noexcept { return !dropping_.empty(); }

  // The Durability's acknowledgement of the record made under `wait` on
  // connection `token`: ok, io_error (the log failed) or moved (replication:
  // the shard moved before every backup had it).
  void on_durable(std::uint64_t token, std::uint32_t wait, proto::Status status) noexcept;

 private:
  // Members in destruction order (last first): the watch and the deadline go
  // first, then the Endpoint (the QP), then the ServerConn (the memory its
  // transfers targeted).
  struct Conn {
    std::string peer;
    std::unique_ptr<ServerConn> sc;
    std::unique_ptr<Endpoint> ep;
    reactor::Registration cq_watch;  // destroyed before ep (closes the fd)
    reactor::Timer deadline;  // the handshake's (connect_timeout), then teardown's
    bool polled = false;  // on the poll list: its CQ is unarmed
    std::uint64_t transfer_mark = 0;  // sc->transfers_finished() at the last check
    unsigned stalled_checks = 0;      // checks in a row with transfers in flight and no progress
  };
  using Key = reactor::SlotKey;

  // Index 0xFFFFFFFF is never handed out by a SlotTable: no connection's token.
  static constexpr std::uint64_t kListenerToken = ~std::uint64_t{0};
  static constexpr int kPollBatch = 64;  // completions per connection per poll pass
  static constexpr std::uint32_t kBufferChunk = 64;  // message buffers per registration of the shared pools
  static constexpr unsigned kTransferChecks = 4;  // checks per transfer_timeout
  // Active expiry (docs/protocol.md "Time to live"): how often expired keys
  // are withdrawn (one-sided readers see an expired key for at most about
  // this long), and how many one reactor turn removes.
  static constexpr std::chrono::milliseconds kExpiryPeriod{50};
  static constexpr std::size_t kExpireBatch = 256;
  static constexpr std::size_t kDropSlots = 8192;  // map slots serve_shards' sweep visits per reactor turn
  static_assert(kExpiryPeriod.count() * 2 <= static_cast<std::int64_t>(proto::kOneSidedExpiryLagMs),
                "the expiry timer must run well within the lag one-sided readers are promised");

  // What a service pass does with the CQ before the flush.
  enum class CqPass : std::uint8_t {
    poll,  // poll up to kPollBatch (the CQ stays as it is)
    arm,   // arm it, then poll until empty (the loop is about to sleep)
  };

  void on_cm_readable() noexcept;
  void on_cm_event(verbs::CmEvent& ev);
  void on_connect_request(verbs::CmEvent& ev);
  void on_conn_event(Key key, const verbs::CmEvent& ev);
  // connect_timeout passed since the accept: drop the connection if still connecting.
  void on_connect_timeout(Key key) noexcept;
  // Every transfer_timeout / kTransferChecks: drops connections whose transfers stalled.
  void check_transfers() noexcept;
  void arm_transfer_check();
  // Every kExpiryPeriod while some key has a TTL: removes keys whose time to
  // live ran out (Store::expire_due), kExpireBatch per reactor turn; the
  // timer goes when no key has a TTL any more.
  void expire_keys() noexcept;
  // Starts the expiry timer if a key has a TTL and it is not running (after
  // each CQ pass that did work, and at start for recovered keys).
  void arm_expiry() noexcept;
  // The CQ's channel fd is readable: take the event, join the poll list, poll.
  void on_cq_event(Key key) noexcept;
  // One service pass over a connection's CQ and what follows from it.
  // Returns completions handled.
  std::size_t on_cq(Key key, CqPass pass) noexcept;
  // The CQ pass, then (if anything completed) one flush. The verdicts of
  // every call in one.
  Verdict service(Conn& c, CqPass pass, std::size_t& handled) noexcept;
  // The poller: a poll pass over the poll list; true if any work was done.
  bool poll_listed() noexcept;
  // Before the loop sleeps: an arm pass over the poll list, which empties it.
  bool arm_listed() noexcept;
  // Acts on a ServerConn's verdict: `disconnect` starts the teardown.
  void act(Key key, Verdict v) noexcept;
  // The owner's own reason to close (peer left, shutdown).
  void begin_close(Key key, CloseCause cause, std::string_view reason) noexcept;
  // The CM part is over: QP to error, drain what is flushed, destroy if drained.
  void cm_finished(Key key) noexcept;
  void try_finish(Key key, bool force) noexcept;
  void destroy(Key key) noexcept;
  void make_pd(const verbs::CmId& id);
  [[nodiscard]] std::uint16_t initial_credits() const noexcept {
    return std::max<std::uint16_t>(1, std::min(options_.initial_credits, options_.credits));
  }
  // serve_shards' sweep: up to kDropSlots slots, then again at the next
  // turn until it is done (or `to_end`: all at once).
  void drop_keys(bool to_end) noexcept;
  void on_device_readable(std::uint32_t ready) noexcept;
  void migrate_large_values() noexcept;

  reactor::Reactor* reactor_;
  Store* store_;
  ServerOptions options_;
  ServerCounters counters_;
  GrantBudget grant_budget_;  // every connection's unwritten grants (limit: ServerOptions::kGrantShare)
  LatencyHistograms latency_;  // every connection's request times (latency.hpp)
  ShardGate gate_;             // which keys every connection answers for (shard_gate.hpp)
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();  // uptime_seconds
  verbs::EventChannel events_;
  std::optional<verbs::CmId> listener_;
  std::shared_ptr<const verbs::ProtectionDomain> pd_;
  std::optional<verbs::DeviceEvents> device_events_;  // of pd_'s device (make_pd)
  DeviceState device_ = DeviceState::usable;
  std::unique_ptr<PdRegistrar> registrar_;  // with pd_; before arena_ (used by it)
  // The message buffers every connection takes its receives and SENDs from
  // (make_pd), registered through a registrar of their own (the
  // `registrations` row counts the rendezvous path's). Before conns_: each
  // ServerConn gives its buffers back when it goes.
  std::unique_ptr<PdRegistrar> buffer_registrar_;
  std::optional<conn::BufferPool> recv_buffers_;  // local_write: RECV targets
  std::optional<conn::BufferPool> send_buffers_;  // no access: SEND sources
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Arena> small_arena_;    // small values in blocks (index on)
  std::unique_ptr<IndexRegion> index_;    // remote_read only; the Store writes it
  std::size_t index_charged_ = 0;         // its bytes, charged to the Store's MemoryBudget
  std::optional<proto::AuthDigest> auth_;  // what a connect request must carry (options_.auth_token)
  Durability* durability_ = nullptr;
  // While the Server lives, each key the Store evicts (kvd --eviction) or sweeps (serve_shards) is
  // recorded as a tombstone with the Durability, if any, so a restart does
  // not bring it back: hooked in the constructor, unhooked in the destructor.
  class EvictionLog {
   public:
    EvictionLog(Store& store, Durability* durability);
    EvictionLog(const EvictionLog&) = delete;
    EvictionLog& operator=(const EvictionLog&) = delete;
    ~EvictionLog();

   private:
    Store* store_;
  } eviction_log_;
  Handlers handlers_;  // CALL handlers, shared by every ServerConn
  std::uint16_t port_ = 0;
  reactor::SlotTable<Conn> conns_;  // bounded by max_clients
  std::vector<Key> polled_;         // the poll list (Conn::polled); stale keys are skipped
  bool shutting_down_ = false;
  std::function<void()> on_shutdown_done_;
  std::function<void(std::uint32_t)> on_record_peer_lost_;
  std::function<void(store::StatRows&)> extra_stats_;  // set_extra_stats
  reactor::Poller poller_;              // polls the poll list; arms it before the loop sleeps
  reactor::Timer transfer_check_;       // check_transfers()
  reactor::Timer expiry_timer_;         // expire_keys(), every kExpiryPeriod while Store::expiring() > 0
  reactor::Timer expire_more_;          // expire_keys() again at the next turn: more were due
  std::vector<bool> dropping_;          // by shard: its keys are being dropped (serve_shards); empty: none
  Store::SweepCursor drop_cursor_;
  reactor::Timer drop_more_;            // drop_keys() at the next turn
  reactor::Registration events_watch_;  // unwatched before the rest
  reactor::Registration device_watch_;  // device_events_->fd()
  std::unique_ptr<MetricsEndpoint> metrics_;  // declared last: its callbacks read the members above
};

}  // namespace rkv::kv::server
