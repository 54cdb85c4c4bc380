#pragma once
// ServerConn: the server's per-connection protocol state machine (eager
// SET/GET/DEL/STATS, CALLs of user-defined operations (server_call.cpp),
// credits, back-pressure). It posts work only through a Link
// and is fed verbs::Completion values, so the `protocol` suite drives it with
// a FakeLink. It never touches verbs objects or cm_ids.
//
// It holds the connection's one state machine (ConnState below). When a call
// decides the connection must go (malformed request, credit overrun, error
// completion, failed post) that call returns Verdict::disconnect, exactly
// once, and the reason is kept; the owner (Server) acts on it: it disconnects
// the cm_id, and when the CM part is over (cm_done()) moves the QP to error
// and keeps feeding the flushed completions until drained() (verbs/qp.hpp).
// The owner closes for its own reasons (peer left, shutdown) through
// begin_draining(), which answers the same way.
//
// Per received buffer: the whole buffer is validated first (one DecodeError
// anywhere -> disconnect, nothing of it is executed), then each request is
// executed and its reply appended to the MessageChannel (replies coalesce
// until flush()). The buffer is re-posted right after its last request is
// executed and before that request's reply is appended, so the credit it
// frees rides on that very reply. If no send buffer is free for a reply the
// buffer is held (with its decode offset) and later buffers queue behind it;
// a send completion resumes processing. Nothing is dropped, nothing blocks.
//
// Credit accounting: granted = initial credits + credits carried by replies
// that were posted (counted at flush time, i.e. when the client could first
// see them); a SEND arriving when received > granted is an overrun.
//
// Elastic credits (docs/protocol.md "Flow control"): the receive buffers come
// from a pool all connections share, and a connection holds `allowance_` of
// them (posted + held), each backing one credit. It starts with
// config.credits. A SEND that spends the client's last credit doubles the
// allowance (up to max_credits): the new buffers are posted first, and their
// credits ride on the next reply. When, over a window of `allowance_` SENDs,
// the client never had fewer than half its credits unspent, half of that
// low-water mark goes back: that many executed buffers return to the pool
// instead of being re-posted (a credit fewer each, never below
// config.credits). Every credit the
// client holds is a buffer posted on its QP, so RNR still cannot happen. The
// send buffers come from a shared pool too, at most max_send_buffers each.
//
// Pending requests: a request the connection still holds something for (an
// RDMA READ or WRITE in flight, records not durable yet, a reply waiting for
// a send buffer) is one entry of pending_ (a SlotTable: its key is the WR's
// slot and the records' wait id), holding everything its reply needs; the
// entry closes when its reply is appended (or its WRITE completes).
//
// Durability (optional, kv/store/durability.hpp): a SET or DEL is applied to the
// Store at once, then recorded (a DEL as a tombstone) under its entry's key;
// when the Durability answers `later` its reply waits in the entry (the
// buffer's credit rides on the next reply that goes out) until the owner
// calls on_durable(wait, status), which sends SET_REPLY / DEL_REPLY (FOUND as
// the erase found it) ok, or the failure's status (io_error, moved). A connection that goes away before that is
// simply gone: the owner routes on_durable by slot + generation and drops it.
//
// Grants (server_grant.cpp; docs/protocol.md "SET by grant"), for a client
// that asked for them (config.max_grants > 0): every ok reply to a large SET
// carries a grant while the connection holds fewer than max_grants: a
// grantable arena block (Arena::allocate_grantable) of the class that SET
// needed, opened to this QP's peer by a window (Link::bind_wr, queued with
// the pass's transfers: posted in the same chain as, and ahead of, the reply
// that names it). The client's WRITE WITH IMMEDIATE into
// it arrives as a receive completion that names the grant by its id
// (window index + 1) and counts as a SEND for credits; its entry
// (Wait::invalidate) holds the block while the window is invalidated (a
// LOCAL_INV queued the same way, so a pass's are posted in one call); once
// that completes no write can reach the block, and the SET in it
// (proto::read_granted_set) is checked and installed as a READ's value
// is. A grant lives until it is used or the connection goes; its block
// goes back to the arena with the ServerConn, after the owner destroyed
// the QP and its windows.
//
// Thread: the reactor thread that owns the connection; not thread-safe.

