#pragma once
// ClientConn: the client side of one connection's protocol (docs/protocol.md),
// with no verbs in it: it posts through a Link and is fed verbs::Completion
// values, so the protocol suite drives it with a FakeLink.
//
// Owns: the request slot table (a bounded reactor::SlotTable; a request's
// req_id is its SlotKey::pack32(), 16 bits of index + 16 of generation), the
// queue of submitted-but-unsent requests, the send credits granted by the
// server, and a MessageChannel over the caller's pools (which must outlive it).
//
// WrIds: receives and sends carry the buffer index and the connection's
// generation (the constructor's `generation`); every RDMA READ carries its
// request's slot key (index + generation), so a READ completion is routed by
// find() and one for a slot freed since is dropped as stale.
//
// READs: a one-sided GET's READs and a pulled reply's READ are built where
// they are decided (at submit, after its index READ, on a retry; on the
// GET_REPLY or CALL_REPLY saying PULL), queued in the MessageChannel and
// posted by the next flush() ahead of its SENDs, in the same chains (one way
// to post, the server's too); only every kReadSignalInterval-th and the last
// READ of a chain is signaled. The READs posted and not yet known complete are
// kept in post order (reads_posted_): the send queue completes in order, so a READ's
// completion also completes every READ posted before it; an error completion
// (which always comes, signaled or not) fails the connection and no READ
// before it is trusted.
//
// Grants (client_grant.cpp; docs/protocol.md "SET by grant"): with
// enable_grants() and a server that grants, ok replies to large SETs bring
// landing space (grants_); a rendezvous SET that fits one goes as a WRITE
// WITH IMMEDIATE into it instead of a request message (one credit, as a
// SEND), queued with the READs but posted after the SENDs appended before it
// in the same flush (the server takes SENDs and WRITEs with immediate in
// their receive order); its reply matches by req_id as any reply. Its WRITE's
// wr_id joins reads_posted_ like a READ's.
//
// Flow: submit_set()/submit_get()/submit_del()/submit_expire()/submit_ttl()/submit_call() check the limits and
// queue the request;
// flush() encodes queued requests into send buffers (coalescing as many as fit
// in one SEND) while a credit (1 per SEND), a free slot (max_in_flight =
// receive buffers) and a send buffer are available. A reply frees its slot,
// returns its credits and completes the request. The receive buffer is copied
// out and re-posted BEFORE any callback of the replies it carried runs.
// On failure (error completion, a flush while established, a decode error,
// a reply whose req_id is unknown, stale or awaits no reply, a READ
// completion for a request that posted none, a disconnect) every pending
// request completes with an error exactly once; later submits are refused.
//
// Thread: the reactor thread that owns the connection; not thread-safe.
// Callbacks may submit (flush is the owner's job, once per CQ drain) and may
// call close()/fail(); they must not destroy the ClientConn.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/conn/buffer_pool.hpp"
#include "kv/client/errors.hpp"
#include "kv/client/landing.hpp"
#include "kv/conn/link.hpp"
#include "kv/client/reg_cache.hpp"
#include "kv/conn/registrar.hpp"
#include "kv/conn/msg_channel.hpp"
#include "proto/grant.hpp"
#include "proto/index_format.hpp"
#include "proto/wire.hpp"
#include "reactor/slot_table.hpp"
#include "verbs/completion.hpp"

