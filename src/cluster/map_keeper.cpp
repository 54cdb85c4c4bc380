// A member's part in keeping the shard map: see map_keeper.hpp.
#include "cluster/map_keeper.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "cluster/etcd_wire.hpp"

namespace rkv::cluster {

namespace {

constexpr std::chrono::milliseconds kTxnTimeout{5'000};
constexpr std::chrono::milliseconds kRetry{1'000};

// "a:1 22, b:1 21, c:1 21": primaries per member, for the log.
std::string primaries_line(const ShardMap& map) {
  std::string out;
  for (const auto& [id, count] : map.primaries()) out += (out.empty() ? "" : ", ") + id + " " + std::to_string(count);
  return out;
}

// "0, 5, 9": shard numbers, the first 16, then how many more.
std::string shard_list(const std::vector<std::uint32_t>& shards) {
  std::string out;
  for (std::size_t i = 0; i < shards.size() && i < 16; ++i) out += (i ? ", " : "") + std::to_string(shards[i]);
  if (shards.size() > 16) out += ", and " + std::to_string(shards.size() - 16) + " more";
  return out;
}

}  // namespace

std::string_view to_string(KeeperState s) noexcept {
  switch (s) {
    case KeeperState::idle: return "idle";
    case KeeperState::writing: return "writing";
    case KeeperState::waiting: return "waiting";
    case KeeperState::holding: return "holding";
  }
  return "?";
}

MapKeeper::MapKeeper(reactor::Reactor& reactor, const ClusterView& start, MapShape shape,
                     std::string self, std::chrono::milliseconds grace, ClusterWatch::OnChange on_view)
    : reactor_(&reactor),
      shape_(shape),
      etcd_(reactor, start.url.endpoints(), kTxnTimeout),
      self_(std::move(self)),
      grace_(grace),
      on_view_(std::move(on_view)),
      watch_(reactor, start, [this](const ClusterView& v) {
        if (on_view_) on_view_(v);
        on_change();
      }) {
  if (on_view_) on_view_(start);
  plan();
}

void MapKeeper::on_change() {
  switch (state_) {
    case KeeperState::idle:
    case KeeperState::holding: plan(); return;
    case KeeperState::writing: stale_ = true; return;
    case KeeperState::waiting: return;  // the retry plans from the view it then has
  }
}

void MapKeeper::mark_in_sync(std::uint32_t shard, std::string id, std::uint64_t epoch) {
  marks_.push_back({shard, std::move(id), epoch});
  on_change();
}

void MapKeeper::member_gone(const std::string& id, std::int64_t lease) {
  if (lease == 0 || !revoking_.emplace(id, lease).second) return;  // each report acted on once
  const ClusterView view = watch_.view();
  const bool same = std::ranges::any_of(view.members, [&](const Member& m) { return m.id() == id && m.lease == lease; });
  if (!same) {  // gone from the view already, or joined again under another lease (then it listens)
    spdlog::info("cluster {}: member {} found gone under lease {:x}, which its record no longer has: nothing to revoke",
                 watch_.url().text(), id, lease);
    return;
  }
  ++revoke_requests_;
  spdlog::warn("cluster {}: member {} is gone (nothing listens on its port): revoking its lease {:x}",
               watch_.url().text(), id, lease);
  const auto done = [this, id](EtcdReply& r) {
    if (r.ok) {
      ++revoked_count_;
    } else {  // another member revoked it first, or it expired; else it expires by itself
      spdlog::info("cluster {}: revoking the lease of {}: {} (it expires by itself)", watch_.url().text(), id,
                   r.error);
    }
  };
  try {
    etcd_.post(kPathRevoke, revoke_body(lease), done);
  } catch (const std::exception& e) {
    EtcdReply failed;
    failed.error = e.what();
    done(failed);
  }
}

void MapKeeper::lease_held_until(std::chrono::steady_clock::time_point until) {
  lease_until_ = until;
  if (state_ == KeeperState::holding) plan();
}

std::string MapKeeper::hold_reason(const ClusterView& view, const std::vector<std::string>& absent,
                                   reactor::Reactor::Clock::time_point* wake) {
  const auto now = reactor::Reactor::now();
  if (std::chrono::steady_clock::now() >= lease_until_) {
    *wake = now + grace_;  // a renewal (lease_held_until) plans again sooner
    return "this member's own lease may have lapsed: it cannot tell whether the others are gone or it is";
  }
  if (self_absent_) {
    *wake = now + grace_;  // a change (its record back) plans again sooner
    return "this member's own record is gone (its lease lapsed): it joins again first";
  }
  if (now < rejoined_at_ + grace_) {
    *wake = rejoined_at_ + grace_;
    return "this member joined again after its lease lapsed, and " + std::to_string(absent.size()) +
           " owner(s) may be a moment behind it";
  }
  // (b): shards none of whose owners is left, but for owners found gone.
  const ShardMap& last = *view.map;
  const auto waited_for = [&](const std::string& id) {
    if (!std::ranges::binary_search(absent, id)) return false;
    return !revoking_.contains({id, last.leases.at(id)});
  };
  std::vector<std::uint32_t> orphans;
  for (std::size_t i = 0; i < last.shards.size(); ++i) {
    const auto& owners = last.shards[i].owners;
    const bool none_left = std::ranges::all_of(owners, [&](const std::string& id) { return std::ranges::binary_search(absent, id); });
    if (none_left && std::ranges::any_of(owners, waited_for)) orphans.push_back(static_cast<std::uint32_t>(i));
  }
  if (orphans.empty()) {
    orphaned_since_.reset();
    return {};
  }
  if (!orphaned_since_) orphaned_since_ = now;
  if (now >= *orphaned_since_ + grace_) return {};
  *wake = *orphaned_since_ + grace_;
  return std::to_string(orphans.size()) + " shard(s) (" + shard_list(orphans) +
         ") have no owner left, and theirs may join again under the lease they had";
}

void MapKeeper::plan() {
  const bool was_holding = state_ == KeeperState::holding;
  state_ = KeeperState::idle;
  grace_timer_.reset();
  stale_ = false;
  const ClusterView view = watch_.view();
  // The marks this map lacks, applied; the others are shown or moot.
  std::optional<ShardMap> marked = view.map;
  std::erase_if(marks_, [&](const Mark& m) { return !marked || !cluster::mark_in_sync(*marked, m.shard, m.id, m.epoch); });
  const std::vector<std::string> ids = view.ids();
  if (!std::ranges::binary_search(ids, self_)) {
    self_absent_ = true;
  } else if (self_absent_) {
    self_absent_ = false;
    rejoined_at_ = reactor::Reactor::now();
  }
  const std::vector<std::string> draining = view.draining();
  std::optional<ShardMap> next = plan_map(marked, ids, view.leases(), shape_, draining);
  if (!next && !marks_.empty()) {
    next = std::move(marked);
    ++next->epoch;
  }
  if (!next) return;
  // The owners of the last map whose records are gone (the plan drops them,
  // rule 1): still gone when it lands, or it does not.
  std::vector<std::string> absent;
  std::vector<std::string> absent_keys;
  if (view.map) {
    for (const auto& [id, lease] : view.map->leases) {
      if (!std::ranges::binary_search(ids, id)) {
        absent.push_back(id);  // sorted: the leases' map is
        absent_keys.push_back(view.url.members_prefix() + id);
      }
    }
  }
  if (!absent.empty()) {
    reactor::Reactor::Clock::time_point wake{};
    if (const std::string why = hold_reason(view, absent, &wake); !why.empty()) {
      if (!was_holding) {
        ++holds_;
        spdlog::info("cluster {}: holding the next shard map back: {} (planning again at a change, or in {} ms)",
                     view.url.text(), why,
                     std::chrono::duration_cast<std::chrono::milliseconds>(wake - reactor::Reactor::now()).count());
      }
      state_ = KeeperState::holding;
      grace_timer_ = reactor_->at(wake, [this] { on_change(); });
      return;
    }
  } else {
    orphaned_since_.reset();
  }
  state_ = KeeperState::writing;
  std::string body = put_if_body(view.url.map_key(), map_value(*next), view.map_revision, absent_keys);
  try {
    etcd_.post(kPathTxn, std::move(body),
               [this, map = *next, last = view.map](EtcdReply& r) { on_written(r, map, last); });
  } catch (const std::exception& e) {
    EtcdReply failed;
    failed.error = e.what();
    on_written(failed, *next, view.map);
  }
}

void MapKeeper::on_written(EtcdReply& reply, const ShardMap& map, const std::optional<ShardMap>& last) {
  std::string why;
  std::optional<TxnResult> txn;
  if (!reply.ok || !(txn = parse_txn(reply.body, why))) {
    if (!failing_) {
      spdlog::warn("cluster {}: writing the shard map of epoch {}: {} (trying again every {} ms)", watch_.url().text(),
                   map.epoch, reply.ok ? why : reply.error, kRetry.count());
    }
    failing_ = true;
    state_ = KeeperState::waiting;
    retry_timer_ = reactor_->after(kRetry, [this] { plan(); });
    return;
  }
  failing_ = false;
  if (txn->succeeded) {
    spdlog::info("cluster {}: wrote the shard map of epoch {}: {} shards; primaries: {}", watch_.url().text(),
                 map.epoch, map.shards.size(), primaries_line(map));
    if (last) {
      // Logged here, by the one member whose write landed: data lost is decided by this map. A
      // warning with replicas; without, a moved shard always starts empty (a cache's choice).
      if (const std::vector<std::uint32_t> empty = shards_started_empty(*last, map); !empty.empty()) {
        spdlog::log(map.replicas > 0 ? spdlog::level::warn : spdlog::level::info,
                    "cluster {}: the shard map of epoch {} gives {} shard(s) ({}) to members that held none of "
                    "their keys (no owner of the last map still owns them), so what those shards held is gone",
                    watch_.url().text(), map.epoch, empty.size(), shard_list(empty));
      }
    }
  }  // else another member's write landed first: the watch brings it
  state_ = KeeperState::idle;
  if (stale_) plan();
}

}  // namespace rkv::cluster