#include <chrono>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/server/arena.hpp"
#include "kv/server/counters.hpp"
#include "kv/server/handler.hpp"
#include "kv/server/latency.hpp"
#include "kv/server/shard_gate.hpp"
#include "kv/conn/buffer_pool.hpp"
#include "kv/conn/fifo_vector.hpp"
#include "kv/store/durability.hpp"
#include "kv/conn/link.hpp"
#include "kv/conn/msg_channel.hpp"
#include "kv/store/store.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"
#include "reactor/slot_table.hpp"
#include "verbs/completion.hpp"

namespace rkv::kv::server {

using conn::BufferPool;
using store::Durability;
using store::LargeRef;
using conn::Link;
using conn::MessageChannel;
using store::Store;

// connecting -> established -> draining -> flushing -> closed; any state
// before flushing may go straight to draining or flushing.
enum class ConnState : std::uint8_t {
  connecting,   // receives posted, accept sent, ESTABLISHED not seen yet
  established,  // serving requests
  draining,     // close decided: nothing new runs; the owner disconnects and waits for DISCONNECTED
  flushing,     // CM part over (cm_done()): the QP is in error, posted WRs come back flushed
  closed,       // the owner destroyed the verbs resources
};

[[nodiscard]] constexpr std::string_view to_string(ConnState s) noexcept {
  switch (s) {
    case ConnState::connecting: return "connecting";
    case ConnState::established: return "established";
    case ConnState::draining: return "draining";
    case ConnState::flushing: return "flushing";
    case ConnState::closed: return "closed";
  }
  return "invalid";
}

// Why a connection is being closed.
enum class CloseCause : std::uint8_t {
  none,              // still open
  protocol_error,    // DecodeError or a reply opcode from the client
  credit_overrun,    // more SENDs than credits granted
  completion_error,  // an error (or unexpected flushed) completion
  post_error,        // post_recv/post_send failed
  internal,          // a bug: encoder refused a reply, ...
  peer_left,         // owner: DISCONNECTED / connect error from the peer
  handshake_timeout, // owner: accepted, but the handshake did not finish in time
  transfer_timeout,  // owner: RDMA transfers in flight, none finished for too long (peer gone)
  shutdown,          // owner: server shutdown
};

[[nodiscard]] constexpr std::string_view to_string(CloseCause c) noexcept {
  switch (c) {
    case CloseCause::none: return "none";
    case CloseCause::protocol_error: return "protocol_error";
    case CloseCause::credit_overrun: return "credit_overrun";
    case CloseCause::completion_error: return "completion_error";
    case CloseCause::post_error: return "post_error";
    case CloseCause::internal: return "internal";
    case CloseCause::peer_left: return "peer_left";
    case CloseCause::handshake_timeout: return "handshake_timeout";
    case CloseCause::transfer_timeout: return "transfer_timeout";
    case CloseCause::shutdown: return "shutdown";
  }
  return "invalid";
}

// What the owner must do after a call.
enum class Verdict : std::uint8_t {
  keep,        // nothing to do
  disconnect,  // this call decided to close (returned once per connection); see disconnect_reason()
};

// Both verdicts of a batch (e.g. every completion of one CQ drain) in one.
[[nodiscard]] constexpr Verdict operator|(Verdict a, Verdict b) noexcept {
  return a == Verdict::disconnect || b == Verdict::disconnect ? Verdict::disconnect : Verdict::keep;
}

[[nodiscard]] constexpr std::string_view to_string(Verdict v) noexcept {
  switch (v) {
    case Verdict::keep: return "keep";
    case Verdict::disconnect: return "disconnect";
  }
  return "invalid";
}

// Bytes of landing space held by grants not yet written, over every
// connection (docs/protocol.md "SET by grant": idle grants must not starve
// other clients' SETs under the memory limit).
struct GrantBudget {
  std::uint64_t held = 0;
  std::uint64_t limit = std::numeric_limits<std::uint64_t>::max();
};

struct ServerConnConfig {
  std::uint16_t credits = 16;       // receive buffers posted = the client's initial credits
  std::uint16_t max_credits = 0;    // the most it may grow to (0: credits; no growth)
  std::uint32_t max_send_buffers = std::numeric_limits<std::uint32_t>::max();  // of the send pool, held at once
  std::uint32_t generation = 1;     // WrId generation of this connection
  std::size_t peer_recv_size = 0;   // client's receive buffer size (bounds each SEND)
  proto::Limits limits{};           // decoder limits
  std::uint64_t max_value = proto::kDefaultMaxValue;  // larger RDV SETs: too_large, before allocating
  std::uint32_t max_transfers = 16;  // RDMA READ/WRITEs in flight (the QP's rdma depth)
  std::uint32_t max_pins = 16;       // pulled GETs awaiting RELEASE (client's max requests in flight)
  std::string label;                // for logs, e.g. the peer address
  // The rows of the STATS reply (Server::stats_rows()). Required: the constructor refuses an empty one.
  std::function<store::StatRows()> stats;
  std::uint64_t token = 0;          // the owner's slot + generation: passed to Durability::record_set
  // The handlers CALLs run (handler.hpp; owned by the Server, outlives this).
  // Null: every CALL is answered no_handler.
  const Handlers* handlers = nullptr;
  // Post a SEND as soon as it holds this many replies, instead of at the end
  // of the pass (0: at the end only), while the owner says no other
  // connection waits (set_crowded). The client starts on the first replies
  // while the rest are executed: its work and ours overlap.
  std::uint32_t reply_batch = 0;
  // Where each request's server time is recorded (latency.hpp; owned by the
  // Server, outlives this). Required: the constructor refuses null.
  LatencyHistograms* latency = nullptr;
  // Which keys this server answers for (shard_gate.hpp; owned by the Server,
  // outlives this): a key it refuses is answered not_owner. Required.
  const ShardGate* gate = nullptr;
  // Grants the client may hold at once (0: none: it did not ask, or kvd
  // grants none). At most conn::Link::kMaxWindows.
  std::uint32_t max_grants = 0;
  // The landing space every connection's unwritten grants hold (owned by the
  // Server, outlives this): a grant that would take it past its limit is not
  // made. Null: no bound beyond max_grants.
  GrantBudget* grant_budget = nullptr;
};

class ServerConn {
 public:
  // What a write (a value stored, a key removed) came to: its record is
  // durable now (or there is no log), will be later (on_durable), failed; or
  // the value was not kept (over the memory limit: nothing changed).
  enum class Written : std::uint8_t { now, later, log_failed, no_memory };