namespace rkv::kv::client {

using conn::BufferPool;
using conn::Link;
using conn::MessageChannel;
using conn::Registrar;
using conn::Registration;

// Status, to_string(Status), from_wire: kv/client/errors.hpp.

// One connection's lifecycle, the protocol and the rdma_cm part together
// (the Client drives the CM transitions; a ClientConn alone, as the protocol
// suite drives it, goes connecting -> accepted -> established -> ...):
//
//   connecting -> accepted -> established
//   connecting ----------------------------> disconnected -> closed  (fail(), close())
//   accepted | established -> failed -> disconnected                 (on_disconnected())
//   accepted | established | failed -> closing -> closed             (close(); on_disconnected() or cm_done())
//
// Requests are refused from failed on (ended()).
enum class ConnState : std::uint8_t {
  connecting,    // receives posted, rdma_connect sent, ESTABLISHED not seen: requests queue
  accepted,      // ESTABLISHED seen, the server's parameters not taken yet: requests queue
  established,   // requests flow
  failed,        // an error ended it: requests completed with connection_failed; the rdma_cm connection is still up
  disconnected,  // requests completed with an error, and no rdma_cm connection is left to end (the server's
                 // DISCONNECTED seen and answered, or ESTABLISHED never was)
  closing,       // closed locally (close()): requests completed with Status::closed; the owner disconnects and
                 // waits for DISCONNECTED (on_disconnected()) or gives up (cm_done())
  closed,        // closed locally, nothing left to disconnect (the Client then releases the verbs resources)
};

[[nodiscard]] std::string_view to_string(ConnState s) noexcept;

// How a request travels, decided once per request when it is submitted
// (ClientConn::submit) and kept in its Request; the callers that act on it
// (Client::set's flush, the C API's forget) are handed that decision.
enum class Path : std::uint8_t {
  eager,       // inline in the SEND (key + value under proto::kEagerLimit)
  rendezvous,  // a SET's or CALL's value READ by the server from its registration (RegCache lease)
  onesided,    // a GET by RDMA READs of the server's index (read mode), no message
};

// Completion of one request; `value` (GET hits, CALL replies) is valid only during the call.
// `found`: GET, the key has a value; DEL, the key existed and was removed; CALL: true when ok.
using Callback = std::function<void(Status, bool found, std::span<const std::byte> value)>;

struct ClientCounters {
  std::uint64_t requests = 0;         // accepted by submit
  std::uint64_t refused = 0;          // refused by submit
  std::uint64_t completed = 0;        // callbacks run (any status)
  std::uint64_t sends_posted = 0;     // SENDs (each one credit)
  std::uint64_t messages_sent = 0;    // requests encoded into those SENDs
  std::uint64_t max_coalesced = 0;    // most requests in one SEND
  std::uint64_t replies = 0;          // reply messages received
  std::uint64_t recv_completions = 0; // receive completions: buffers that carried replies, WRITEs with immediate
  std::uint64_t credit_stalls = 0;    // flushes that left requests queued for lack of credits
  // Rendezvous (docs/protocol.md). messages_sent includes RELEASEs.
  std::uint64_t sets_large = 0;       // SETs sent with a descriptor (server READs the value)
  std::uint64_t sets_granted = 0;     // SETs WRITTEN WITH IMMEDIATE into a grant: no request message
  std::uint64_t grants_received = 0;  // grants the server's SET replies brought
  std::uint64_t gets_written = 0;     // large GETs the server WROTE into an offered buffer, the reply in its immediate
  std::uint64_t gets_pulled = 0;      // large GETs this client READ from the server
  std::uint64_t calls = 0;            // CALLs sent
  std::uint64_t calls_large = 0;      // of them: request sent by descriptor (the server READ it)
  std::uint64_t calls_pulled = 0;     // CALL replies this client READ from the server
  std::uint64_t releases_sent = 0;    // RELEASE messages (coalesced or alone)
  std::uint64_t rdma_reads = 0;       // RDMA READs posted (sets_granted's WRITEs are not among them)
  std::uint64_t read_posts = 0;       // posts that carried them (one-sided GETs chain theirs: several per post)
  std::uint64_t reads_unsignaled = 0; // of rdma_reads: posted without a completion of their own
  std::uint64_t stale_reads = 0;      // RDMA READ completions for a request slot freed since (dropped)
  std::uint64_t registrations = 0;    // ibv_reg_mr calls (cache misses, landing buffers)
  std::uint64_t reg_cache_hits = 0;   // large SET sources found registered in the pin-down cache
  std::uint64_t reg_cache_misses = 0; // large SET sources registered for the SET (then cached)
  std::uint64_t bytes_copied = 0;     // value bytes the library copied, counted by each copy (copy_account())
  // One-sided GET (read mode, docs/protocol.md "One-sided GET"). Each counts GETs except retries.
  std::uint64_t onesided_gets = 0;       // GETs started by RDMA READ of the index
  std::uint64_t onesided_hits = 0;       // answered found from the server's memory
  std::uint64_t onesided_misses = 0;     // answered not found by the index alone
  std::uint64_t onesided_retries = 0;    // re-reads after a torn entry or a value that failed its checks
  std::uint64_t onesided_fallbacks = 0;  // turned into a message GET (overflow, collision, retries used up)
  std::uint64_t onesided_reads = 0;      // of rdma_reads: READs of one-sided GETs (1 per GET of an INLINE entry, else 2)
  std::uint64_t gets_into = 0;          // GETs into a caller's buffer (submit_get_into)
  std::uint64_t gets_into_direct = 0;   // of those: the value was RDMA-written or -read into it (no copy)
  std::uint64_t touches_sent = 0;       // keys named in TOUCH hints (one-sided hits reported to the server)
  // Connection ends (rdma_cm). A close waits for DISCONNECTED before the QP
  // goes (the server's DREQ answered, or the answer to ours).
  std::uint64_t disconnects = 0;             // DISCONNECTED events seen
  std::uint64_t unconfirmed_disconnects = 0; // closes that gave up waiting for it (close_timeout passed)
  [[nodiscard]] double messages_per_send() const noexcept {
    return sends_posted == 0 ? 0.0 : static_cast<double>(messages_sent) / static_cast<double>(sends_posted);
  }
};

// The client's counters by name, declared once (the C API's kv_counters and
// the Python package print them from this table).
struct ClientCounterInfo {
  std::string_view name;
  std::uint64_t ClientCounters::*member;
};
inline constexpr std::array kClientCounterTable{
    ClientCounterInfo{"requests", &ClientCounters::requests},
    ClientCounterInfo{"refused", &ClientCounters::refused},
    ClientCounterInfo{"completed", &ClientCounters::completed},
    ClientCounterInfo{"sends_posted", &ClientCounters::sends_posted},
    ClientCounterInfo{"messages_sent", &ClientCounters::messages_sent},
    ClientCounterInfo{"max_coalesced", &ClientCounters::max_coalesced},
    ClientCounterInfo{"replies", &ClientCounters::replies},
    ClientCounterInfo{"recv_completions", &ClientCounters::recv_completions},
    ClientCounterInfo{"credit_stalls", &ClientCounters::credit_stalls},
    ClientCounterInfo{"sets_large", &ClientCounters::sets_large},
    ClientCounterInfo{"sets_granted", &ClientCounters::sets_granted},
    ClientCounterInfo{"grants_received", &ClientCounters::grants_received},
    ClientCounterInfo{"gets_written", &ClientCounters::gets_written},
    ClientCounterInfo{"gets_pulled", &ClientCounters::gets_pulled},
    ClientCounterInfo{"releases_sent", &ClientCounters::releases_sent},
    ClientCounterInfo{"calls", &ClientCounters::calls},
    ClientCounterInfo{"calls_large", &ClientCounters::calls_large},
    ClientCounterInfo{"calls_pulled", &ClientCounters::calls_pulled},
    ClientCounterInfo{"rdma_reads", &ClientCounters::rdma_reads},
    ClientCounterInfo{"read_posts", &ClientCounters::read_posts},
    ClientCounterInfo{"reads_unsignaled", &ClientCounters::reads_unsignaled},
    ClientCounterInfo{"stale_reads", &ClientCounters::stale_reads},
    ClientCounterInfo{"registrations", &ClientCounters::registrations},
    ClientCounterInfo{"reg_cache_hits", &ClientCounters::reg_cache_hits},
    ClientCounterInfo{"reg_cache_misses", &ClientCounters::reg_cache_misses},
    ClientCounterInfo{"bytes_copied", &ClientCounters::bytes_copied},
    ClientCounterInfo{"onesided_gets", &ClientCounters::onesided_gets},
    ClientCounterInfo{"onesided_hits", &ClientCounters::onesided_hits},
    ClientCounterInfo{"onesided_misses", &ClientCounters::onesided_misses},
    ClientCounterInfo{"onesided_retries", &ClientCounters::onesided_retries},
    ClientCounterInfo{"onesided_fallbacks", &ClientCounters::onesided_fallbacks},
    ClientCounterInfo{"onesided_reads", &ClientCounters::onesided_reads},
    ClientCounterInfo{"gets_into", &ClientCounters::gets_into},
    ClientCounterInfo{"gets_into_direct", &ClientCounters::gets_into_direct},
    ClientCounterInfo{"touches_sent", &ClientCounters::touches_sent},
    ClientCounterInfo{"disconnects", &ClientCounters::disconnects},
    ClientCounterInfo{"unconfirmed_disconnects", &ClientCounters::unconfirmed_disconnects},
};
static_assert(sizeof(ClientCounters) == kClientCounterTable.size() * sizeof(std::uint64_t),
              "every ClientCounters member needs its row in kClientCounterTable");

struct RdvOptions {
  std::size_t landing_size = std::size_t{1} << 20;   // capacity of the landing buffers offered with GETs
  std::uint32_t landing_spares = 2;                  // registered landing buffers made ready up front
  // Buffers that come back (a GET done, one created for a pull) are kept as
  // spares up to this many (and never more than requests can be in flight)
  // and keep_landing_max bytes in all: the pool grows to the large GETs a
  // caller keeps in flight, so at depth they are WRITTEN into ready memory
  // instead of each pulled into a fresh registration.
  std::uint32_t max_landing_spares = 1024;
  std::size_t keep_landing_max = std::size_t{64} << 20;
  std::size_t reg_cache_bytes = std::size_t{256} << 20;  // pin-down cache budget (SET sources)
};

// How GETs are served (ClientOptions::get_mode, kvload --get-mode, RKV_GET_MODE).
enum class GetMode : std::uint8_t {
  rpc,   // a GET message, answered by the server
  read,  // one-sided: RDMA READs of the server's index and value, no message
};
[[nodiscard]] std::string_view to_string(GetMode m) noexcept;
// "rpc" / "read"; false for anything else.
[[nodiscard]] bool parse_get_mode(std::string_view text, GetMode& out) noexcept;

// Where the server's readable index is (its ConnectParams).
struct IndexInfo {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t buckets = 0;  // a power of two
};

class ClientConn {
 public:
  // WrId generation of a connection's receives and sends when the owner
  // gives none: a ClientConn serves one connection, over pools of its own.
  static constexpr std::uint32_t kDefaultGeneration = 1;

