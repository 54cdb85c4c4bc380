#pragma once
// A cluster's shard map (docs/cluster.md "The shard map"): which member is
// the primary of each shard and which are its backups, with epochs. It is
// one etcd key (/rkv/NAME/map), written only by transactions that compare
// its revision, so every reader of one revision sees one owner per shard.
//
// A key's shard is proto::shard_of(key, shards.size()). A shard's epoch is
// the map epoch at which its primary last changed: a primary that has not
// seen the map of that epoch is a stale one, and replication refuses it
// (fencing).
//
// An owner is a member incarnation: its id and the etcd lease it held when
// the map made it an owner (`leases`). A kvd restarted under the same id
// holds another lease, so plan_map takes it for a new member: it loses
// every shard of the old incarnation, and kvd serves a shard only while the
// map's lease for it is the one it holds (docs/cluster.md "Fencing"). A
// member whose lease lapsed joins again under the same lease ID
// (MemberLease), so a map no one changed meanwhile still names it.
//
// plan_map is the one rule that computes the next map from the last one and
// the live members. It is deterministic, so every member that sees the same
// etcd revision proposes the same map, and whichever transaction lands
// first, the others then find nothing to change.
//
// Pure: no I/O (tests/unit/test_shard_map.cpp).
//
// Owns: nothing. Thread: any.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/placement.hpp"

namespace rkv::cluster {

inline constexpr std::uint32_t kDefaultShards = 64;
inline constexpr std::uint32_t kMaxShards = 4096;
inline constexpr std::uint32_t kMaxReplicas = 4;

struct ShardOwners {
  std::uint64_t epoch = 0;          // the map epoch at which owners[0] became primary
  std::vector<std::string> owners;  // member ids: owners[0] the primary, then the backups
  // The owners that hold every write of the shard acknowledged at `epoch`:
  // owners[0], and each backup once the primary caught it up (MapKeeper
  // writes that). In the order of `owners`.
  std::vector<std::string> in_sync;
  // A backup that is to take the shard over once it is in sync (plan_map
  // rule 4), or empty.
  std::string taker;

  bool operator==(const ShardOwners&) const = default;
};

struct ShardMap {
  std::uint64_t epoch = 0;  // one more at every change
  std::uint32_t replicas = 0;  // backups per shard, when there are enough members
  std::vector<ShardOwners> shards;
  std::map<std::string, std::int64_t> leases;  // each owner's etcd lease (every owner has one)

  bool operator==(const ShardMap&) const = default;
  // By shard: the part `id` under `lease` (that incarnation) has in it,
  // with the shard's epoch (none for every shard if the map has another
  // lease, or none, for `id`).
  [[nodiscard]] std::vector<proto::ShardPart> parts_of(std::string_view id, std::int64_t lease) const;
  // How many shards each id is the primary of (ids with none are absent).
  [[nodiscard]] std::map<std::string, std::uint32_t> primaries() const;
};

// What a first map is made of.
struct MapShape {
  std::uint32_t shards = kDefaultShards;  // 1 to kMaxShards
  std::uint32_t replicas = 0;             // 0 to kMaxReplicas
};

// At most this many owners per shard: replicas + 1, and one more while a
// member that is to take the shard over is caught up (plan_map rule 4).
[[nodiscard]] constexpr std::size_t max_owners(std::uint32_t replicas) noexcept {
  return replicas + (replicas > 0 ? 2u : 1u);
}

// The map as stored in etcd: one JSON object,
// {"epoch": E, "replicas": R,
//  "shards": [{"epoch": e, "owners": [ID, ...], "in_sync": [ID, ...], "taker": ID}, ...],
// ("taker" only when there is one).
//  "leases": {ID: LEASE, ...}}.
[[nodiscard]] std::string map_value(const ShardMap& map);
// A stored map, or nullopt (and why): any field missing or of the wrong
// type, no shard or more than kMaxShards, replicas over kMaxReplicas, a
// shard with no owner, more than max_owners(replicas), an empty or repeated
// id, an epoch above the map's, an owner without a lease, an `in_sync`
// that is not the primary and some of the backups in their order, or a
// taker that is not a backup.
[[nodiscard]] std::optional<ShardMap> parse_map(std::string_view value, std::string& error);

// The primary of shard `shard` at `epoch` caught its backup `id` up: `id`
// joins the shard's in_sync (in the owners' order). False, and nothing
// changes, if the shard is not at `epoch`, `id` does not own it, or is in
// sync already.
bool mark_in_sync(ShardMap& map, std::uint32_t shard, std::string_view id, std::uint64_t epoch);

// The next map for the live members `ids` (sorted, unique) holding
// `leases` (the same order), or nullopt if `last` needs no change (or there
// is no member). Without a `last` map, one of `shape` with the primaries
// dealt round-robin in id order (every owner in sync: there is no data
// yet). Otherwise, in this order:
//   1. members that are not live (not in `ids`, or under another lease
//      than the map has for them) leave every shard; a shard whose primary
//      left gets its first live in-sync backup as primary (else its first
//      live backup: what it holds is all that is left);
//   2. a shard that lost every owner gets the member with the fewest
//      primaries (its data is gone);
//   3. each shard is filled up to min(replicas + 1, members) owners with
//      the members that own the fewest shards;
//   4. a taker in sync takes its shard over (the two swap); then primaries
//      are balanced: while one member is to have two more than another
//      (counting shards it waits to take over), one of its shards is to
//      move to the one with the fewest. With replicas 0 the member simply
//      takes it (there is no copy to move). Otherwise a primary moves at
//      once only to an in-sync backup (the two swap); else the member
//      becomes the shard's taker: a backup of it already, or an extra
//      owner of the last one, and takes it over in a later plan, once
//      its primary marked it in sync. A shard with a taker moves no more;
//   5. a shard with more owners than min(replicas + 1, members), one more
//      with a taker, drops backups other than the taker: those not in sync
//      first, then those that own the most shards.
// Members in `draining` (sorted; leaving: kvd's SIGTERM) take no new place
// (rules 2, 3 and 4 pass them over while another member is left), and
// before balancing each shard they are to be the primary of moves as in
// rule 4 to the member with the fewest primaries among its in-sync backups
// that are not draining, else among all members that are not (the taker).
// So a draining member ends up the primary of nothing, with no write lost,
// and can then leave.
// Ties go to the smaller id. The map epoch is last's + 1, and each shard
// whose primary changed (another id, or another incarnation) takes it,
// with only its primary in sync: the new primary catches its backups up
// again; `leases` then holds each owner's.
// Throws std::invalid_argument if `leases` is not as long as `ids`.
[[nodiscard]] std::optional<ShardMap> plan_map(const std::optional<ShardMap>& last,
                                               std::span<const std::string> ids,
                                               std::span<const std::int64_t> leases, MapShape shape,
                                               std::span<const std::string> draining = {});

// The shards of `next` that no owner of `last` still owns (the same id
// under the same lease): every copy of their keys left with those owners,
// and their new primary starts empty. So it goes when every owner of a
// shard left at once (plan_map rule 2), and with replicas 0 when a primary
// moves (rule 4). MapKeeper logs them when its map is written. Empty if the
// two maps have different numbers of shards (a map's never changes).
[[nodiscard]] std::vector<std::uint32_t> shards_started_empty(const ShardMap& last, const ShardMap& next);

}  // namespace rkv::cluster
