#pragma once
// ShardSet: one client over a list of kvd servers (shards), each key on the
// server that placement picks (proto/placement.hpp, docs/protocol.md
// "Several servers").
//
// Owns: one Client (one connection) per server, all on the caller's one
// Reactor, so operations to different shards are in flight together; each
// shard's state (ShardState), its reconnect backoff and timer; the
// ClusterWatch of a cluster it follows. The Reactor is
// the caller's and must outlive the ShardSet.
//
// A shard that fails: with more than one server, an operation whose shard's
// connection failed (pending: connection_failed, or refused at submit) ends
// with Status::shard_down (EHOSTDOWN in the C API); the other shards keep
// serving. The shard is marked down and a reconnect is due after a backoff
// (kBackoffMin doubling to kBackoffMax, a reactor timer). The attempt itself
// runs in maintain(), which the owner calls outside reactor callbacks (the
// C API at its entry points and in kv_poll's loop; kvload between reactor
// turns): Client::connect runs the reactor until the connection is
// established or refused (bounded by ShardSetOptions::reconnect_timeout), and
// a Client is only destroyed there, never inside its own callback. With one
// server nothing changes from a plain Client: failures are
// connection_failed / not_connected and there is no reconnect.
//
// Following a cluster (ShardSetOptions::cluster, docs/cluster.md "Following
// the membership"): a ClusterWatch reports every change of the members; the
// next maintain() applies it. The shard slots are append-only, so the shard
// index an operation recorded never names another server: a member that
// joins gets a new slot (or its old one back) and connects in that
// maintain(); a member that left, and that the shard map no longer names,
// is `gone`: new ops on it end with shard_down, those in flight finish
// there, and a later maintain() drops its Client once none is pending.
// Placement follows the cluster's shard map (docs/cluster.md "The shard
// map"): a key goes to the primary of its shard; a shard whose primary this
// client has no slot for (or before any map exists) falls back to
// rendezvous over the live members. Clients that applied the same view of
// the cluster place every key alike. A cluster client is always sharded
// (shard_down, reconnects), even with one member.
//
// Thread: the reactor's; every public member function asserts it (debug).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_watch.hpp"
#include "cluster/membership.hpp"
#include "kv/client/client.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::client {

enum class ShardState : std::uint8_t {
  up,         // connected: operations go to its Client
  down,       // its connection failed: operations end with shard_down; the backoff timer runs
  retry_due,  // the backoff passed (or it joined the cluster): the next maintain() tries to connect
  gone,       // it left the cluster: placement skips it; new ops end with shard_down, those in flight finish
  closed,     // ShardSet::close()
};
[[nodiscard]] std::string_view to_string(ShardState s) noexcept;