  // `recv`'s buffer count is max_in_flight (what the client announces as its
  // credits). Nothing is posted until post_receives(). Without a registrar
  // (it must outlive this) values that do not fit a SEND are refused.
  // `generation` (1 .. verbs::WrId::kGenerationMask) goes into the WrIds of
  // the receives and sends.
  ClientConn(Link& link, BufferPool& recv, BufferPool& send, Registrar* registrar = nullptr,
             RdvOptions rdv = {}, std::uint32_t generation = kDefaultGeneration);

  ClientConn(const ClientConn&) = delete;
  ClientConn& operator=(const ClientConn&) = delete;
  ClientConn(ClientConn&&) = delete;  // the channel and callbacks refer to it
  ClientConn& operator=(ClientConn&&) = delete;
  ~ClientConn();  // pending callbacks are dropped: close() first

  // Posts every receive buffer (before rdma_connect). 0 or an errno.
  [[nodiscard]] int post_receives() noexcept;
  // ESTABLISHED seen (connecting -> accepted): from now on closing the
  // connection means disconnecting it.
  void on_accepted() noexcept;
  // The server's ConnectParams were taken (accepted -> established): initial
  // credits, its receive buffer size. max_value: the server's limit (0:
  // unknown). Registers the spare landing buffers (connection setup, not the
  // data path).
  // features: the server's ConnectParams::features (kFeatureGrants: it
  // grants; without it the grant buffer enable_grants() made goes).
  void on_established(std::uint16_t credits, std::uint32_t server_recv_size, std::uint64_t max_value = 0,
                      std::uint16_t features = 0) noexcept;
  // SET by grant (client_grant.cpp, docs/protocol.md "SET by grant"):
  // registers the buffer a granted SET's key and trailer are gathered from
  // (one area per request slot, no remote access). True: the owner may ask
  // the server for grants (ConnectParams::features kFeatureGrants). Before
  // connecting; false (logged) without a registrar or if that fails.
  bool enable_grants() noexcept;
  [[nodiscard]] bool grants_enabled() const noexcept { return tail_reg_ != nullptr; }
  [[nodiscard]] std::size_t grants_held() const noexcept { return grants_.size(); }
  // Every GET from now on carries kFlagBackupRead (ClientOptions::backup_reads).
  void set_backup_reads(bool on) noexcept { backup_reads_ = on; }

