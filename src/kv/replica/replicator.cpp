// Replicator: see replicator.hpp.

#include "kv/replica/replicator.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <algorithm>

#include "proto/placement.hpp"

namespace rkv::kv::replica {

using store::DurableAck;
using store::ExpireAt;

std::optional<AckMode> ack_mode_from(std::string_view text) noexcept {
  for (const AckMode a : {AckMode::replicas, AckMode::primary}) {
    if (text == to_string(a)) return a;
  }
  return std::nullopt;
}

Replicator::Replicator(reactor::Reactor& reactor, const store::Store& store, store::Durability* inner, AckMode ack,
                       client::ClientOptions options)
    : reactor_(&reactor), inner_(inner), ack_(ack), store_(&store) {
  options.poll = std::chrono::microseconds(0);  // the thread shares the cores with the server: no spinning
  done_watch_ = reactor.watch(done_fd_.fd(), EPOLLIN, [this](std::uint32_t) { on_done(); });
  shipper_ = std::make_unique<Shipper>(std::move(options), done_fd_);
}

Replicator::~Replicator() = default;

std::uint32_t Replicator::link_of(const Backup& b) {
  const auto [it, added] = link_ids_.try_emplace(b.id, static_cast<std::uint32_t>(link_ids_.size()));
  return it->second;
}

void Replicator::set_backups(std::uint64_t map_epoch, std::vector<ShardBackups> shards) {
  if (map_epoch == map_epoch_ && shards == shards_) return;
  map_epoch_ = map_epoch;
  Config config;
  for (std::uint32_t s = 0; s < shards.size(); ++s) {
    if (shards[s].epoch == 0) continue;
    for (const Backup& b : shards[s].backups) {
      LinkConfig& lc = config.links[link_of(b)];
      lc.member = b.id;
      lc.host = b.host;
      lc.port = b.port;
      lc.lease = b.lease;
      lc.backs[s] = shards[s].epoch;
    }
  }
  flush();  // records made under the old map go first
  std::vector<ShardBackups> before = std::exchange(shards_, std::move(shards));
  // The replies that wait for backups the map no longer names for their
  // shard stop waiting for them; a write whose shard this member no longer
  // is the primary of at its epoch fails.
  std::vector<std::uint64_t> touched;
  for (auto& [id, w] : writes_) {
    if (w.awaited.empty()) continue;
    const bool still = w.shard < shards_.size() && shards_[w.shard].epoch == w.epoch;
    if (!still) {
      fail(w, proto::Status::moved);
      w.awaited.clear();
    } else {
      const auto& now = config.links;
      const std::uint32_t shard = w.shard;  // (clang before 16 cannot capture a structured binding)
      std::erase_if(w.awaited, [&](std::uint32_t link) {
        const auto it = now.find(link);
        return it == now.end() || !it->second.backs.contains(shard);
      });
    }
    touched.push_back(id);
  }
  shipper_->post(std::move(config));
  for (const std::uint64_t id : touched) settle(id);
  plan_catch_up(before);
}

void Replicator::plan_catch_up(const std::vector<ShardBackups>& before) {
  const auto backed_before = [&](std::uint32_t s, const Backup& b) {
    if (s >= before.size() || before.size() != shards_.size() || before[s].epoch != shards_[s].epoch) return false;
    const auto& old = before[s].backups;
    return std::any_of(old.begin(), old.end(), [&](const Backup& o) { return o.id == b.id; });
  };
  // What is under way keeps only the pairs the map still has.
  for (auto it = catch_up_.begin(); it != catch_up_.end();) {
    const auto s = it->first;
    const bool moved = s >= shards_.size() || before.size() != shards_.size() || shards_[s].epoch == 0 ||
                       before[s].epoch != shards_[s].epoch;
    std::erase_if(it->second, [&](std::uint32_t link) {
      if (moved) return true;  // (its new pairs, if any, are added below)
      const auto& now = shards_[s].backups;
      return std::none_of(now.begin(), now.end(), [&](const Backup& b) { return link_of(b) == link; });
    });
    it = it->second.empty() ? catch_up_.erase(it) : std::next(it);
  }
  // Ended walks' pairs the map no longer has (another epoch, or not this backup) are not reported.
  std::erase_if(syncing_, [&](const Syncing& p) {
    if (p.shard >= shards_.size() || shards_[p.shard].epoch != p.epoch) return true;
    const auto& now = shards_[p.shard].backups;
    return std::none_of(now.begin(), now.end(), [&](const Backup& b) { return b.id == p.backup; });
  });
  bool added = false;
  for (std::uint32_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s].epoch == 0) continue;
    for (const Backup& b : shards_[s].backups) {
      if (backed_before(s, b)) continue;
      catch_up_[s].push_back(link_of(b));
      added = true;
    }
  }
  if (!added) return;
  catch_up_cursor_ = {};  // the new pairs' keys may be anywhere: from the start
  spdlog::info("replica: catching up {} (shard, backup) pair(s)", catching_up());
  if (!catch_up_next_.pending()) catch_up_step();
}