  // `recv`, `send` (outlive this): the pools its buffers come from (maybe
  // shared; every buffer taken goes back by the destructor at the latest).
  // `arena` (outlives this): registered memory for the rendezvous path and
  // CALLs. `durability` (optional, outlives this): records every SET (see
  // above). Throws std::invalid_argument without config.stats.
  ServerConn(Link& link, BufferPool& recv, BufferPool& send, Store& store, Arena& arena, ServerCounters& counters,
             ServerConnConfig config, Durability* durability = nullptr);

  ServerConn(const ServerConn&) = delete;
  ServerConn& operator=(const ServerConn&) = delete;
  ServerConn(ServerConn&&) = delete;
  ServerConn& operator=(ServerConn&&) = delete;
  ~ServerConn();  // releases transfers, pins and buffers (the owner destroyed the QP first)

  // Posts every receive buffer; call before accept(). Disconnect if a post fails.
  [[nodiscard]] Verdict start() noexcept;
  // ESTABLISHED seen (a recv completion before it also implies it).
  void on_established() noexcept;
  // Every completion of this connection's CQ, successful or not.
  [[nodiscard]] Verdict on_completion(const verbs::Completion& c) noexcept;
  // The record made under `wait` (a SET's, a DEL's, or one of a CALL's, answered
  // DurableAck::later) is durable (`status` ok) or failed (io_error: the log
  // failed; moved: its shard moved before every backup had it): once the
  // request has no record left waiting its reply goes out (with the next
  // flush), with the first failure's status. Unknown or late calls are
  // ignored (counted stale).
  [[nodiscard]] Verdict on_durable(std::uint32_t wait, proto::Status status) noexcept;
  // Posts the replies appended since the last flush; once per CQ drain.
  [[nodiscard]] Verdict flush() noexcept;
  // Whether other connections have work waiting (the owner says so before
  // each pass): then replies go out once, at the end of the pass, not every
  // reply_batch. Posting early overlaps one client's work with ours; with
  // several clients it only wakes each one more often, and a woken client
  // takes the CPU the others' requests wait for.
  void set_crowded(bool crowded) noexcept { crowded_ = crowded; }