  // Queue a request. The value bytes must stay alive until the callback
  // (the key is copied). Returns ok, or why it was refused (the callback is
  // then never called). `path`, if given: how an accepted request travels.
  // ttl_ms > 0: the key expires that many ms after the server stores it
  // (proto::kMaxTtlMs at most); 0: it has no expiry (a TTL it had is cleared).
  [[nodiscard]] Status submit_set(std::string_view key, std::span<const std::byte> value, Callback cb,
                                  Path* path = nullptr, std::uint64_t ttl_ms = 0);
  [[nodiscard]] Status submit_get(std::string_view key, Callback cb);
  // GET into the caller's memory `into` (it must stay valid until the
  // callback): a large value is RDMA-written into it by the server (the
  // buffer is offered with the GET, registered local_write|remote_write for
  // this request only), pulled into it, or READ into it (read mode); a small
  // one arrives in a message and the callback's view points there (the
  // caller copies it). The callback's value is `into.first(len)` when it
  // landed directly. Status::too_large (found) when the value is longer than
  // `into`.
  [[nodiscard]] Status submit_get_into(std::string_view key, std::span<std::byte> into, Callback cb);
  // DEL: the callback's `found` says whether the key existed (and was removed).
  [[nodiscard]] Status submit_del(std::string_view key, Callback cb);
  // EXPIRE: the key expires ttl_ms from now (0: it persists); `found` says
  // whether the key existed.
  [[nodiscard]] Status submit_expire(std::string_view key, std::uint64_t ttl_ms, Callback cb);
  // TTL: `found` says whether the key exists; the value is then kTtlValueSize
  // bytes, its remaining time to live in ms (ttl_of() reads it; -1: no expiry).
  [[nodiscard]] Status submit_ttl(std::string_view key, Callback cb);
  static constexpr std::size_t kTtlValueSize = 8;
  [[nodiscard]] static std::int64_t ttl_of(std::span<const std::byte> value) noexcept;
  // A replication record (docs/cluster.md "Replication records"): the write
  // `op` (SET with `value` and ttl_ms as submit_set's, DEL, or EXPIRE with
  // ttl_ms as submit_expire's) a shard's primary sends a backup, carrying
  // the shard's epoch (non-zero). Refused (bad_request) for another op or
  // epoch 0. The backup answers not_owner unless its map makes it a backup
  // of the key's shard at that epoch.
  [[nodiscard]] Status submit_record(proto::Opcode op, std::string_view key, std::span<const std::byte> value,
                                     std::uint64_t ttl_ms, std::uint64_t epoch, Callback cb, Path* path = nullptr);
  // CALL of user opcode `op`: `request` (alive until the callback) goes
  // eagerly or, from 4 KiB, by the server's RDMA READ (registered like a
  // large SET's value); the callback's value is the handler's reply (a large
  // one READ into a landing buffer: adopt_landing() takes it). `path`: as submit_set's.
  [[nodiscard]] Status submit_call(std::uint16_t op, std::span<const std::byte> request, Callback cb,
                                   Path* path = nullptr);
  // Read mode: from now on GETs go by RDMA READ of the server's index
  // (client_onesided.cpp). Registers one buffer with a small area per
  // request slot (local_write). False (logged) if the index is unusable or
  // that fails: GETs then stay messages.
  bool enable_onesided(const IndexInfo& index) noexcept;
  [[nodiscard]] bool onesided() const noexcept { return index_.buckets != 0; }
  // STATS: the callback's value is the server's counter text ("name value" lines).
  [[nodiscard]] Status submit_stats(Callback cb);

