#pragma once
// ShardGate: which keys this server may answer for (docs/cluster.md
// "Fencing"). A kvd of a static server list has an open gate: every key.
// A cluster member's gate holds two facts, both set by kvd from etcd:
//
//   its part in each shard, in the latest shard map it has seen (none
//     before the first map). Of a shard it is the primary of, it answers
//     every request. Of a shard it backs, it applies only the replication
//     records (writes carrying kFlagEpoch) of the shard's epoch in that
//     map: a record from a primary the map has replaced (an older epoch),
//     or from one whose map this server has not seen yet (a newer one), is
//     refused; and if the map lists it in the shard's in_sync, it answers
//     the GETs that say a backup may (kFlagBackupRead: docs/cluster.md
//     "Reads from backups"). Anything else is answered `not_owner`, so a client with an
//     older map than the server's is told instead of writing where no
//     reader will look;
//   until when its etcd lease is surely still held: the send time of the
//     last keepalive etcd confirmed, plus the lease's TTL, less a margin
//     (etcd can only expire it TTL after it received that keepalive, which
//     is later). Past that instant the members may already have given its
//     shards to another primary, so writes (records too) are answered
//     `not_owner` until a renewal confirms the lease again; reads are still
//     answered from what it holds (possibly stale: docs/cluster.md says how
//     much).
//
// Checked per keyed request (run() and a CALL's store accesses), a write's
// with the steady clock read then, so a pause (SIGSTOP, a stall) before the check is
// caught; a pause between the check and the reply's SEND is not (the
// replication's epochs are the fence for that).
//
// Owns: the bitmap of served shards. Thread: the reactor's.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "proto/placement.hpp"

namespace rkv::kv::server {

class ShardGate {
 public:
  using Clock = std::chrono::steady_clock;
  // backup_read: a GET carrying kFlagBackupRead, which an in-sync backup may answer too.
  enum class Access : std::uint8_t { read, backup_read, write };

  // Open (every key, any time) until close_to_cluster().
  ShardGate() = default;

  // A cluster member: from now on only the shards serve() names, and writes
  // only while the lease holds (neither is known yet: nothing is admitted).
  void close_to_cluster() noexcept;
  // The shards of a new map: this server's part in each shard i of the map
  // (its size is the map's shard count).
  void serve(std::vector<proto::ShardPart> parts);
  // The lease is surely held until `until` (a later renewal moves it on).
  void lease_held_until(Clock::time_point until) noexcept { lease_until_ = until; }

  // The gate's answer to a request: whether it is admitted, and as what.
  struct Admission {
    bool admitted = false;
    // The part this server plays in the key's shard: primary for an open
    // gate; backup for a record, or a GET an in-sync backup answers.
    proto::ShardRole role = proto::ShardRole::none;
    std::optional<std::uint32_t> shard;  // the key's shard in the latest map (none: an open gate, or no map yet)
  };
  // A request for `key`; `epoch` non-zero: a replication record of that
  // shard epoch (always a write).
  [[nodiscard]] Admission admit(std::string_view key, Access access, std::uint64_t epoch = 0) const noexcept {
    if (open_) return {.admitted = epoch == 0, .role = proto::ShardRole::primary, .shard = std::nullopt};
    return admit_member(key, access, epoch);
  }
  [[nodiscard]] bool admits(std::string_view key, Access access, std::uint64_t epoch = 0) const noexcept {
    return admit(key, access, epoch).admitted;
  }
  [[nodiscard]] std::size_t served() const noexcept;  // shards this server is the primary of
  [[nodiscard]] std::size_t backed() const noexcept;  // shards this server is a backup of
  // By shard of the latest map: this server's part in it (empty: no map yet).
  [[nodiscard]] const std::vector<proto::ShardPart>& shards() const noexcept { return parts_; }

 private:
  // The clock is read for writes only (reads need no lease).
  [[nodiscard]] Admission admit_member(std::string_view key, Access access, std::uint64_t epoch) const noexcept;

  bool open_ = true;
  std::vector<proto::ShardPart> parts_;  // by shard of the latest map; empty: no map yet
  Clock::time_point lease_until_{};  // writes only before this
};

}  // namespace rkv::kv::server