  // The owner closes the connection for its own reason (peer left, shutdown,
  // CQ failure): disconnect if this call decided it, keep if it was already
  // decided (then the owner has acted already).
  [[nodiscard]] Verdict begin_draining(CloseCause cause, std::string_view reason) noexcept;
  // The CM part is over (DISCONNECTED seen, or none will come): -> flushing.
  // False if it was already (the owner moved the QP to error then).
  [[nodiscard]] bool cm_done() noexcept;
  // Flushing and every posted WR has come back (teardown step 5 done).
  [[nodiscard]] bool drained() const noexcept;
  // The owner destroyed the verbs resources.
  void close() noexcept { state_ = ConnState::closed; }

  [[nodiscard]] ConnState state() const noexcept { return state_; }
  [[nodiscard]] CloseCause close_cause() const noexcept { return cause_; }
  // The shard of the last replication record admitted on this connection
  // (it is a primary's shipping connection), if any: when it is lost, kvd
  // probes that shard's primary (docs/cluster.md "Membership", Dying).
  [[nodiscard]] std::optional<std::uint32_t> record_shard() const noexcept { return record_shard_; }
  [[nodiscard]] const std::string& disconnect_reason() const noexcept { return reason_; }
  [[nodiscard]] std::uint64_t sends_received() const noexcept { return received_; }
  [[nodiscard]] std::uint64_t credits_granted() const noexcept { return granted_; }
  [[nodiscard]] std::uint32_t credits_owed() const noexcept { return owed_; }
  [[nodiscard]] std::size_t held_buffers() const noexcept { return held_.size(); }
  [[nodiscard]] std::uint32_t recvs_posted() const noexcept { return static_cast<std::uint32_t>(posted_.size()); }
  // Receive buffers held (posted + being executed): the client's credits' backing.
  [[nodiscard]] std::uint32_t allowance() const noexcept { return allowance_; }
  // Buffer bytes held now: receive (allowance) and send.
  [[nodiscard]] std::size_t buffer_bytes() const noexcept;
  [[nodiscard]] std::size_t sends_in_flight() const noexcept { return channel_.sends_in_flight(); }
  [[nodiscard]] std::size_t transfers_in_flight() const noexcept { return transfers_in_flight_; }
  // RDMA transfers that completed (well or not) so far: the owner's progress mark.
  [[nodiscard]] std::uint64_t transfers_finished() const noexcept { return transfers_finished_; }
  [[nodiscard]] std::size_t pulls_pinned() const noexcept { return pulls_.size(); }
  // Large values held now: by transfers in flight and by pulls.
  [[nodiscard]] std::size_t pins() const noexcept { return transfers_in_flight_ + pulls_.size(); }
  [[nodiscard]] std::uint32_t generation() const noexcept { return config_.generation; }
  [[nodiscard]] std::size_t durable_waits() const noexcept { return durable_waits_; }
  // Grants the client holds now (bound, not used yet).
  [[nodiscard]] std::size_t grants_held() const noexcept { return grants_held_; }

  // READs and WRITEs a connection of `max_transfers` may have posted and not
  // seen complete: its send queue's RDMA depth (Server sizes the QP by it).
  [[nodiscard]] static constexpr std::uint32_t transfer_room(std::uint32_t max_transfers) noexcept {
    return max_transfers + static_cast<std::uint32_t>(kWriteSignalInterval) - 1;
  }

