#pragma once
// MapKeeper: a member's part in keeping its cluster's shard map
// (docs/cluster.md "The shard map"). Every kvd with --cluster runs one. It
// watches the cluster (ClusterWatch) and, whenever the members or the map
// change, computes plan_map() of what it sees; if that differs from the
// map, it writes it with a transaction that holds only if the map is still
// the one it planned from (its mod_revision). Every member plans the same
// map from the same revision, one transaction lands, and the others find
// nothing left to change once the watch shows them the new map. No member
// is a leader: etcd's transaction decides, and a member with a stale view
// cannot overwrite a map it has not seen.
//
// It also writes what the member's Replicator reports: a backup of a shard
// this member is the primary of that is caught up joins the shard's
// in_sync (mark_in_sync), with the plan of the map so marked, in the same
// transaction; the marks are kept until a map shows them or makes them
// moot (another shard epoch, or the backup no longer an owner).
//
// And it acts on a member found gone (member_gone: a connection to it was
// refused by its node because nothing listens on its port, which a live
// kvd always does): it revokes that member's lease, if the member still
// holds the same one, so etcd deletes the record now and the next plan
// drops it, instead of after the lease's TTL (docs/cluster.md
// "Membership", Dying). A machine that dies or is cut off refuses nothing: its
// lease still has to expire.
//
// A plan that drops owners whose records are gone is written only if those
// records are still gone when it lands (the transaction compares them
// too): a member whose lease lapsed and that joined again under the same
// lease (MemberLease) is not dropped by a plan made before it was back.
// And such a plan waits (holding) while this member's own lease may have
// lapsed (lease_held_until: etcd expires leases one by one, so a member
// paused with the others may see theirs gone before its own) or its own
// record is gone (it joins again first), and up to `grace` (kvd: its
// lease TTL) while (a) this member itself joined again less than `grace`
// ago (after every lease lapsed at once, the members come back one by one:
// the first must not fail over or empty the shards of those a moment
// behind it), or (b)
// some shard has no owner left at all that was not found gone
// (member_gone): its keys are with those owners, which may be back within
// `grace` (docs/cluster.md "Membership", A lease that lapsed). Past
// `grace` it is written, as before.
//
// One transaction at a time; a change seen meanwhile is planned once it is
// answered. One that fails to reach etcd is planned again after 1 s (the
// failure logged once per streak).
//
// Owns: its ClusterWatch, an EtcdClient, the retry and grace timers. The Reactor is
// the caller's and must outlive it. Thread: the reactor's.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/cluster_watch.hpp"
#include "cluster/etcd.hpp"
#include "cluster/membership.hpp"
#include "cluster/shard_map.hpp"
#include "reactor/reactor.hpp"

namespace rkv::cluster {

enum class KeeperState : std::uint8_t {
  idle,     // the map is what this member would write, as far as it knows
  writing,  // a transaction is out
  waiting,  // the last one failed to reach etcd: planning again after the retry delay
  holding,  // the plan drops owners that may be back soon: planning again at a change or after the grace
};
[[nodiscard]] std::string_view to_string(KeeperState s) noexcept;

class MapKeeper {
 public:
  // From `start` (a read_cluster made after this kvd joined); `shape` is
  // used only if the cluster has no map yet. Plans at once. `on_view` (may
  // be empty) hears `start` now and each view the watch reports after it
  // (kvd keeps its shard gate by them). Throws ClusterError if libcurl
  // cannot be set up.
  // `self`: this member's id; `grace`: how long a plan that drops absent
  // owners may wait for them (above).
  MapKeeper(reactor::Reactor& reactor, const ClusterView& start, MapShape shape, std::string self,
            std::chrono::milliseconds grace, ClusterWatch::OnChange on_view = {});
  MapKeeper(const MapKeeper&) = delete;
  MapKeeper& operator=(const MapKeeper&) = delete;
  MapKeeper(MapKeeper&&) = delete;
  MapKeeper& operator=(MapKeeper&&) = delete;
  ~MapKeeper() = default;  // a transaction in flight is dropped (it lands or not; others plan on)

  [[nodiscard]] KeeperState state() const noexcept { return state_; }
  // Backup `id` of shard `shard` (at `epoch`) is caught up: written in the next transaction.
  void mark_in_sync(std::uint32_t shard, std::string id, std::uint64_t epoch);
  // Member `id`, under `lease` (as the view it was seen in had it), is gone:
  // its lease is revoked once (async), if the latest view still shows it so.
  void member_gone(const std::string& id, std::int64_t lease);
  // This member's lease is surely held until `until` (kvd: MemberLease's
  // `held`); past it, no plan that drops an absent owner is written. Never
  // called: as if held for ever.
  void lease_held_until(std::chrono::steady_clock::time_point until);
  // Plans held back so far (each start of a hold).
  [[nodiscard]] std::uint64_t holds() const noexcept { return holds_; }
  // Leases of members found gone it asked etcd to revoke, and those etcd revoked.
  [[nodiscard]] std::uint64_t revoking() const noexcept { return revoke_requests_; }
  [[nodiscard]] std::uint64_t revoked() const noexcept { return revoked_count_; }

 private:
  void on_change();             // the watch saw the members or the map change
  void plan();                  // from the watch's view: idle -> writing, or stays idle
  // `last`: the map `map` was planned from (its shards that start empty are logged).
  void on_written(EtcdReply& reply, const ShardMap& map, const std::optional<ShardMap>& last);
  // Why a plan from `view` that drops the `absent` owners (sorted) waits, or
  // empty (then it is written); `*wake` gets when to plan again.
  [[nodiscard]] std::string hold_reason(const ClusterView& view, const std::vector<std::string>& absent,
                                        reactor::Reactor::Clock::time_point* wake);

  reactor::Reactor* reactor_;
  MapShape shape_;
  EtcdClient etcd_;
  reactor::Timer retry_timer_;
  std::string self_;
  std::chrono::milliseconds grace_;
  reactor::Timer grace_timer_;
  std::chrono::steady_clock::time_point lease_until_ = std::chrono::steady_clock::time_point::max();
  bool self_absent_ = false;  // this member's record was not in the last view planned from
  reactor::Reactor::Clock::time_point rejoined_at_{};  // when it was back in one; epoch: never
  std::optional<reactor::Reactor::Clock::time_point> orphaned_since_;  // (b) first seen, this streak
  std::uint64_t holds_ = 0;
  KeeperState state_ = KeeperState::idle;
  bool stale_ = false;    // the view changed while writing: plan again when answered
  bool failing_ = false;  // the last transaction did not reach etcd (logged once per streak)
  struct Mark {
    std::uint32_t shard;
    std::string id;
    std::uint64_t epoch;
  };
  std::vector<Mark> marks_;  // not yet in a map the watch showed
  std::set<std::pair<std::string, std::int64_t>> revoking_;  // (id, lease) of members reported gone
  std::uint64_t revoke_requests_ = 0;
  std::uint64_t revoked_count_ = 0;
  ClusterWatch::OnChange on_view_;
  ClusterWatch watch_;    // last: its reports need everything above; the view plans start from
};

}  // namespace rkv::cluster