std::size_t Replicator::catching_up() const noexcept {
  std::size_t n = 0;
  for (const auto& [s, links] : catch_up_) n += links.size();
  return n;
}

void Replicator::catch_up_step() {
  catch_up_next_ = reactor::Timer();
  if (catch_up_.empty() || catch_up_in_flight_ >= kCatchUpWindow) return;  // on_done() resumes it
  const auto shards = static_cast<std::uint32_t>(shards_.size());
  const ExpireAt now = store::wall_ms();
  bool done = false;
  try {
    done = store_->visit(catch_up_cursor_, kCatchUpSlots, [&](std::string_view key, const store::Store::Lookup& e) {
      if (e.expire_at != store::kNoExpiry && e.expire_at <= now) return;
      const std::uint32_t s = proto::shard_of(key, shards);
      const auto it = catch_up_.find(s);
      if (it == catch_up_.end()) return;
      Write& w = queue(proto::Opcode::set, key, e.value, e.large, e.expire_at, s, it->second);
      w.catch_up = true;
      catch_up_in_flight_ += w.ships;
      catch_up_records_ += w.ships;
    });
  } catch (const std::bad_alloc&) {
    spdlog::error("replica: out of memory during catch-up; trying again in 1 s");
    flush();
    catch_up_next_ = reactor_->after(std::chrono::seconds(1), [this] { catch_up_step(); });
    return;
  }
  flush();
  if (done) {
    ++catch_ups_done_;
    spdlog::info("replica: walked {} (shard, backup) pair(s); each is in sync once its records are applied",
                 catching_up());
    for (const auto& [s, links] : catch_up_) {
      for (const std::uint32_t link : links) {
        const auto b = std::find_if(shards_[s].backups.begin(), shards_[s].backups.end(),
                                    [&](const Backup& x) { return link_of(x) == link; });
        if (b != shards_[s].backups.end()) syncing_.push_back({s, shards_[s].epoch, link, b->id, next_write_, false});
      }
    }
    catch_up_.clear();
    report_next_ = reactor_->after(std::chrono::nanoseconds(0), [this] { report_in_sync(); });  // never from set_backups
    return;
  }
  catch_up_next_ = reactor_->after(std::chrono::nanoseconds(0), [this] { catch_up_step(); });
}

Replicator::Write& Replicator::queue(proto::Opcode op, std::string_view key, std::string_view value,
                                     const store::LargeRef& large, ExpireAt expire_at, std::uint32_t shard,
                                     const std::vector<std::uint32_t>& links) {
  const std::uint64_t id = next_write_++;
  Write& w = writes_[id];
  w.shard = shard;
  w.epoch = shards_[shard].epoch;
  w.large = large;
  std::uint64_t ttl_ms = 0;
  if (expire_at != store::kNoExpiry) ttl_ms = static_cast<std::uint64_t>(std::max<ExpireAt>(1, expire_at - store::wall_ms()));
  for (const std::uint32_t link : links) {
    Ship s;
    s.write = id;
    s.link = link;
    s.shard = shard;
    s.epoch = w.epoch;
    s.op = op;
    s.key = key;
    if (large) {
      s.large = large->bytes;
    } else {
      s.value = value;
    }
    s.ttl_ms = ttl_ms;
    outbox_.push_back(std::move(s));
    ++w.ships;
    ++shipped_;
  }
  w.id = id;
  return w;
}