 private:
  // A received buffer not fully handled yet.
  using Clock = RequestClock;  // latency.hpp
  static constexpr std::uint32_t kRecycled = ~std::uint32_t{0};
  struct Held {
    std::uint32_t slot;      // kRecycled once its last request ran (the buffer is re-posted or back in the pool)
    std::size_t len;
    std::size_t offset;      // start of the next request to execute
    Clock::time_point received;  // its receive completion was handled (latency.hpp)
    // A SET the client WROTE into grant `grant` (written bytes), waiting
    // behind the buffers received before it (slot kRecycled, len 0).
    std::uint32_t grant = kNoGrant;
    std::uint32_t written = 0;
  };
  static constexpr std::uint32_t kNoGrant = ~std::uint32_t{0};
  enum class Progress : std::uint8_t { finished, paused, failed };
  // What running a request produced (paused: nothing was done, no room yet;
  // pushed: a large GET answered by the WRITE with immediate of entry
  // pushed_, which append_pushed() queues where a reply would be appended).
  enum class Outcome : std::uint8_t { reply, pushed, no_reply, failed, paused };
  // One request the connection still holds something for (eRPC's sslot):
  // what it waits for, and everything its reply needs. Its key in pending_
  // rides as the WrId slot of its READ or WRITE (SlotKey::pack32) and as the
  // wait id of its log records, so a late completion or durability ack of a
  // finished request is stale by generation.
  enum class Wait : std::uint8_t {
    read,   // an RDMA READ of a SET's value / a CALL's request into `pin` is in flight
    write,  // an RDMA WRITE of a GET's value from `pin` into `offer` is in flight (carrying its reply)
    log,    // `records` of its writes are not durable yet; then `reply` goes out
    send,   // `reply` waits for a send buffer (queued_ keeps the order)
    invalidate,  // a SET written into grant `grant`: its window's LOCAL_INV is in flight; `pin` is the block
  };
  struct Pending {
    Wait wait = Wait::read;
    proto::Opcode op = proto::Opcode::set;
    std::uint32_t req_id = 0;
    std::uint16_t call_op = 0;    // CALL: its user opcode
    std::string key;              // SET read: installed under it when the READ completes
    std::uint32_t value_crc = 0;  // SET read: the writer's crc32c of the value (its descriptor)
    store::ExpireAt expire_at = store::kNoExpiry;  // SET read: the key's expiry, fixed when the SET arrived
    std::uint64_t epoch = 0;      // SET read: a replication record's shard epoch (0: a client's SET)
    LargeRef pin;                 // read: the block the READ fills; write: the value the WRITE sends
    proto::RdvDesc offer{};       // write: the client's buffer the value goes to
    std::uint32_t records = 0;    // log: records answered `later`, not durable yet
    proto::Status failed = proto::Status::ok;  // log: the first failure one of them had: the reply's status
    proto::MessageSpec reply;     // log, send: the reply (an eager CALL reply views reply_bytes)
    std::vector<std::byte> reply_bytes;
    Clock::time_point received;   // of the request's SEND (open_entry): its latency starts there
    bool large_request = false;   // a rendezvous SET (its class, latency.hpp)
    std::uint64_t grant_for = 0;  // an ok reply to it carries a grant of this many bytes (0: none)
    std::uint32_t grant = 0;      // invalidate: the grant's window index
    std::uint32_t written = 0;    // invalidate: the bytes the client's WRITE wrote
  };
  using Key = reactor::SlotKey;
  // pending_ keys fit 32 bits (pack32): 16 of index, 16 of generation.
  static constexpr std::uint32_t kMaxPending = 0xFFFF;
  // Replies appended between two posts, at most (more are timed at once).
  static constexpr std::size_t kMaxUnposted = 1024;
  // Keys of one received SEND whose memory is loaded ahead in passes
  // (Store::probe), at most: clients batch up to their depth, 32 by default.
  static constexpr std::size_t kProbes = 64;
  class CallScope;  // one handler run: its ReplyWriter and StoreAccess (server_call.cpp)

