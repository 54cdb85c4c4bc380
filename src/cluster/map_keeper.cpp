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
  }
  return "?";
}

MapKeeper::MapKeeper(reactor::Reactor& reactor, const ClusterView& start, MapShape shape,
                     ClusterWatch::OnChange on_view)
    : reactor_(&reactor),
      shape_(shape),
      etcd_(reactor, start.url.endpoints(), kTxnTimeout),
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
    case KeeperState::idle: plan(); return;
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

void MapKeeper::plan() {
  state_ = KeeperState::idle;
  stale_ = false;
  const ClusterView view = watch_.view();
  // The marks this map lacks, applied; the others are shown or moot.
  std::optional<ShardMap> marked = view.map;
  std::erase_if(marks_, [&](const Mark& m) { return !marked || !cluster::mark_in_sync(*marked, m.shard, m.id, m.epoch); });
  const std::vector<std::string> draining = view.draining();
  std::optional<ShardMap> next = plan_map(marked, view.ids(), view.leases(), shape_, draining);
  if (!next && !marks_.empty()) {
    next = std::move(marked);
    ++next->epoch;
  }
  if (!next) return;
  state_ = KeeperState::writing;
  std::string body = put_if_body(view.url.map_key(), map_value(*next), view.map_revision);
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
