#pragma once
// CHandle: what one kv.h handle is; c_api.cpp is the C surface over it
// (argument checks, messages, never an exception across the boundary).
//
// Owns: the handle's Reactor and ShardSet (one Client, one connection, per
// server of the list kv_open was given; shard_set.hpp); the operations
// submitted through the C API (a SlotTable of Op: a Client callback names
// its op by SlotKey, never by pointer); the per-key lines; the completions
// ready for kv_poll (a ring of kMaxPending); the eventfd that makes kv_fd
// readable while kv_poll has something to return.
//
// Order: operations on one key run one at a time, in submission order (the
// key's line: each op waits in the handle until the one before it on its key
// completed, then goes to the Client). The wire alone would not keep it:
// replies on a connection are not ordered (a rendezvous SET answers after its
// RDMA READ, a durable SET after its fsync, a pulled GET completes after its
// READ), and a one-sided GET (RKV_GET_MODE=read) never meets a SET on the
// wire at all. Operations on different keys do not wait for each other.
//
// No completion runs inside a submission: the handle's Client posts requests
// at the end of a reactor turn only (ClientOptions::request_batch = 0), so
// Client::set/get never flush and never call back from inside the line code.
//
// kv_fd: the reactor's epoll fd. It holds every source the handle sleeps on
// (the CQ's completion channel, the rdma_cm channel, the timerfd) and the
// eventfd `wake_`. Between two C API calls it is readable whenever kv_poll
// has something to do: wake_ is signalled when a call returns with
// completions ready but not yet returned, right after a submission (kv_poll
// sends what was queued), and when settling did not finish; otherwise every
// call that may leave ops in flight "settles" the reactor before returning
// (Reactor::settle_once until a turn finds nothing: the CQ is armed, the
// fds' events taken), so the next completion makes the fd readable.
// Every call that runs the reactor consumes wake_ first, so the handle's own
// waits never see it.
//
// Several servers: an op goes to its key's shard (ShardSet::shard_of; the
// line of a key is on one shard, so per-key order holds as above); kv_call,
// which has no key, is refused (EINVAL) on such a handle. An op whose shard is
// down fails with EHOSTDOWN; the handle reconnects that shard in ShardSet::
// maintain(), which runs at the entry points (run, submit, stats, poll and
// kv_poll's loop), never inside a reactor callback; the retry timer makes
// kv_fd readable so a caller sleeping on it comes back to kv_poll.
//
// Thread: the thread that opened the handle (the reactor's owner); every
// entry point asserts it in debug builds.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/kv.h"
#include "kv/client/shard_set.hpp"
#include "proto/placement.hpp"
#include "reactor/event_fd.hpp"
#include "reactor/reactor.hpp"
#include "reactor/slot_table.hpp"

namespace rkv::kv::client {

// call: a CALL (kv_call, and kv_incr/kv_cas, whose line is their key's;
// kv_call's is the empty key, which no other op has: kv_calls run one at a
// time, in order, and are not ordered with keyed ops).
// expire: EXPIRE (kv_expire), ttl: TTL (kv_ttl).
enum class OpKind : std::uint8_t { set, get, del, get_into, call, expire, ttl };
[[nodiscard]] std::string_view to_string(OpKind k) noexcept;

// The outcome of a sync call.
struct OpResult {
  Status status = Status::ok;
  bool found = false;         // GET, DEL, EXPIRE, TTL: the key existed
  std::int64_t ttl_ms = -1;   // TTL: the key's remaining time in ms (-1: no expiry)
  void* value = nullptr;      // GET hit, CALL: the value or reply handed to the caller (release_value); else null
  std::size_t value_len = 0;  // its length (get_into: the bytes written into the caller's buffer)
};

// A value handed to a C caller: `len` bytes and a NUL after them, freed by
// release_value (kv_release). A large GET value stays in the landing buffer
// it arrived in; small ones are copied into malloc'd memory with a header.
// null when out of memory; the copy's bytes are added to *account (if not null: the delivering connection's bytes_copied)
[[nodiscard]] void* copy_value(std::span<const std::byte> v, std::uint64_t* account = nullptr) noexcept;
void release_value(void* value) noexcept;                                // any thread

class CHandle {
 public:
  // Operations submitted async and not yet returned by kv_poll, at most.
  static constexpr std::size_t kMaxPending = KV_MAX_PENDING;