  // Internal steps report a decision to close only through fail() (state ->
  // draining); the public calls turn that transition into their Verdict.
  [[nodiscard]] Verdict decided_if(bool was_serving) const noexcept {
    return was_serving && !serving() ? Verdict::disconnect : Verdict::keep;
  }
  void on_recv(const verbs::Completion& c) noexcept;
  void on_send(const verbs::Completion& c) noexcept;
  void process_held() noexcept;
  // Paused for a send buffer: closes the connection if nothing will resume it.
  void no_send_buffer() noexcept;
  Progress process(Held& h) noexcept;
  // THE one switch on a request's opcode: its reply planned (a GET looks
  // its key up), room for it checked (paused, nothing done, if there is
  // none), then its side effects (a SET stores; `reply` may become an error).
  Outcome run(const proto::MessageView& m, proto::MessageSpec& reply) noexcept;
  // Whether the open send buffer has room for `reply` now (turned into
  // too_large first when it could never fit the client's receive buffer;
  // a CALL keeps room for its largest eager reply), behind no queued one.
  bool room_for(const proto::MessageView& m, proto::MessageSpec& reply) noexcept;
  // --- rendezvous (server_rdv.cpp) ---
  Outcome execute_set_rdv(const proto::MessageView& m, proto::MessageSpec& reply) noexcept;
  Outcome execute_get_large(const proto::MessageView& m, const LargeRef& v, proto::MessageSpec& reply) noexcept;
  Outcome execute_release(const proto::MessageView& m) noexcept;
  // Opens the pending entry of a request READ of the bytes at `from` into
  // `block` and queues the READ for the next flush: no_reply, or a no_memory
  // reply, or failed (closing).
  Outcome queue_request_read(Pending p, std::shared_ptr<store::LargeValue> block, const proto::RdvDesc& from,
                             proto::MessageSpec& reply) noexcept;
  // --- CALL (server_call.cpp) ---
  Outcome execute_call(const proto::MessageView& m, proto::MessageSpec& reply) noexcept;
  // Runs the handler of CALL entry `k` (in Wait::log) on `request` and puts
  // its reply in the entry: reply (final now), no_reply (it waits for the
  // handler's records), or failed (closing; the entry is gone).
  Outcome run_call(Key k, std::span<const std::byte> request) noexcept;
  // Room a CALL's reply may need in the open send buffer (the largest eager reply).
  [[nodiscard]] std::size_t call_reply_room() const noexcept;
  // --- writes (server_write.cpp): every value in, every key out ---
  // A copy of `value` kept the way the Store keeps one of its size
  // (Store::put), counted, and recorded with the Durability under `wait`.
  // expire_at: the key's new expiry (store::kKeepExpiry: a CALL handler's
  // write, which keeps it).
  Written store_value(std::string_view key, std::string_view value, store::ExpireAt expire_at,
                      std::uint32_t wait) noexcept;
  // The same for a Store::value_block a READ filled (value_crc: the writer's checksum of it).
  Written store_block(std::string_view key, const LargeRef& block, std::uint32_t value_crc, store::ExpireAt expire_at,
                      std::uint32_t wait) noexcept;
  struct Removal {
    bool found;
    Written written;
  };
  // Erases `key` and records its tombstone under `wait`.
  Removal remove_key(std::string_view key, std::uint32_t wait) noexcept;
  // Sets (or clears: kNoExpiry) the expiry of `key` and records it under
  // `wait`; found false (nothing recorded) when there is no such key.
  Removal expire_key(std::string_view key, store::ExpireAt expire_at, std::uint32_t wait) noexcept;
  // The absolute expiry a request's TTL field asks for (kNoExpiry without
  // one: a SET without it clears the key's TTL, an EXPIRE of 0 persists).
  // m.ttl <= kMaxTtlMs: the decoder checked.
  [[nodiscard]] store::ExpireAt expiry_of(const proto::MessageView& m) const noexcept {
    if (!m.header.has_ttl() || m.ttl == 0) return store::kNoExpiry;
    return store_->now() + static_cast<store::ExpireAt>(m.ttl);
  }
  // TOUCH: each key of the packed list counts as an access.
  void execute_touch(const proto::MessageView& m) noexcept;
  // The entry a request's writes record under (when there is a log): opened
  // before anything changes, so a full table refuses the request whole.
  std::optional<Key> open_log_wait(proto::Opcode op, std::uint32_t req_id) noexcept;
  // What a write's result means for `reply` (the ok one, to `op`): true if
  // it waits for the log (the entry `wait`, in Wait::log, holds it now);
  // false if it goes out now, maybe as an error status.
  bool deferred(Written w, std::optional<Key> wait, proto::Opcode op, proto::MessageSpec& reply) noexcept;
  // Runs an eager SET's or a DEL's write(wait id) inside its log entry
  // (server_conn.cpp); the reply as deferred() decides.
  template <class Write>
  Outcome logged(proto::Opcode op, std::uint32_t id, proto::MessageSpec& reply, Write&& write) noexcept;
  // --- pending entries (server_conn.cpp) ---
  // The entry's reply is final: appended now, or queued behind a full channel; the entry closes once appended.
  void finish(Key k) noexcept;
  // Closes an entry (its pin, and the log waits it still counted, go with it).
  void close_entry(Key k) noexcept;
  [[nodiscard]] bool transfers_full() const noexcept { return transfers_in_flight_ >= config_.max_transfers; }
  // A large GET is pushed (a WRITE) below transfer_room: up to
  // kWriteSignalInterval - 1 of the WRITEs in flight may have landed already,
  // their client answered and asking again, before kvd sees the signaled
  // WRITE after them complete. Such a GET is not pulled for that lag.
  [[nodiscard]] bool pushes_full() const noexcept {
    return transfers_in_flight_ >= transfer_room(config_.max_transfers);
  }
  // Opens the entry of a READ/WRITE about to be queued (nullopt: no memory).
  std::optional<Key> open_transfer(Pending p) noexcept;
  // The entry's READ/WRITE (or grant invalidation) is queued for the next
  // flush (false if it could not be: the entry is closed, fail() decided).
  bool queued_transfer(Key k, bool queued, std::string_view what) noexcept;
  // Closes the entries of the READ/WRITEs (and grant invalidations) queued
  // and never posted (closing).
  void drop_unposted() noexcept;
  // A READ/WRITE completion: it also completes the unsignaled transfers
  // posted before it (transfers_posted_, in post order), each then done by
  // transfer_done as if its own completion had come.
  void on_transfer(const verbs::Completion& c) noexcept;
  void transfer_done(const verbs::Completion& c) noexcept;
  // --- grants (server_grant.cpp) ---
  // The client WROTE into a grant (a receive with immediate `c.imm`; its
  // buffer `slot` is recycled here).
  void on_granted_write(const verbs::Completion& c, std::uint32_t slot) noexcept;
  // Its turn (after the buffers received before it): the SET written into
  // grant `grant` opens its entry and the window's invalidation is queued
  // (posted with the pass's transfers and replies).
  bool start_granted(std::uint32_t grant, std::uint32_t written, Clock::time_point received) noexcept;
  // A window WR completed (an invalidation; a bind only when it failed).
  void on_window(const verbs::Completion& c) noexcept;
  // A window's WR dropped unposted (drop_unposted): an invalidation's SET
  // is closed with it (nothing was stored); a bind needs nothing (its grant
  // goes with the connection).
  void drop_window_op(std::uint32_t slot) noexcept;
  // The invalidation of entry `k` completed: its SET is checked and installed.
  void install_granted(Key k) noexcept;
  // An ok reply to p's large SET gets a grant (p.grant_for bytes), if one can be made.
  void offer_grant(Pending& p) noexcept;
  // Appends a reply to the SEND being filled; `received`/`large_request`:
  // of its request (latency.hpp: timed when the SEND is posted).
  bool append_reply(proto::MessageSpec& reply, proto::Opcode request, Clock::time_point received,
                    bool large_request) noexcept;
  // Queues the WRITE with immediate of GET entry `k` (Outcome::pushed), the
  // reply folded into it: credits and latency as append_reply's.
  bool append_pushed(Key k, Clock::time_point received) noexcept;
  // A reply of class `cls` was appended or queued and carries owed_: its
  // credits count as granted, its latency is timed, once it is posted.
  void replied(OpClass cls, Clock::time_point received) noexcept;
  // pending_.try_insert(p) with p.received set to the request being executed.
  [[nodiscard]] std::optional<Key> open_entry(Pending p) noexcept;
  // Records the appended replies' latencies once their SENDs are posted.
  void record_posted() noexcept;
  // Posts receive buffer `slot` (taken, or just executed) on the QP.
  bool post_receive(std::uint32_t slot) noexcept;
  // Buffer `slot` is executed: re-posted with its credit owed, or (the
  // client left half its credits unspent) given back to the pool.
  bool recycle(std::uint32_t slot) noexcept;
  // A received buffer that will not be executed goes back to the pool.
  void drop(std::uint32_t slot) noexcept;
  // After each SEND received: grow when it spent the client's last credit;
  // plan a shrink after a window of `allowance_` SENDs in which the client
  // always had half its credits unspent.
  void size_credits() noexcept;
  // The client spent its last credit: double the allowance, if it may grow.
  void grow_credits() noexcept;
  [[nodiscard]] std::uint32_t max_credits() const noexcept {
    return std::max<std::uint32_t>(config_.credits, config_.max_credits);
  }
  // Decides to close (once; counted and logged here, where it is decided).
  void fail(CloseCause cause, std::string reason) noexcept;
  // THE close, whoever decided it (fail(), begin_draining()): nothing more
  // is executed or sent; replies not sent yet are dropped with the
  // connection. Transfers in flight keep their entries until their
  // (flushed) completions; pulled values stay pinned until cm_done().
  void close_decided(CloseCause cause, std::string reason) noexcept;
  [[nodiscard]] bool serving() const noexcept {
    return state_ == ConnState::connecting || state_ == ConnState::established;
  }