  // Inside a GET callback whose value is large: takes the landing buffer the
  // value is in (no copy) and ends the server's access to it. Null otherwise,
  // and null for a value of at most kCopyOutMax bytes: the caller copies it
  // out of the callback's view (with copy_account(): counted) and the buffer,
  // still registered, serves the next GET. Handing a buffer over costs a
  // fresh registered one (mmap + register landing_size bytes, then
  // deregister + unmap at release), far more than copying a small value
  // (docs/performance.md, "Landing buffers handed over or copied out").
  static constexpr std::size_t kCopyOutMax = std::size_t{64} << 10;
  [[nodiscard]] std::unique_ptr<LandingBuffer> adopt_landing() noexcept;
  // Drops cached registrations overlapping `bytes` (before freeing a buffer
  // that was passed to submit_set).
  void forget(std::span<const std::byte> bytes) noexcept;
  [[nodiscard]] RegCacheStats reg_cache_stats() const noexcept;
  // Where a copy of a value this connection delivered adds its bytes
  // (bytes_copied), for proto::copy_bytes / copy_to_string: every count comes
  // from a copy (the encoder's of an eager value, a caller's copy-out).
  [[nodiscard]] std::uint64_t* copy_account() noexcept { return &counters_.bytes_copied; }

  // Encodes and posts what credits, slots and send buffers allow. Returns the
  // number of SENDs and WRITEs with immediate (granted SETs) posted: each
  // spent a credit. A post failure fails the connection.
  std::size_t flush() noexcept;

  // One work completion of this connection (any kind, any status).
  void on_completion(const verbs::Completion& c) noexcept;