  // Connects (on the calling thread, which owns the handle from now on).
  // Throws ConnectError, std::system_error or std::bad_alloc.
  // `servers`: one or more (kv_open's list, parsed and checked); `cluster`:
  // the cluster they are the members of, to follow (ShardSetOptions::cluster).
  // read_from_backups: RKV_READ_FROM=backups (ShardSetOptions::read_from_backups).
  static std::unique_ptr<CHandle> open(std::vector<proto::ServerAddr> servers, ClientOptions options,
                                       std::optional<cluster::ClusterView> cluster = std::nullopt,
                                       bool read_from_backups = false);

  CHandle(const CHandle&) = delete;
  CHandle& operator=(const CHandle&) = delete;
  CHandle(CHandle&&) = delete;
  CHandle& operator=(CHandle&&) = delete;
  // Closes the connection (ops in flight complete with ENOTCONN and are
  // dropped with the values nobody took). Never throws.
  ~CHandle();

  void assert_owner() const noexcept {
#ifndef NDEBUG
    reactor_->assert_owner_thread();
#endif
  }

  // Limits and state checked before anything is queued: 0 or an errno, with
  // the message in last_error. `what` names the C function. `shard`: the
  // key's, shard_for(key), computed once per operation by the caller and
  // passed on to run() or submit().
  [[nodiscard]] int check(std::string_view key, std::size_t shard, std::size_t value_len, const char* what) noexcept;

  // Async: 0, or EAGAIN (kMaxPending reached) or why the Client refused it
  // (the message in last_error); the value bytes stay the caller's until the
  // op's completion. Throws std::bad_alloc.
  // get_into: `into` (the caller's memory) stays the caller's until the
  // op's completion too. A CALL: as run()'s (`value` the request, `call_op`).
  // ttl_ms: a SET's time to live (0: none), an EXPIRE's new one (0: persist).
  [[nodiscard]] int submit(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                           std::uint64_t tag, const char* what, std::span<std::byte> into = {},
                           std::uint16_t call_op = 0, std::uint64_t ttl_ms = 0);
  // Sync: the op joins its key's line like an async one and the reactor runs
  // until it completes (Client::await: the op timeout fails the
  // connection). 0 or an errno (message in last_error); `out` on success.
  // Throws std::bad_alloc or std::system_error (the reactor).
  // A CALL: `key` is its line (empty for kv_call), `value` the request bytes, `call_op` the user opcode.
  // An op a cluster member refused not_owner is placed again and resent
  // (ShardSet::not_owner_pause), so a sync caller sees ESTALE only when the
  // member kept refusing it; so is one but a CALL that ended shard_down,
  // connection_failed or moved while following a cluster (place_again).
  [[nodiscard]] int run(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                        OpResult& out, const char* what, std::span<std::byte> into = {}, std::uint16_t call_op = 0,
                        std::uint64_t ttl_ms = 0);
  // kv_stats: the server's STATS text, the reactor run until it arrives.
  [[nodiscard]] int stats(std::string& out, const char* what);
  // kv_counters: this handle's client counters, "name value" lines (kClientCounterTable).
  [[nodiscard]] std::string counters_text() const;
  // kv_poll. Throws std::system_error (the reactor).
  [[nodiscard]] int poll(kv_completion* out, int max, int timeout_ms);
  [[nodiscard]] int fd() const noexcept { return reactor_->fd(); }

  // Sets last_error to "<what>: <status> (<the connection's failure>)" and
  // last_status to `st`; returns its errno. `shard`: whose connection
  // (several servers: named in the message).
  int status_error(Status st, const char* what, std::size_t shard = 0) noexcept;
  int set_error(int code, std::string_view msg) noexcept;
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  // The Status behind the last error (several Statuses share an errno: EIO);
  // ok after set_error (an error no Status gave).
  [[nodiscard]] Status last_status() const noexcept { return last_status_; }
  [[nodiscard]] bool sharded() const noexcept { return shards_->sharded(); }
  // The server of an op on `key`: where an operation's shard is decided (the
  // one hash of its key; everything after is given the index), over the
  // members as last seen (a change the cluster's watch reported is applied
  // first). kv_call's line is the empty key: c_api.cpp refuses kv_call on
  // several servers, so it is shard 0, the one server.
  // read: a GET's (ShardSet::read_shard_of: --read-from backups).
  [[nodiscard]] std::size_t shard_for(std::string_view key, bool read = false) noexcept;