  Store* store_;
  std::optional<std::uint32_t> record_shard_;  // record_shard()
  ServerCounters* counters_;
  ServerConnConfig config_;
  bool crowded_ = false;  // set_crowded: replies wait for the end of the pass
  BufferPool* recv_;
  MessageChannel channel_;

  ConnState state_ = ConnState::connecting;
  CloseCause cause_ = CloseCause::none;
  std::string reason_;

  // Pushed only by a receive completion (on_recv, on_granted_write), never
  // while process() holds a reference to the front one.
  conn::FifoVector<Held> held_;
  conn::PostedIds posted_;             // receive buffers posted on the QP
  std::uint32_t allowance_ = 0;        // receive buffers held: posted_ + held_
  std::uint32_t window_ = 0;           // SENDs received since the allowance was last sized
  std::uint64_t low_water_ = 0;        // fewest credits the client had unspent in that window
  std::uint32_t shrink_ = 0;           // buffers recycle() gives back instead of re-posting
  std::uint64_t received_ = 0;         // request SENDs received
  std::uint64_t granted_ = 0;          // initial + credits in posted replies
  std::uint64_t granted_pending_ = 0;  // credits in appended, not yet posted replies
  std::uint64_t outstanding_ = 0;      // requests received whose reply is not appended yet
  std::uint32_t owed_ = 0;             // re-posted buffers not yet returned in a reply
  std::string stats_text_;             // storage behind a STATS reply until it is appended
  Clock::time_point executing_received_{};  // the receive time of the request process() runs
  // Replies appended and not yet posted: their class and request receive
  // time (recorded by record_posted() with one clock read). Grown as needed, to kMaxUnposted.
  struct Unposted {
    OpClass cls;
    Clock::time_point received;
  };
  std::vector<Unposted> unposted_;