DurableAck Replicator::ship(proto::Opcode op, std::string_view key, std::string_view value,
                            const store::LargeRef& large, ExpireAt expire_at, DurableAck inner,
                            std::uint64_t conn_token, std::uint32_t wait, bool reply) noexcept {
  if (shards_.empty()) return inner;
  const std::uint32_t shard = proto::shard_of(key, static_cast<std::uint32_t>(shards_.size()));
  const ShardBackups& sb = shards_[shard];
  if (sb.epoch == 0 || sb.backups.empty()) return inner;
  try {
    std::vector<std::uint32_t> links;
    links.reserve(sb.backups.size());
    for (const Backup& b : sb.backups) links.push_back(link_of(b));
    Write& w = queue(op, key, value, large, expire_at, shard, links);
    if (!reply || ack_ != AckMode::replicas || inner == DurableAck::failed) return inner;
    if (inner == DurableAck::later) inner_waits_[{conn_token, wait}] = w.id;
    w.awaited = std::move(links);
    w.replying = true;
    w.inner_waiting = inner == DurableAck::later;
    w.conn_token = conn_token;
    w.wait = wait;
    return DurableAck::later;
  } catch (const std::bad_alloc&) {
    // Its backups may not get it: never acknowledged (the log's own late
    // answer then finds no waiting request and is dropped by its owner).
    ++failed_writes_;
    return DurableAck::failed;
  }
}

DurableAck Replicator::record_set(std::string_view key, std::string_view value, const store::LargeRef& large,
                                  ExpireAt expire_at, std::uint64_t conn_token, std::uint32_t wait) noexcept {
  const DurableAck inner =
      inner_ != nullptr ? inner_->record_set(key, value, large, expire_at, conn_token, wait) : DurableAck::now;
  return ship(proto::Opcode::set, key, value, large, expire_at, inner, conn_token, wait, true);
}

DurableAck Replicator::record_expire(std::string_view key, ExpireAt expire_at, std::uint64_t conn_token,
                                     std::uint32_t wait) noexcept {
  const DurableAck inner =
      inner_ != nullptr ? inner_->record_expire(key, expire_at, conn_token, wait) : DurableAck::now;
  return ship(proto::Opcode::expire, key, {}, {}, expire_at, inner, conn_token, wait, true);
}

DurableAck Replicator::record_del(std::string_view key, std::uint64_t conn_token, std::uint32_t wait) noexcept {
  const DurableAck inner = inner_ != nullptr ? inner_->record_del(key, conn_token, wait) : DurableAck::now;
  return ship(proto::Opcode::del, key, {}, {}, store::kNoExpiry, inner, conn_token, wait, true);
}

void Replicator::record_eviction(std::string_view key) noexcept {
  if (inner_ != nullptr) inner_->record_eviction(key);
  // A failure (out of memory) leaves the key on the backups until they evict it themselves.
  (void)ship(proto::Opcode::del, key, {}, {}, store::kNoExpiry, DurableAck::now, 0, 0, false);
}

void Replicator::flush() noexcept {
  if (inner_ != nullptr) inner_->flush();
  if (outbox_.empty()) return;
  try {
    shipper_->post(outbox_);
  } catch (const std::bad_alloc&) {
    // They never reach a backup: their writes fail, as if the backups had dropped them.
    spdlog::error("replica: out of memory handing {} record(s) to the shipping thread", outbox_.size());
    std::vector<Ship> lost = std::move(outbox_);
    outbox_.clear();
    for (const Ship& sh : lost) {
      if (const auto w = writes_.find(sh.write); w != writes_.end()) fail(w->second, proto::Status::io_error);
      ship_ended({sh.write, sh.link, false});
    }
  }
}

void Replicator::on_inner_durable(std::uint64_t conn_token, std::uint32_t wait, bool ok) noexcept {
  const auto it = inner_waits_.find({conn_token, wait});
  if (it == inner_waits_.end()) {
    if (sink_) sink_(conn_token, wait, ok ? proto::Status::ok : proto::Status::io_error);  // a write no backup waits for
    return;
  }
  const std::uint64_t id = it->second;
  inner_waits_.erase(it);
  const auto w = writes_.find(id);
  if (w == writes_.end()) return;
  w->second.inner_waiting = false;
  if (!ok) fail(w->second, proto::Status::io_error);
  settle(id);
}

void Replicator::report_in_sync() {
  if (syncing_.empty()) return;
  std::uint64_t oldest = next_write_;  // the oldest write not over
  for (const auto& [id, w] : writes_) oldest = std::min(oldest, id);
  std::vector<Syncing> ready;
  std::erase_if(syncing_, [&](Syncing& p) {
    if (!p.lost && p.barrier > oldest) return false;
    if (!p.lost) ready.push_back(std::move(p));
    return true;
  });
  if (ready.empty()) return;
  spdlog::info("replica: {} (shard, backup) pair(s) in sync", ready.size());
  in_sync_reports_ += ready.size();
  for (const Syncing& p : ready) {
    if (on_in_sync_) on_in_sync_(p.shard, p.backup, p.epoch);
  }
}

void Replicator::probe(const Backup& member) {
  shipper_->post(Probe{member.id, member.host, member.port, member.lease});
}

