#pragma once
// A cluster's members in etcd (docs/cluster.md "Membership"): the lease a
// kvd keeps its member record under (MemberLease), and a read of the
// cluster's members and shard map (read_cluster).
//
// A kvd joins by granting a lease of --lease-ttl seconds and putting its
// record (keyspace.hpp) under it; it renews the lease every third of the TTL
// from a reactor timer, without blocking the data path. When the kvd dies,
// or stops renewing for longer than the TTL (killed, paused, cut off from
// etcd), etcd expires the lease and deletes the record: etcd, not the kvd,
// decides that a member is gone. A kvd that finds its lease expired while it
// still runs joins again, asking etcd for the lease ID it had (a new
// grant of the same ID): it is the same incarnation, holding what it held,
// and a map no member changed meanwhile still names it (docs/cluster.md
// "Membership", A lease that lapsed). If etcd refuses that ID it joins
// under a new one, as a new incarnation. Leaving (shutdown) revokes the
// lease, so the record goes at once.
//
// Until when the lease is surely held (its `held` callback; kvd's shard
// gate, docs/cluster.md "Fencing"): etcd counts a lease's TTL from when it
// received the grant or the last keepalive, which is after this kvd sent
// it, so the lease is held at least until the send time of the last
// request etcd confirmed plus the TTL etcd answered. `held` gets that less
// a tenth of the TTL (the two clocks' rates may differ) after every
// confirmed grant and renewal, on this kvd's steady clock.
//
// Owns: its EtcdClient, the renewal timer. The Reactor is the caller's and
// must outlive it. Thread: the reactor's.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/etcd.hpp"
#include "cluster/etcd_wire.hpp"
#include "cluster/keyspace.hpp"
#include "cluster/shard_map.hpp"
#include "reactor/reactor.hpp"

namespace rkv::cluster {

enum class LeaseState : std::uint8_t {
  joined,     // the lease is live and the record is under it
  rejoining,  // the lease expired (etcd said TTL 0): a new grant + put is in flight
  left,       // leave() ran: revoked (or given up)
};
[[nodiscard]] std::string_view to_string(LeaseState s) noexcept;

class MemberLease {
 public:
  using Clock = std::chrono::steady_clock;
  using Held = std::function<void(Clock::time_point until)>;
  // Joins (sync, setup): grants the lease and puts the record; throws
  // ClusterError if etcd cannot be reached or refuses. `ttl` >= 2 s.
  // `held` (may be empty) hears how long the lease surely lasts (above).
  MemberLease(reactor::Reactor& reactor, ClusterUrl url, Member self, std::chrono::seconds ttl, Held held = {});
  ~MemberLease();  // stops renewing; leave() first to remove the record at once
  MemberLease(const MemberLease&) = delete;
  MemberLease& operator=(const MemberLease&) = delete;
  MemberLease(MemberLease&&) = delete;
  MemberLease& operator=(MemberLease&&) = delete;

  // Revokes the lease (sync, bounded by the request timeout; outside reactor
  // callbacks). A failure is logged: the record then goes when the lease
  // expires. Idempotent.
  void leave() noexcept;
  // The same, async (from a reactor callback): `done` runs once the revoke
  // was answered or failed (at once if the lease was already left).
  // Leaving with data to hand over (kvd --replicas): puts the record again,
  // under the same lease, marked draining, so the members' plans move its
  // primaries to other members first (plan_map's `draining`); `done` hears
  // whether etcd took it. The lease is kept: leave_async() follows.
  void drain_async(std::function<void(bool ok)> done);
  void leave_async(std::function<void()> done);

  [[nodiscard]] LeaseState state() const noexcept { return state_; }
  [[nodiscard]] std::int64_t lease() const noexcept { return lease_; }
  [[nodiscard]] const std::string& key() const noexcept { return key_; }
  // The etcd revision at which the record was last put by a join (or a
  // rejoin): a map this kvd's watch showed at or after it was planned by
  // members that could see the record (kvd's fence waits for one, below).
  [[nodiscard]] std::int64_t record_revision() const noexcept { return record_revision_; }
  // Renewals that failed to reach etcd, and times the lease was found expired.
  [[nodiscard]] std::uint64_t renew_failures() const noexcept { return renew_failures_; }
  [[nodiscard]] std::uint64_t rejoins() const noexcept { return rejoins_; }