  // Grants by window index (server_grant.cpp): held (bound, not written
  // yet), then written (`used`), then consumed by entry `entry` while its
  // window is invalidated.
  struct Grant {
    GrantBlock block;
    std::uint32_t rkey = 0;
    bool used = false;
    std::optional<Key> entry;
  };
  // A grant not written yet leaves the budget (written, or with the connection).
  void unhold(const Grant& g) noexcept;
  std::vector<std::optional<Grant>> grants_;  // max_grants slots
  std::size_t grants_held_ = 0;
  std::size_t window_ops_ = 0;  // invalidations queued or posted, not completed
  Link* link_;

  Arena* arena_;  // never null
  reactor::SlotTable<Pending> pending_{kMaxPending};
  std::deque<Key> queued_;                 // entries in Wait::send, in reply order
  std::optional<Key> pushed_;              // run() -> process(): the entry of an Outcome::pushed GET
  std::size_t transfers_in_flight_ = 0;    // entries in Wait::read and Wait::write
  // The READs and WRITEs posted and not known complete, in post order. Every
  // READ is signaled (its completion installs and answers a SET: waiting for
  // a later one delays the reply); of the WRITEs (a large GET's, whose reply
  // rides in the immediate: the completion only drops the pin) every
  // kWriteSignalInterval-th and a post's last transfer are
  // (MessageChannel::set_transfer_signaling). A signaled completion says
  // those before it are done too (the send queue completes in order).
  static constexpr std::size_t kWriteSignalInterval = 16;
  conn::FifoVector<verbs::WrId> transfers_posted_;
  std::uint64_t transfers_finished_ = 0;
  std::size_t durable_waits_ = 0;          // records of entries in Wait::log, not durable yet
  // Pulled values (a large GET's, a large CALL reply's), pinned until the
  // client's RELEASE names its req_id (the wire's key for them).
  std::unordered_map<std::uint32_t, LargeRef> pulls_;
  std::vector<std::byte> call_reply_;      // an eager CALL reply's bytes until process() appends it
  Durability* durability_ = nullptr;
};

}  // namespace rkv::kv::server