struct ShardSetOptions {
  std::chrono::milliseconds backoff_min{100};   // first retry after a failure
  std::chrono::milliseconds backoff_max{2'000};  // doubling up to this
  // A reconnect attempt's address/route resolution and connect timeouts
  // (the open's are ClientOptions'): a killed kvd on a live host refuses at
  // once; this bounds what an unreachable host costs the attempt.
  std::chrono::milliseconds reconnect_timeout{1'000};
  // Called from a reactor callback when maintain() has work (a shard's retry
  // is due, the members changed): the owner arranges a maintain() call soon
  // (the C API makes kv_fd readable). May be null (the owner calls
  // maintain() regularly anyway).
  std::function<void()> on_maintain_due;
  // Follow this cluster (from resolve_servers): the servers given to
  // connect() are its members at view.revision, and its changes from then on
  // are applied by maintain(). Empty: a static list.
  std::optional<cluster::ClusterView> cluster;
  // --read-from backups (docs/cluster.md "Reads from backups"): a GET goes to
  // one of the shard's in-sync backups (read_shard_of), and every Client's
  // GETs say a backup may answer (ClientOptions::backup_reads).
  bool read_from_backups = false;
};

class ShardSet {
 public:
  // Connects every server of the list (in order; the first failure throws
  // ConnectError naming the server). Throws ConnectError, std::bad_alloc.
  static std::unique_ptr<ShardSet> connect(reactor::Reactor& reactor, std::vector<proto::ServerAddr> servers,
                                           const ClientOptions& options, ShardSetOptions shard_options = {});

  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;
  ShardSet(ShardSet&&) = delete;
  ShardSet& operator=(ShardSet&&) = delete;
  ~ShardSet();  // close(); never throws

  [[nodiscard]] std::size_t size() const noexcept { return shards_.size(); }
  [[nodiscard]] bool sharded() const noexcept { return shards_.size() > 1 || following_; }
  // The key's shard: its shard map primary's when following a cluster with a
  // map, else placement over the live members (0 with one server). If every
  // member left, some gone shard (its ops end with shard_down).
  [[nodiscard]] std::size_t shard_of(std::string_view key) const noexcept;
  // Where a GET of `key` goes: with read_from_backups, one of the in-sync
  // backups the map names for its shard (rendezvous over them, so a key's
  // reads stay on one backup while the map holds) if that one is up; else,
  // and without the option, shard_of(key).
  [[nodiscard]] std::size_t read_shard_of(std::string_view key) const noexcept;
  // Status::not_owner: a cluster member refused the key (nothing was done)
  // because the map this client placed it by is older than the member's, or
  // the member's lease may have lapsed (docs/cluster.md "Fencing"). A sync
  // caller (the C API, kvload) places it again with shard_of() after a pause
  // in which the watch's next view can arrive and maintain() apply it: the
  // pause before retry `n` (from 0; 5 ms doubling to 200 ms), or nullopt
  // once the first refusal (`first`) is as old as the op timeout
  // (ClientOptions::op_timeout; kNotOwnerRetryFor without one): a sync call
  // takes no longer for being refused.
  static constexpr std::chrono::milliseconds kNotOwnerRetryFor{10'000};
  [[nodiscard]] std::optional<std::chrono::milliseconds> not_owner_pause(
      unsigned n, reactor::Reactor::Clock::time_point first) const noexcept;
  // Whether a sync caller places an op that ended with `st` again (after
  // not_owner_pause, within the same bound): not_owner always; shard_down,
  // connection_failed and moved too when following a cluster and the op
  // may run twice (`idempotent`: a SET, GET, DEL, EXPIRE or TTL; not a
  // CALL): the members will name another primary for the shard (a failover
  // promotes its backup, which holds every acknowledged write; a shard
  // moved to a member caught up first: docs/cluster.md).
  [[nodiscard]] bool place_again(Status st, bool idempotent) const noexcept;
  [[nodiscard]] reactor::Reactor& reactor() const noexcept { return *reactor_; }
  [[nodiscard]] const proto::ServerAddr& server(std::size_t i) const noexcept { return shards_[i].addr; }
  [[nodiscard]] ShardState state(std::size_t i) const noexcept;
  // The shard's Client while it has one (up, or down until maintain() drops
  // it); null otherwise. Valid until the next maintain() or close().
  [[nodiscard]] Client* client(std::size_t i) const noexcept;
  // The shard's value limit as its server announced it (0: unknown).
  [[nodiscard]] std::uint64_t server_max_value(std::size_t i) const noexcept;
  // ok if ops may go to the shard's Client; else why not (shard_down with
  // several servers, not_connected with one). Notices a failed connection
  // (the shard is then marked down).
  [[nodiscard]] Status usable(std::size_t i) noexcept;
  // Why the shard is down (its connection's failure), or "" while it is up.
  [[nodiscard]] std::string failure(std::size_t i) const;

  // Async, on shard `shard` (Client's contract, client.hpp): the key's, from
  // shard_of(), which the caller computes once per operation and keeps (the
  // C API in its op, kvload for its per-shard report). With several
  // servers: Status::shard_down at once when the shard is down, and as the
  // callback's status when its connection fails while the op is pending.
  // `path` (set, call), if given: how an accepted request travels (Client's).
  [[nodiscard]] Status set(std::size_t shard, std::string_view key, std::span<const std::byte> value, Callback cb,
                           Path* path = nullptr, std::uint64_t ttl_ms = 0);
  [[nodiscard]] Status get(std::size_t shard, std::string_view key, Callback cb);
  [[nodiscard]] Status get_into(std::size_t shard, std::string_view key, std::span<std::byte> into, Callback cb);
  [[nodiscard]] Status del(std::size_t shard, std::string_view key, Callback cb);
  [[nodiscard]] Status expire(std::size_t shard, std::string_view key, std::uint64_t ttl_ms, Callback cb);
  [[nodiscard]] Status ttl(std::size_t shard, std::string_view key, Callback cb);
  // A CALL (kv_incr/kv_cas: on their key's shard; a keyless CALL has no
  // shard, the callers decide: docs/architecture.md).
  [[nodiscard]] Status call(std::size_t shard, std::uint16_t op, std::span<const std::byte> request, Callback cb,
                            Path* path = nullptr);
  // Drops cached registrations of `bytes` in every shard's Client.
  void forget(std::span<const std::byte> bytes) noexcept;

  // Outside reactor callbacks only: applies a change of the members (a
  // cluster's), drops the Clients of shards whose connection failed or that
  // left (their pending ops complete first, with shard_down) and tries to
  // connect the shards whose retry is due. True if a shard changed state.
  bool maintain();
  // Closes every shard (pending ops complete with Status::closed). Idempotent.
  // From a reactor callback each Client only disconnects there; the next
  // close() or maintain() outside callbacks (or ~ShardSet) waits for their
  // DISCONNECTED and releases them.
  void close() noexcept;

  // Counters of every shard's Clients, the closed ones included, summed.
  [[nodiscard]] ClientCounters counters() const noexcept;
  // How often shards were found down / were reconnected (handle lifetime).
  [[nodiscard]] std::uint64_t shard_failures() const noexcept { return shard_failures_; }
  [[nodiscard]] std::uint64_t reconnects() const noexcept { return reconnects_; }
  // Following a cluster: the changes of its members or map applied so far.
  [[nodiscard]] bool following() const noexcept { return following_; }
  // The watch reported a view that the next maintain() applies.
  [[nodiscard]] bool membership_reported() const noexcept { return reported_.has_value(); }
  [[nodiscard]] std::uint64_t membership_changes() const noexcept { return membership_changes_; }

  static constexpr std::uint64_t kNoShard = ~std::uint64_t{0};

 private:
  struct Shard {
    proto::ServerAddr addr;
    std::unique_ptr<Client> client;
    ShardState state = ShardState::up;
    std::chrono::milliseconds backoff{0};
    reactor::Timer retry;
    reactor::Reactor::Clock::time_point retry_at{};  // when `retry` fires (maintain() also checks it:
                                                      // a caller that does not run the reactor still retries)
    std::uint64_t max_value = 0;
    bool connected_once = false;  // a connection was up (a member that joins has none yet)
    std::string failure;     // why it went down
    ClientCounters past{};   // counters of the Clients it had before
    // Clients retired inside a reactor callback: disconnected there, released
    // (DISCONNECTED awaited) by the next release_parked() outside callbacks.
    std::vector<std::unique_ptr<Client>> parked;
  };

  ShardSet(reactor::Reactor& reactor, const ClientOptions& options, ShardSetOptions shard_options);

  void assert_owner() const noexcept {
#ifndef NDEBUG
    reactor_->assert_owner_thread();
#endif
  }
  // An op's gate: invalid_use for a shard out of range, else usable(shard).
  [[nodiscard]] Status usable_checked(std::size_t shard) noexcept;
  // Wraps a callback: with several servers, a pending op its shard's failure
  // ended reports shard_down (and marks the shard down).
  [[nodiscard]] Callback wrap(std::size_t i, Callback cb);
  void mark_down(std::size_t i) noexcept;  // up -> down, retry timer started
  void retire(Shard& s) noexcept;          // close and drop its Client (not from its callbacks)
  void account(Shard& s, const Client& c) noexcept;  // a dropped Client's counters and failure into s
  void release_parked() noexcept;          // outside callbacks: closes and drops the parked Clients
  void try_reconnect(std::size_t i);
  void start_retry_timer(std::size_t i);  // down: retry_due after the backoff
  void on_view(const cluster::ClusterView& view);  // the watch's report (a reactor callback)
  bool apply_members();  // maintain(): the last report, if one is new
  void place_live();     // live_ids_/live_slots_ from the shards' states, map_slots_ from map_

  reactor::Reactor* reactor_;
  ClientOptions options_;
  ShardSetOptions shard_options_;
  std::vector<Shard> shards_;             // append-only: an index names one server for good
  std::vector<std::string> ids_;          // shards_[i].addr.id, every slot
  std::vector<std::string> live_ids_;     // the slots not gone, for place()
  std::vector<std::size_t> live_slots_;   // their indices in shards_
  std::optional<cluster::ShardMap> map_;  // a cluster's, as last applied
  std::vector<std::size_t> map_slots_;    // per shard of map_: its primary's slot, or kNoSlot
  struct Readers {
    std::vector<std::string> ids;     // the shard's in-sync backups this client has a slot for
    std::vector<std::size_t> slots;   // their slots
  };
  std::vector<Readers> read_slots_;  // per shard of map_, with read_from_backups
  static constexpr std::size_t kNoSlot = ~std::size_t{0};
  std::unique_ptr<cluster::ClusterWatch> watch_;
  std::optional<cluster::ClusterView> reported_;  // the view the watch reported, not yet applied
  bool following_ = false;
  std::uint64_t membership_changes_ = 0;
  bool closing_ = false;
  std::uint64_t shard_failures_ = 0;
  std::uint64_t reconnects_ = 0;
};

}  // namespace rkv::kv::client
