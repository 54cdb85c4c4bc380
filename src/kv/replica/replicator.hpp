#pragma once
// Replicator: a shard primary's half of replication (docs/cluster.md
// "Replication"). A store::Durability that wraps kvd's own (the log, or
// none): every SET, DEL and EXPIRE of a key whose shard this member is the
// primary of, and every key it evicts, goes to the log as before and, as a
// replication record at the shard's epoch, to each backup the shard map
// names (a Shipper thread sends them over RDMA).
//
// When the client hears "ok" (kvd --ack):
//   replicas  once the log (if any) and every backup the map names for the
//             shard applied it (the default). A backup the map drops, or
//             that no longer takes the shard's records, stops being waited
//             for once kvd hands over that map (set_backups); a write whose
//             shard this member no longer is the primary of at that epoch
//             is answered `moved`: it may not have reached the new primary
//             (a client may place it again if running it twice is harmless).
//   primary   as the log alone says; the records follow asynchronously.
//
// A large value is not copied: its arena block stays pinned (the LargeRef,
// released here, on the server's thread) until every backup READ it.
//
// Catch-up: a backup the map newly names for a shard (a new member, a
// failover's replacement) is sent the shard's current keys by a walk of the
// Store (Store::visit, a few of its map's slots per reactor turn, at most kCatchUpWindow
// records of it unanswered), interleaved with the live records in one
// order per link; the live writes wait for it as for any backup. Once a
// walk ended and every record made before its end is over, each of its
// (shard, backup) pairs still in the map holds every acknowledged write:
// the Replicator reports it (set_on_in_sync), and kvd's MapKeeper marks the
// backup in sync in the map, which lets the planner move the primary to it.
//
// Owns: the Shipper, the writes waiting for backups. Thread: the reactor's
// (the Shipper's own thread only through its inbox and the eventfd).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/replica/shipper.hpp"
#include "kv/store/durability.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::replica {

enum class AckMode : std::uint8_t { replicas, primary };

[[nodiscard]] constexpr std::string_view to_string(AckMode a) noexcept {
  switch (a) {
    case AckMode::replicas: return "replicas";
    case AckMode::primary: return "primary";
  }
  return "invalid";
}
[[nodiscard]] std::optional<AckMode> ack_mode_from(std::string_view text) noexcept;

// A backup of a shard, as the map names it (its member id, host:port).
struct Backup {
  std::string id;
  std::string host;
  std::uint16_t port = 0;
  std::int64_t lease = 0;  // its etcd lease in the view the map came with (0: unknown)
  bool operator==(const Backup&) const = default;
};
// Per shard of the map: the epoch this member is its primary at (0: it is
// not) and its backups.
struct ShardBackups {
  std::uint64_t epoch = 0;
  std::vector<Backup> backups;
  bool operator==(const ShardBackups&) const = default;
};

// The answers of deferred writes (Server::on_durable): ok, io_error (the log
// failed, or out of memory) or moved (the shard moved before every backup had it).
using AckSink = std::function<void(std::uint64_t conn_token, std::uint32_t wait, proto::Status status)>;
// A backup (its member id) of `shard`, whose primary this member is at
// `epoch`, holds every write of it acknowledged so far.
using OnInSync = std::function<void(std::uint32_t shard, const std::string& backup, std::uint64_t epoch)>;
// A member's node refused a connection to it as nothing listens on its port:
// the member (its id, and its lease as the map had it) is gone.
using OnMemberGone = std::function<void(const std::string& member, std::int64_t lease)>;

class Replicator final : public store::Durability {
 public:
  // Catch-up: slots of the Store's map walked per turn (a quarter to three
  // quarters of them hold a key), and records of it unanswered at most.
  static constexpr std::size_t kCatchUpSlots = 128;
  static constexpr std::size_t kCatchUpWindow = 512;

  // `store`: what catch-up reads. `inner`: kvd's log, or null (then a write
  // is "durable" once applied). `options`: the backup clients' (kvd's auth token).
  Replicator(reactor::Reactor& reactor, const store::Store& store, store::Durability* inner, AckMode ack,
             client::ClientOptions options);
  ~Replicator() override;

  // Where answers go (Server::on_durable).
  void set_sink(AckSink sink) { sink_ = std::move(sink); }
  // Who hears of backups caught up (kvd: the MapKeeper).
  void set_on_in_sync(OnInSync on_in_sync) { on_in_sync_ = std::move(on_in_sync); }
  // Who hears of members gone (kvd: the MapKeeper, which revokes their lease):
  // a backup's, or a probed member's, node refused a connection.
  void set_on_member_gone(OnMemberGone on_gone) { on_member_gone_ = std::move(on_gone); }
  // Is `member` (a primary whose replication connection into this member
  // dropped: Server::set_on_record_peer_lost) still there? Connects to it
  // from the shipping thread; if its node refuses, on_member_gone hears it.
  void probe(const Backup& member);
  // The wrapped Durability's sink: kvd routes the log's answers here.
  void on_inner_durable(std::uint64_t conn_token, std::uint32_t wait, bool ok) noexcept;
  // The map (of epoch `map_epoch`) changed: by shard, this member's
  // primaries and their backups. The same as last time (kvd calls it at
  // every lease renewal too) changes nothing.
  void set_backups(std::uint64_t map_epoch, std::vector<ShardBackups> shards);