 private:
  enum class OpState : std::uint8_t {
    waiting,  // behind an earlier op on its key
    sent,     // given to the Client: its callback is due
    done,     // sync op completed: the result waits in `result` for run()
  };
  struct Op {
    OpKind kind = OpKind::get;
    OpState state = OpState::waiting;
    bool sync = false;
    std::string key;
    std::span<const std::byte> value;  // SET: the caller's bytes; CALL: the request
    std::span<std::byte> into;         // get_into: the caller's memory
    std::uint16_t call_op = 0;         // CALL: the user opcode
    std::uint64_t ttl_ms = 0;          // SET: its TTL (0: none); EXPIRE: the new one (0: persist)
    Path path = Path::eager;           // SET, CALL: how it went (the Client's decision, given back by send())
    std::size_t shard = 0;             // the key's shard (shard_for, once per op)
    std::uint64_t tag = 0;
    reactor::SlotKey next{};  // the next op on the same key (generation 0: none)
    OpResult result;          // sync ops, once done
  };
  // The ops on one key, oldest first (linked through Op::next).
  struct Line {
    reactor::SlotKey front{};
    reactor::SlotKey back{};
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using Lines = std::unordered_map<std::string, Line, KeyHash, std::equal_to<>>;

  explicit CHandle(std::unique_ptr<reactor::Reactor> reactor);

  // A new op at the back of its key's line; sent now if it is the front.
  // Returns its key, or the Client's refusal (the op is gone then).
  [[nodiscard]] Status add(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                           std::uint64_t tag, bool sync, std::span<std::byte> into, reactor::SlotKey& out,
                           std::uint16_t call_op = 0, std::uint64_t ttl_ms = 0);
  [[nodiscard]] Status send(reactor::SlotKey k) noexcept;  // to the Client
  void on_reply(reactor::SlotKey k, Status st, bool found, std::span<const std::byte> value) noexcept;
  // The front op of its line is over: out of the line, delivered, and the
  // next ones sent (those the Client refuses complete with its status).
  void complete(reactor::SlotKey k, OpResult r) noexcept;
  void deliver(reactor::SlotKey k, OpResult r) noexcept;
  void push_ready(const kv_completion& c) noexcept;
  int take(kv_completion* out, int max) noexcept;

  // One attempt of run() on `shard`.
  [[nodiscard]] int run_on(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                           OpResult& out, const char* what, std::span<std::byte> into, std::uint16_t call_op,
                           std::uint64_t ttl_ms);
  void enter() noexcept;  // consume wake_: the handle's own waits must not see it
  void signal() noexcept;  // make kv_fd readable until the next enter()
  bool settle();           // settle_once until idle (true) or ready completions / the turn cap (false)
  void leave();            // settle if ops are in flight and nothing is ready; signal if needed

  static constexpr int kSettleTurns = 64;

  // Destroyed in reverse: the shards (their close completes the ops in flight
  // into the tables below), the tables, the eventfd's watch, then the
  // eventfd, then the reactor.
  std::unique_ptr<reactor::Reactor> reactor_;
  reactor::EventFd wake_;
  reactor::Registration wake_watch_;
  bool signaled_ = false;
  std::string last_error_;
  Status last_status_ = Status::ok;  // status_error's last
  reactor::SlotTable<Op> ops_;
  Lines lines_;
  std::size_t async_in_flight_ = 0;  // async ops not yet completed
  std::vector<kv_completion> ready_;  // a ring of kMaxPending
  std::size_t ready_head_ = 0;
  std::size_t ready_count_ = 0;
  std::unique_ptr<ShardSet> shards_;
};

}  // namespace rkv::kv::client