  // The transitions that end requests; each completes every pending request
  // once (fail(): connection_failed; close(): Status::closed) and is a no-op
  // once requests have ended (ended()). close() is also the owner's first
  // step of teardown, so it moves a failed connection on to closing.
  void fail(std::string_view reason) noexcept;
  void close() noexcept;
  // The server's DISCONNECTED arrived (the peer left, or answered our
  // disconnect): fails what is pending ("the server closed the connection").
  // True the first time: the owner answers it with its own disconnect.
  // Counted (disconnects).
  [[nodiscard]] bool on_disconnected() noexcept;
  // The owner's wait for DISCONNECTED is over without it (closing -> closed;
  // counted: unconfirmed_disconnects).
  void cm_done() noexcept;

  // Requests have ended (failed, disconnected, closing, closed): submits are refused.
  [[nodiscard]] bool ended() const noexcept;
  [[nodiscard]] ConnState state() const noexcept { return state_; }
  [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
  [[nodiscard]] std::uint32_t credits() const noexcept { return credits_; }
  [[nodiscard]] std::uint32_t generation() const noexcept { return channel_.generation(); }
  [[nodiscard]] std::uint32_t max_in_flight() const noexcept { return slots_.max_slots(); }
  [[nodiscard]] std::size_t in_flight() const noexcept { return slots_.live(); }
  [[nodiscard]] std::size_t queued() const noexcept { return queue_.size(); }
  [[nodiscard]] std::size_t pending() const noexcept { return slots_.live() + queue_.size(); }
  // WRs posted and not yet completed (receives, sends, RDMA READs and WRITEs): teardown drains to 0.
  [[nodiscard]] std::size_t outstanding_work() const noexcept {
    return recvs_posted_ + channel_.sends_in_flight() + reads_posted_.size();
  }
  // In a chain of READs, every this-many-th is signaled (and always the last).
  static constexpr std::size_t kReadSignalInterval = 16;
  // This connection's counters; registrations, reg_cache_hits and
  // reg_cache_misses are read from the registrar and the cache now.
  [[nodiscard]] ClientCounters counters() const noexcept;

  // The most request slots a req_id can name (SlotKey::pack32 keeps 16 bits of index).
  static constexpr std::uint32_t kMaxSlots = 1u << 16;

 private:
  // A GET's destination in the caller's memory (submit_get_into). `reg`:
  // its registration for this request only (none when `bytes` is too small
  // for a value that does not come in a message).
  struct Into {
    bool on = false;
    std::span<std::byte> bytes;
    std::unique_ptr<Registration> reg;
    std::size_t len = 0;  // a pulled value's length (stage pull)
  };
  struct Request {
    proto::Opcode op = proto::Opcode::get;
    std::string key;
    std::span<const std::byte> value;
    Callback cb;
    RegCache::Lease lease;    // rendezvous: the registration of `value`
    Path path = Path::eager;  // decided by submit (a one-sided GET's fallback: eager)
    Into into{};              // GET into the caller's memory
    std::uint64_t ttl = 0;    // SET: its TTL field (0: none); EXPIRE: the new TTL
    std::vector<std::byte> owned;  // TOUCH: its packed keys (`value` views them)
    std::uint64_t epoch = 0;  // a replication record's shard epoch (submit_record); 0: none
  };
  // What a request in flight waits for. At most one RDMA READ per request is
  // in flight, and only in the pull, hood and block stages.
  enum class Stage : std::uint8_t {
    reply,  // a message request: its reply
    pull,   // a pulled GET: our READ of the value (then a RELEASE)
    hood,   // one-sided GET: the READ of the key's index neighborhood
    block,  // one-sided GET: the scatter READ of the value block
  };
  // A request in flight (an entry of slots_).
  struct Slot {
    Stage stage = Stage::reply;
    proto::Opcode op = proto::Opcode::get;
    Callback cb;
    RegCache::Lease lease;                   // large SET in flight
    std::unique_ptr<LandingBuffer> landing;  // GET: offered buffer, or the pull's target
    Into into;                               // GET into the caller's memory (instead of a landing buffer)
    // One-sided GET in progress (client_onesided.cpp).
    unsigned attempts = 0;
    std::string key;
    proto::IndexEntry entry;
  };

  // Decides the request's Path (the one place) and queues it; *path_out gets it when accepted.
  [[nodiscard]] Status submit(proto::Opcode op, std::string_view key, std::span<const std::byte> value,
                              Callback cb, Path* path_out = nullptr, std::uint64_t ttl = 0, std::uint64_t epoch = 0);
  using SlotKey = reactor::SlotKey;
  [[nodiscard]] static std::uint32_t req_id(SlotKey key) noexcept { return key.pack32(); }
  // An RDMA READ's wr_id carries its request's slot key, generation included.
  static_assert(SlotKey::kGenerationBits <= verbs::WrId::kGenerationBits,
                "a slot generation must survive the trip through a WrId");
  [[nodiscard]] static verbs::WrId read_wr_id(SlotKey key) noexcept {
    return verbs::WrId(key.index, key.generation, verbs::WrKind::rdma_read);
  }
  // A granted SET's WRITE carries its request's slot key too.
  [[nodiscard]] static verbs::WrId write_wr_id(SlotKey key) noexcept {
    return verbs::WrId(key.index, key.generation, verbs::WrKind::rdma_write);
  }
  [[nodiscard]] static SlotKey read_key(verbs::WrId id) noexcept { return SlotKey{id.slot(), id.generation()}; }
  // The slot of a key known to be live.
  [[nodiscard]] Slot& live_slot(SlotKey key) noexcept;
  void on_recv(const verbs::Completion& c) noexcept;
  // Decodes one received buffer (already copied to scratch_); false on a protocol error.
  bool handle_replies(std::span<const std::byte> bytes) noexcept;
  void finish(Status st, bool found, std::span<const std::byte> value, Callback& cb) noexcept;
  void complete_all(Status st) noexcept;
  // state_ = to, failure_ = reason (logged), every pending request completed with connection_failed.
  void end_requests(ConnState to, std::string_view reason) noexcept;
  // --- rendezvous (client_rdv.cpp) ---
  [[nodiscard]] proto::MessageSpec request_spec(Request& r, std::uint32_t id, Slot& s) noexcept;
  bool on_get_rdv(SlotKey key, const proto::Header& h, const proto::RdvDesc& desc) noexcept;
  // A WRITE with immediate: a large GET's value landed in the buffer it
  // offered, `len` bytes, and its reply is `w` (docs/protocol.md "GET large").
  void on_written(proto::WrittenReply w, std::uint32_t len) noexcept;
  // An RDMA READ or WRITE completion: a READ routed by its slot key to the
  // stage that posted it.
  void on_transfer(const verbs::Completion& c) noexcept;
  // One READ or WRITE known complete (its own completion, or a later one's):
  // a READ to its stage; a granted SET's WRITE only says whether it failed
  // (its reply, which may come first, completes the request).
  void transfer_done(const verbs::Completion& c) noexcept;
  void on_pull_read(SlotKey key, const verbs::Completion& c) noexcept;
  // Frees the slot and runs its callback with the `len`-byte value that
  // landed: in the caller's memory (a GET into it) or in its landing buffer.
  void deliver(SlotKey key, std::size_t len) noexcept;
  void recycle(std::unique_ptr<LandingBuffer> lb) noexcept;
  // Into the pool at its place by size; false: out of memory, lb is gone.
  [[nodiscard]] bool put_spare(std::unique_ptr<LandingBuffer> lb) noexcept;
  // The biggest spare landing buffer, out of the pool (null if there is none).
  [[nodiscard]] std::unique_ptr<LandingBuffer> take_spare() noexcept;
  // The same if it holds `len` bytes and the NUL after them; else null (the pool unchanged).
  [[nodiscard]] std::unique_ptr<LandingBuffer> take_spare_over(std::uint64_t len) noexcept;
  void replenish() noexcept;  // registers spare landing buffers up to the target
  // Erases the slot (its key goes stale); a landing buffer still in it is recycled.
  void free_slot(SlotKey key) noexcept;
  // --- SET by grant (client_grant.cpp) ---
  struct HeldGrant {
    proto::GrantDesc desc;
    std::uint64_t capacity = 0;
  };
  // A grant an ok SET_REPLY brought; false: a protocol error (the connection failed).
  bool keep_grant(const proto::GrantDesc& desc, std::uint64_t capacity) noexcept;
  static constexpr std::size_t kNoGrant = static_cast<std::size_t>(-1);
  // The smallest held grant that holds `need` bytes (its index in grants_), or kNoGrant.
  [[nodiscard]] std::size_t fitting_grant(std::uint64_t need) const noexcept;
  // The grant `r` would be written into if it were sent now (a rendezvous
  // SET that fits a held grant), or kNoGrant: it goes in a SEND (or by READs).
  [[nodiscard]] std::size_t granted_fit(const Request& r) const noexcept;
  // r (a rendezvous SET) into slot `key` as a WRITE WITH IMMEDIATE into
  // grants_[g] (which it consumes), queued with the channel's transfers;
  // spends a credit. No memory fails the connection.
  void queue_granted_set(SlotKey key, Request& r, std::size_t g) noexcept;
  // --- one-sided GET (client_onesided.cpp) ---
  // r into the new slot `key`; queues the neighborhood READ (flush posts it).
  void start_onesided(SlotKey key, Request& r) noexcept;
  void queue_hood_read(SlotKey key) noexcept;
  // Queues a READ with the channel's transfers (flush posts it); no memory fails the connection.
  void queue_read(const verbs::SendWr& wr) noexcept;
  // Posts the channel's queued READs and up to `sends` SENDs; counts the one-sided
  // READs among those posted; a failed post fails the connection. The SENDs posted.
  std::size_t post(std::size_t sends) noexcept;
  void on_onesided_read(SlotKey key, const verbs::Completion& c) noexcept;
  void on_hood(SlotKey key) noexcept;
  void on_block(SlotKey key) noexcept;
  // Checks a one-sided GET's value and key bytes (a block READ, or an INLINE
  // entry's data) against its entry: delivers, re-reads or asks by message.
  void check_value(SlotKey key, std::span<const std::byte> value, std::span<const std::byte> key_read) noexcept;
  void miss(SlotKey key) noexcept;  // NOT FOUND (no such key, or it expired by this reader's clock)
  void retry_or_fallback(SlotKey key) noexcept;
  void fallback(SlotKey key) noexcept;  // re-queued as a message GET
  // A one-sided GET found `key`: it joins the TOUCH hints (docs/protocol.md
  // "TOUCH"), so the server's eviction sees the read. They go as one TOUCH
  // request once kTouchBatch keys wait, or with the next message request.
  void note_touch(std::string_view key) noexcept;
  // The waiting hints as a TOUCH request at the back of queue_ (flush() sends it).
  void queue_touch() noexcept;
  static constexpr std::uint32_t kTouchBatch = 32;
  static constexpr std::size_t kTouchMaxBytes = 2048;  // a TOUCH's payload, well under the eager limit
  // Slot `index`'s part of os_mem_ (indices stay below max_in_flight(): the table is bounded).
  [[nodiscard]] std::span<std::byte> os_area(std::uint32_t index, std::size_t off, std::size_t len) noexcept;

  Link* link_;
  Registrar* registrar_;
  RdvOptions rdv_;
  bool backup_reads_ = false;
  std::unique_ptr<RegCache> cache_;  // before slots_/queue_: their leases go first
  std::uint64_t max_value_ = 0;
  std::vector<std::unique_ptr<LandingBuffer>> spares_;  // smallest first: the biggest is offered first
  std::size_t spare_bytes_ = 0;                          // their capacities, summed
  std::vector<std::unique_ptr<Registration>> retired_;  // of adopted buffers: deregistered after a SEND
  std::unique_ptr<LandingBuffer> delivering_;           // during a large GET's callback
  std::deque<std::uint32_t> releases_;                  // RELEASEs to fold into the next SEND
  std::vector<std::byte> touches_;                      // TOUCH hints not queued yet (u16 LE length + key, each)
  std::uint32_t touch_keys_ = 0;                        // keys in touches_
  BufferPool* recv_;
  MessageChannel channel_;
  ConnState state_ = ConnState::connecting;
  std::string failure_;
  std::uint32_t credits_ = 0;
  reactor::SlotTable<Slot> slots_;  // requests in flight, bounded by max_in_flight
  // READs posted and not yet known complete, in post order (= send queue
  // order; the channel appends them as it posts): at most max_in_flight()
  // (one READ per request at a time), room made by the constructor.
  conn::FifoVector<verbs::WrId> reads_posted_;
  std::deque<Request> queue_;
  std::vector<std::byte> scratch_;  // a received buffer, copied before re-posting
  std::size_t recvs_posted_ = 0;
  IndexInfo index_;                            // read mode: the server's index (buckets 0: off)
  std::vector<std::byte> os_mem_;              // per slot index: neighborhood, key, small value
  std::unique_ptr<Registration> os_reg_;       // of os_mem_, local_write
  std::vector<HeldGrant> grants_;              // smallest capacity first; room for Link::kMaxWindows
  std::vector<std::byte> tail_mem_;            // per slot index: a granted SET's key + trailer
  std::unique_ptr<Registration> tail_reg_;     // of tail_mem_, no remote access (grants enabled)
  ClientCounters counters_;  // counted here (not the mirrored ones: counters())
};

}  // namespace rkv::kv::client