  [[nodiscard]] store::DurableAck record_set(std::string_view key, std::string_view value,
                                             const store::LargeRef& large, store::ExpireAt expire_at,
                                             std::uint64_t conn_token, std::uint32_t wait) noexcept override;
  [[nodiscard]] store::DurableAck record_expire(std::string_view key, store::ExpireAt expire_at,
                                                std::uint64_t conn_token, std::uint32_t wait) noexcept override;
  [[nodiscard]] store::DurableAck record_del(std::string_view key, std::uint64_t conn_token,
                                             std::uint32_t wait) noexcept override;
  void record_eviction(std::string_view key) noexcept override;
  void flush() noexcept override;
  void append_stats(store::StatRows& rows) const override;
  void append_histograms(std::string& out) const override;

  // Writes with a record not yet applied or dropped by every backup.
  [[nodiscard]] std::size_t writes_in_flight() const noexcept { return writes_.size(); }
  // (shard, backup) pairs whose catch-up has not ended.
  [[nodiscard]] std::size_t catching_up() const noexcept;

 private:
  struct Write {
    std::uint64_t id = 0;
    std::uint32_t shard = 0;
    std::uint64_t epoch = 0;
    std::uint32_t ships = 0;              // records not yet applied or dropped
    std::vector<std::uint32_t> awaited;   // links the reply still waits for
    bool replying = false;                // a client waits for it
    bool inner_waiting = false;           // ... and the log has not answered yet
    proto::Status status = proto::Status::ok;  // the reply's, once settled (the first failure)
    bool catch_up = false;                // a record of catch-up, not of a write
    std::uint64_t conn_token = 0;
    std::uint32_t wait = 0;
    store::LargeRef large;                // pinned until the last backup READ it
  };

  // The record of one write: queued for each backup of its shard.
  store::DurableAck ship(proto::Opcode op, std::string_view key, std::string_view value,
                         const store::LargeRef& large, store::ExpireAt expire_at, store::DurableAck inner,
                         std::uint64_t conn_token, std::uint32_t wait, bool reply) noexcept;
  // Queues one record per link of `links` (all backups of `shard`); returns its Write.
  Write& queue(proto::Opcode op, std::string_view key, std::string_view value, const store::LargeRef& large,
               store::ExpireAt expire_at, std::uint32_t shard, const std::vector<std::uint32_t>& links);
  void plan_catch_up(const std::vector<ShardBackups>& before);
  void catch_up_step();
  // Reports the pairs of ended walks whose records are all over.
  void report_in_sync();
  void on_done();
  // One record of a write is over (applied by its backup, or not): the
  // write stops waiting for that backup.
  void ship_ended(const ShipDone& d) noexcept;
  static void fail(Write& w, proto::Status status) noexcept;  // the reply's status, if it has none yet
  void settle(std::uint64_t id);  // answers and forgets a write once nothing is left of it
  [[nodiscard]] std::uint32_t link_of(const Backup& b);

  reactor::Reactor* reactor_;
  store::Durability* inner_;
  AckMode ack_;
  AckSink sink_;
  std::vector<ShardBackups> shards_;
  std::uint64_t map_epoch_ = 0;
  std::map<std::string, std::uint32_t> link_ids_;  // member id -> link number (never reused)
  std::unordered_map<std::uint64_t, Write> writes_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t> inner_waits_;  // (token, wait) -> write
  std::uint64_t next_write_ = 1;
  std::vector<Ship> outbox_;  // this batch's records (flush() posts them)
  std::uint64_t shipped_ = 0;
  std::uint64_t failed_writes_ = 0;
  // Catch-up: shard -> the links to send its keys to; one walk for all.
  const store::Store* store_;
  std::map<std::uint32_t, std::vector<std::uint32_t>> catch_up_;
  store::Store::SweepCursor catch_up_cursor_;
  reactor::Timer catch_up_next_;
  std::size_t catch_up_in_flight_ = 0;  // its records not yet applied or dropped
  std::uint64_t catch_up_records_ = 0;
  std::uint64_t catch_ups_done_ = 0;
  // Pairs of ended walks: in sync once no write before `barrier` is left.
  struct Syncing {
    std::uint32_t shard = 0;
    std::uint64_t epoch = 0;
    std::uint32_t link = 0;
    std::string backup;
    std::uint64_t barrier = 0;  // the first write id after the walk's end
    bool lost = false;          // a record of it was not applied: not reported
  };
  std::vector<Syncing> syncing_;
  std::uint64_t in_sync_reports_ = 0;
  reactor::Timer report_next_;
  OnInSync on_in_sync_;
  OnMemberGone on_member_gone_;
  reactor::EventFd done_fd_;
  reactor::Registration done_watch_;
  std::unique_ptr<Shipper> shipper_;  // last: its thread stops first
};

}  // namespace rkv::kv::replica