void Replicator::on_done() {
  done_fd_.consume();
  for (const ShipDone& d : shipper_->take_done()) ship_ended(d);
  for (const MemberGone& g : shipper_->take_gone()) {
    if (on_member_gone_) on_member_gone_(g.member, g.lease);
  }
  report_in_sync();
  if (!catch_up_.empty() && !catch_up_next_.pending() && catch_up_in_flight_ < kCatchUpWindow / 2) catch_up_step();
}

void Replicator::ship_ended(const ShipDone& d) noexcept {
  const auto it = writes_.find(d.write);
  if (it == writes_.end()) return;
  Write& w = it->second;
  --w.ships;
  if (w.catch_up) --catch_up_in_flight_;
  if (!d.applied) {  // that backup may lack the record: its pair is not reported in sync
    for (Syncing& p : syncing_) p.lost = p.lost || (p.shard == w.shard && p.link == d.link);
  }
  if (const auto a = std::find(w.awaited.begin(), w.awaited.end(), d.link); a != w.awaited.end()) {
    // Not applied while the reply still waits for it (the thread's map says
    // the backup no longer takes the shard at this epoch, or the record
    // never reached the thread): the write may lack a copy the map asks for
    // (set_backups() normally settled it first).
    if (!d.applied) fail(w, proto::Status::moved);
    w.awaited.erase(a);
  }
  settle(d.write);
}

void Replicator::fail(Write& w, proto::Status status) noexcept {
  if (w.status == proto::Status::ok) w.status = status;
}

void Replicator::settle(std::uint64_t id) {
  const auto it = writes_.find(id);
  if (it == writes_.end()) return;
  Write& w = it->second;
  if (w.replying && !w.inner_waiting && w.awaited.empty()) {
    w.replying = false;
    if (w.status != proto::Status::ok) ++failed_writes_;
    if (sink_) sink_(w.conn_token, w.wait, w.status);
  }
  if (!w.replying && w.ships == 0) writes_.erase(it);  // the LargeRef goes here, on the server's thread
}

void Replicator::append_stats(store::StatRows& rows) const {
  if (inner_ != nullptr) inner_->append_stats(rows);
  const ShipperCounters c = shipper_->counters();
  rows.insert(rows.end(), {
      {"repl_map_epoch", map_epoch_, store::StatKind::gauge, "epoch of the shard map this member replicates by"},
      {"repl_records", shipped_, store::StatKind::counter, "replication records made for backups (one per backup)"},
      {"repl_sent", c.sent, store::StatKind::counter, "replication records sent to backups (resends included)"},
      {"repl_applied", c.applied, store::StatKind::counter, "replication records a backup applied"},
      {"repl_resends", c.refused, store::StatKind::counter, "replication records a backup refused or lost, sent again"},
      {"repl_dropped", c.dropped, store::StatKind::counter, "replication records given up: the map moved the shard or its backup"},
      {"repl_connects", c.connects, store::StatKind::counter, "connections made to backups"},
      {"repl_connect_failures", c.connect_failures, store::StatKind::counter, "failed connection attempts to backups"},
      {"repl_members_gone", c.gone, store::StatKind::counter,
       "connection attempts (to a backup, or a probe) a member's node refused as nothing listens on its port"},
      {"repl_probes", c.probes, store::StatKind::counter,
       "connection attempts to a primary whose replication connection into this member dropped"},
      {"repl_failed_writes", failed_writes_, store::StatKind::counter, "writes replication did not acknowledge: answered moved (the shard moved before its backups had them) or io_error (the log failed, or out of memory)"},
      {"repl_writes_in_flight", writes_.size(), store::StatKind::gauge, "writes with a replication record not yet applied or dropped"},
      {"repl_catch_up_records", catch_up_records_, store::StatKind::counter, "records sent to catch a new backup up (one per key and backup)"},
      {"repl_catch_ups", catch_ups_done_, store::StatKind::counter, "catch-up walks of the store completed"},
      {"repl_catching_up", catching_up(), store::StatKind::gauge, "(shard, backup) pairs whose catch-up walk has not ended"},
      {"repl_catch_up_in_flight", catch_up_in_flight_, store::StatKind::gauge, "catch-up records not yet applied or dropped"},
      {"repl_in_sync_reports", in_sync_reports_, store::StatKind::counter, "(shard, backup) pairs found in sync after a catch-up, for the map"},
  });
}

void Replicator::append_histograms(std::string& out) const {
  if (inner_ != nullptr) inner_->append_histograms(out);
}

}  // namespace rkv::kv::replica