 private:
  [[nodiscard]] std::chrono::milliseconds renew_period() const noexcept {
    return std::chrono::milliseconds(ttl_) / 3;  // 2 s: 666 ms
  }
  void renew();                       // the timer: one keepalive, unless one is in flight
  void on_renewed(EtcdReply& reply, Clock::time_point sent);  // keepalive reply
  void confirmed(Clock::time_point sent, std::int64_t ttl_s);  // etcd confirmed the lease (grant or keepalive)
  // Grants a lease and puts the record under it (async; each request at
  // most `timeout`, 0: the client's); `done(0, "")`, or an errno value and why.
  // `want` 0: a new lease; else that one is asked for again (rejoin()).
  using JoinDone = std::function<void(int code, const std::string& why)>;
  void join(std::chrono::milliseconds timeout, std::int64_t want, JoinDone done);
  // join()'s second step: the record put under lease_; ttl_s > 0 is the
  // granted TTL `held` hears of (0: nothing is known until a renewal).
  void put_record(std::chrono::milliseconds timeout, Clock::time_point sent, std::int64_t ttl_s, JoinDone done);
  void rejoin();                      // join() after the lease expired (and again until it works)
  void on_failure(std::string_view what, const std::string& why);
  void on_revoked(const EtcdReply& reply) const;  // leave()'s and leave_async()'s log line

  ClusterUrl url_;
  Member self_;
  std::chrono::seconds ttl_;
  Held held_;
  std::string key_;
  EtcdClient etcd_;
  reactor::Timer renew_timer_;
  std::int64_t lease_ = 0;
  std::int64_t record_revision_ = 0;  // etcd's revision of the last put of the record (join, rejoin)
  LeaseState state_ = LeaseState::joined;
  bool in_flight_ = false;   // a keepalive or a rejoin step is out
  bool failing_ = false;     // the last request failed (logged once per streak)
  std::uint64_t renew_failures_ = 0;
  std::uint64_t rejoins_ = 0;
};

// A cluster at one revision of etcd's store: its members and its shard map.
struct ClusterView {
  ClusterUrl url;
  std::vector<Member> members;    // ordered by id
  std::optional<ShardMap> map;    // none until a member wrote one (or it does not parse)
  std::int64_t map_revision = 0;  // the map key's mod_revision (0: no map key)
  std::int64_t revision = 0;      // what a watch continues from (+1)

  [[nodiscard]] std::vector<std::string> ids() const;      // the members' ids, in order
  [[nodiscard]] std::vector<std::int64_t> leases() const;  // their leases, in the same order
  [[nodiscard]] std::vector<std::string> draining() const;  // the ids of those draining, in order
};
// The member in a record read from etcd, if it is one: its value parses and
// its key is member_key() of it (so a watch's delete of that key removes it).
[[nodiscard]] std::optional<Member> member_record(const ClusterUrl& url, const KeyValue& kv, std::string& error);
// The same, and a record that is not one logged as skipped.
[[nodiscard]] std::optional<Member> member_or_skip(const ClusterUrl& url, const KeyValue& kv);
// The map in a record of url.map_key(), or none (logged) if it does not parse.
[[nodiscard]] std::optional<ShardMap> map_or_none(const ClusterUrl& url, const KeyValue& kv);
// The cluster in a range read of url.prefix() at `revision`: the member
// records (ordered by id) and the map. Records that do not parse are
// skipped, and a map that does not parse is taken as none, with a warning.
[[nodiscard]] ClusterView view_of(const ClusterUrl& url, const std::vector<KeyValue>& kvs, std::int64_t revision);

// The cluster's members (none if no kvd joined it) and map (sync: its own
// reactor, at most `timeout`). Throws ClusterError: etcd unreachable or
// refusing (its errno), a reply that is not etcd's (EPROTO).
[[nodiscard]] ClusterView read_cluster(const ClusterUrl& url, std::chrono::milliseconds timeout);

// Asks a member to leave (`rkv cluster remove`; sync like read_cluster): puts
// its record (as read, its lease included) again, marked draining, under the
// same lease. The kvd sees its record so in its watch and leaves as on
// SIGTERM: with replicas its primaries move to in-sync backups first. A
// member that left or restarted since the read has another lease or none,
// and etcd refuses the put (ClusterError): nothing is marked. (One whose
// lease lapsed and that joined again under it is the same process: marked.)
void mark_draining(const ClusterUrl& url, Member member, std::chrono::milliseconds timeout);

}  // namespace rkv::cluster
