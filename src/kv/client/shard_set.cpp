// ShardSet: see shard_set.hpp. Reactor thread only.
#include "kv/client/shard_set.hpp"

#include "kv/client/server_list.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <exception>
#include <map>
#include <utility>

namespace rkv::kv::client {

std::string_view to_string(ShardState s) noexcept {
  switch (s) {
    case ShardState::up: return "up";
    case ShardState::down: return "down";
    case ShardState::retry_due: return "retry_due";
    case ShardState::gone: return "gone";
    case ShardState::closed: return "closed";
  }
  return "?";
}

namespace {

void add_counters(ClientCounters& into, const ClientCounters& c) noexcept {
  for (const ClientCounterInfo& row : kClientCounterTable) {
    if (row.name.starts_with("max_")) {
      into.*row.member = std::max(into.*row.member, c.*row.member);
    } else {
      into.*row.member += c.*row.member;
    }
  }
}

bool conn_gone(ConnState cs) noexcept {
  switch (cs) {
    case ConnState::failed:
    case ConnState::disconnected:
    case ConnState::closing:
    case ConnState::closed:
      return true;
    case ConnState::connecting:
    case ConnState::accepted:
    case ConnState::established:
      return false;
  }
  return true;
}

}  // namespace

ShardSet::ShardSet(reactor::Reactor& reactor, const ClientOptions& options, ShardSetOptions shard_options)
    : reactor_(&reactor), options_(options), shard_options_(std::move(shard_options)) {
  if (shard_options_.read_from_backups) options_.backup_reads = true;
}

ShardSet::~ShardSet() { close(); }

std::unique_ptr<ShardSet> ShardSet::connect(reactor::Reactor& reactor, std::vector<proto::ServerAddr> servers,
                                            const ClientOptions& options, ShardSetOptions shard_options) {
  reactor.assert_owner_thread();
  if (servers.empty()) throw ConnectError(EINVAL, "no server given");
  std::unique_ptr<ShardSet> set(new ShardSet(reactor, options, std::move(shard_options)));
  set->shards_.reserve(servers.size());
  for (proto::ServerAddr& a : servers) {
    set->ids_.push_back(a.id);
    Shard s;
    s.addr = std::move(a);
    s.backoff = set->shard_options_.backoff_min;
    set->shards_.push_back(std::move(s));
  }
  if (set->shard_options_.cluster) set->map_ = set->shard_options_.cluster->map;
  set->place_live();
  for (Shard& s : set->shards_) {
    s.client = Client::connect(reactor, s.addr.host, s.addr.port, set->options_);  // throws: ~ShardSet closes the others
    s.max_value = s.client->server_max_value();
    s.connected_once = true;
  }
  if (set->shard_options_.cluster) {
    set->following_ = true;
    ShardSet* self = set.get();
    set->watch_ = std::make_unique<cluster::ClusterWatch>(
        reactor, *set->shard_options_.cluster, [self](const cluster::ClusterView& v) { self->on_view(v); });
    set->shard_options_.cluster.reset();  // the watch holds what it needs
  }
  return set;
}

std::optional<std::chrono::milliseconds> ShardSet::not_owner_pause(
    unsigned n, reactor::Reactor::Clock::time_point first) const noexcept {
  const auto bound = options_.op_timeout.count() > 0 ? options_.op_timeout : kNotOwnerRetryFor;
  if (reactor::Reactor::Clock::now() - first >= bound) return std::nullopt;
  return std::min(std::chrono::milliseconds(5) * (1u << std::min(n, 6u)), std::chrono::milliseconds(200));
}

bool ShardSet::place_again(Status st, bool idempotent) const noexcept {
  if (st == Status::not_owner) return true;
  return following_ && idempotent &&
         (st == Status::shard_down || st == Status::connection_failed || st == Status::moved);
}

std::size_t ShardSet::shard_of(std::string_view key) const noexcept {
  if (!map_slots_.empty()) {
    const std::size_t i = map_slots_[proto::shard_of(key, static_cast<std::uint32_t>(map_slots_.size()))];
    if (i != kNoSlot) return i;
  }
  if (shards_.size() == 1) return 0;
  if (live_ids_.empty()) return proto::place(key, ids_);  // every member left: some gone shard
  return live_slots_[proto::place(key, live_ids_)];
}

std::size_t ShardSet::read_shard_of(std::string_view key) const noexcept {
  if (!read_slots_.empty()) {
    const Readers& r = read_slots_[proto::shard_of(key, static_cast<std::uint32_t>(read_slots_.size()))];
    if (!r.ids.empty()) {
      const std::size_t i = r.slots[proto::place(key, r.ids)];
      if (shards_[i].state == ShardState::up) return i;
    }
  }
  return shard_of(key);
}

void ShardSet::place_live() {
  live_ids_.clear();
  live_slots_.clear();
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (shards_[i].state == ShardState::gone) continue;
    live_ids_.push_back(ids_[i]);
    live_slots_.push_back(i);
  }
  map_slots_.clear();
  read_slots_.clear();
  if (!map_) return;
  map_slots_.reserve(map_->shards.size());
  const auto slot_of = [&](const std::string& id) {
    const auto it = std::find(ids_.begin(), ids_.end(), id);
    const auto i = static_cast<std::size_t>(it - ids_.begin());
    return it != ids_.end() && shards_[i].state != ShardState::gone ? i : kNoSlot;
  };
  for (const cluster::ShardOwners& s : map_->shards) map_slots_.push_back(slot_of(s.owners.front()));
  if (!shard_options_.read_from_backups) return;
  read_slots_.resize(map_->shards.size());
  for (std::size_t k = 0; k < map_->shards.size(); ++k) {
    const cluster::ShardOwners& s = map_->shards[k];
    for (std::size_t o = 1; o < s.owners.size(); ++o) {  // the backups, if the map lists them in sync
      if (std::find(s.in_sync.begin(), s.in_sync.end(), s.owners[o]) == s.in_sync.end()) continue;
      if (const std::size_t i = slot_of(s.owners[o]); i != kNoSlot) {
        read_slots_[k].ids.push_back(s.owners[o]);
        read_slots_[k].slots.push_back(i);
      }
    }
  }
}

void ShardSet::on_view(const cluster::ClusterView& view) {
  reported_ = view;
  if (shard_options_.on_maintain_due) shard_options_.on_maintain_due();
}

bool ShardSet::apply_members() {
  if (!reported_) return false;
  const cluster::ClusterView view = std::move(*reported_);
  reported_.reset();
  std::vector<proto::ServerAddr> now;
  now.reserve(view.members.size());
  for (const auto& m : view.members) now.push_back(server_of(m));
  bool changed = view.map != map_;
  map_ = view.map;
  // A primary in the map: a member that left stays in use (it drains) until the map moved its shards.
  const std::map<std::string, std::uint32_t> primaries = map_ ? map_->primaries() : std::map<std::string, std::uint32_t>{};
  for (std::size_t i = 0; i < shards_.size(); ++i) {  // who left
    Shard& s = shards_[i];
    const bool member = std::any_of(now.begin(), now.end(), [&](const proto::ServerAddr& a) { return a.id == s.addr.id; });
    if (member || primaries.contains(s.addr.id) || s.state == ShardState::gone || s.state == ShardState::closed) continue;
    spdlog::info("client: server {} left the cluster", s.addr.id);
    s.state = ShardState::gone;
    s.retry.reset();
    s.failure = "it left the cluster";
    // Its ops in flight finish there (a leaving kvd serves until its clients
    // disconnected); maintain() drops the Client once none is pending.
    if (!s.client || s.client->pending() == 0 || conn_gone(s.client->state())) retire(s);
    changed = true;
  }
  for (proto::ServerAddr& a : now) {  // who joined (or came back)
    const auto it = std::find(ids_.begin(), ids_.end(), a.id);
    if (it != ids_.end()) {
      Shard& s = shards_[static_cast<std::size_t>(it - ids_.begin())];
      if (s.state != ShardState::gone) continue;
      s.addr = std::move(a);
      s.state = ShardState::retry_due;  // connects below, in this maintain()
      s.backoff = shard_options_.backoff_min;
      s.failure.clear();
      spdlog::info("client: server {} joined the cluster again", s.addr.id);
      changed = true;
      continue;
    }
    // The bound is on members at once (a static list's); slots of members
    // that left stay (a Shard each), so churn does not stop a client from
    // taking new members, which would make it place keys unlike the others.
    const auto live = static_cast<std::size_t>(std::count_if(
        shards_.begin(), shards_.end(), [](const Shard& sh) { return sh.state != ShardState::gone; }));
    if (live >= proto::kMaxServers) {
      spdlog::warn("client: server {} joined the cluster, but this client already has {} servers; not using it",
                   a.id, live);
      continue;
    }
    spdlog::info("client: server {} joined the cluster", a.id);
    ids_.push_back(a.id);
    Shard s;
    s.addr = std::move(a);
    s.state = ShardState::retry_due;
    s.backoff = shard_options_.backoff_min;
    shards_.push_back(std::move(s));
    changed = true;
  }
  if (changed) {
    ++membership_changes_;
    place_live();
  }
  return changed;
}

ShardState ShardSet::state(std::size_t i) const noexcept {
  assert_owner();
  return shards_[i].state;
}

Client* ShardSet::client(std::size_t i) const noexcept {
  assert_owner();
  return shards_[i].client.get();
}

std::uint64_t ShardSet::server_max_value(std::size_t i) const noexcept {
  assert_owner();
  return shards_[i].max_value;
}

std::string ShardSet::failure(std::size_t i) const {
  assert_owner();
  const Shard& s = shards_[i];
  if (s.client) return s.client->failure();
  return s.failure;
}

Status ShardSet::usable(std::size_t i) noexcept {
  assert_owner();
  Shard& s = shards_[i];
  switch (s.state) {
    case ShardState::up:
      if (s.client && !conn_gone(s.client->state())) return Status::ok;
      if (!sharded()) return Status::not_connected;
      mark_down(i);
      return Status::shard_down;
    case ShardState::down:
    case ShardState::retry_due:
      return sharded() ? Status::shard_down : Status::not_connected;
    case ShardState::gone:
      return Status::shard_down;
    case ShardState::closed:
      return Status::not_connected;
  }
  return Status::not_connected;
}

void ShardSet::mark_down(std::size_t i) noexcept {
  Shard& s = shards_[i];
  if (s.state != ShardState::up || closing_ || !sharded()) return;
  s.state = ShardState::down;
  ++shard_failures_;
  try {
    s.failure = s.client ? s.client->failure() : std::string();
    spdlog::warn("client: shard {} is down ({}); reconnecting in {} ms", s.addr.id,
                 s.failure.empty() ? "connection failed" : s.failure, s.backoff.count());
    start_retry_timer(i);
  } catch (const std::exception& e) {
    // No timer: the next maintain() retries at once.
    spdlog::error("client: shard {}: cannot start its retry timer: {}", s.addr.id, e.what());
    s.state = ShardState::retry_due;
  }
}

void ShardSet::start_retry_timer(std::size_t i) {
  Shard& s = shards_[i];
  s.retry_at = reactor::Reactor::now() + s.backoff;
  s.retry = reactor_->after(s.backoff, [this, i] {
    Shard& sh = shards_[i];
    if (sh.state != ShardState::down) return;
    sh.state = ShardState::retry_due;
    if (shard_options_.on_maintain_due) shard_options_.on_maintain_due();
  });
}

Callback ShardSet::wrap(std::size_t i, Callback cb) {
  if (!sharded()) return cb;
  return [this, i, cb = std::move(cb)](Status st, bool found, std::span<const std::byte> v) {
    if (!closing_ && (st == Status::connection_failed || st == Status::not_connected ||
                      (st == Status::closed && shards_[i].state != ShardState::up))) {
      mark_down(i);
      st = Status::shard_down;
    }
    cb(st, found, v);
  };
}

Status ShardSet::usable_checked(std::size_t shard) noexcept {
  assert_owner();
  if (shard >= shards_.size()) return Status::invalid_use;
  return usable(shard);
}

Status ShardSet::set(std::size_t shard, std::string_view key, std::span<const std::byte> value, Callback cb,
                     Path* path, std::uint64_t ttl_ms) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->set(key, value, wrap(shard, std::move(cb)), path, ttl_ms);
}

Status ShardSet::get(std::size_t shard, std::string_view key, Callback cb) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->get(key, wrap(shard, std::move(cb)));
}

Status ShardSet::get_into(std::size_t shard, std::string_view key, std::span<std::byte> into, Callback cb) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->get_into(key, into, wrap(shard, std::move(cb)));
}

Status ShardSet::del(std::size_t shard, std::string_view key, Callback cb) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->del(key, wrap(shard, std::move(cb)));
}

Status ShardSet::expire(std::size_t shard, std::string_view key, std::uint64_t ttl_ms, Callback cb) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->expire(key, ttl_ms, wrap(shard, std::move(cb)));
}

Status ShardSet::ttl(std::size_t shard, std::string_view key, Callback cb) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->ttl(key, wrap(shard, std::move(cb)));
}

Status ShardSet::call(std::size_t shard, std::uint16_t op, std::span<const std::byte> request, Callback cb,
                      Path* path) {
  if (const Status u = usable_checked(shard); u != Status::ok) return u;
  return shards_[shard].client->call(op, request, wrap(shard, std::move(cb)), path);
}

void ShardSet::forget(std::span<const std::byte> bytes) noexcept {
  assert_owner();
  for (Shard& s : shards_) {
    if (s.client) s.client->forget(bytes);
  }
}

void ShardSet::retire(Shard& s) noexcept {
  // Detached before it closes: closing runs the loop (Client::teardown waits
  // for DISCONNECTED), and a callback there may retire this shard again
  // (close() from a timer, as kvload's stall check does). That one finds no
  // client, and so cannot free the one being closed here.
  // Inside a callback close() only disconnects (the loop cannot run there to
  // wait for DISCONNECTED), so the Client is parked, not destroyed.
  std::unique_ptr<Client> c = std::move(s.client);
  if (!c) return;
  c->close();  // pending ops complete (wrap(): shard_down)
  if (reactor_->state() != reactor::ReactorState::kIdle) {
    s.parked.push_back(std::move(c));
    return;
  }
  account(s, *c);
}

void ShardSet::account(Shard& s, const Client& c) noexcept {
  add_counters(s.past, c.counters());
  try {
    if (s.failure.empty()) s.failure = c.failure();
  } catch (...) {
  }
}

void ShardSet::release_parked() noexcept {
  if (reactor_->state() != reactor::ReactorState::kIdle) return;
  // By index: a close() runs the loop, whose callbacks may park more.
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    while (!shards_[i].parked.empty()) {
      const std::unique_ptr<Client> c = std::move(shards_[i].parked.back());
      shards_[i].parked.pop_back();
      c->close();  // waits for the DISCONNECTED its close() in a callback asked for
      account(shards_[i], *c);
    }
  }
}

void ShardSet::try_reconnect(std::size_t i) {
  if (closing_) return;
  Shard& s = shards_[i];
  ClientOptions o = options_;
  o.resolve_timeout = shard_options_.reconnect_timeout;
  o.connect_timeout = shard_options_.reconnect_timeout;
  try {
    std::unique_ptr<Client> c = Client::connect(*reactor_, s.addr.host, s.addr.port, o);
    if (closing_) {  // close() ran in a callback of the connect's loop
      c->close();
      return;
    }
    s.client = std::move(c);
    s.max_value = s.client->server_max_value();
    s.state = ShardState::up;
    s.backoff = shard_options_.backoff_min;
    const bool first = !s.connected_once;
    s.connected_once = true;
    s.failure.clear();
    ++reconnects_;
    spdlog::info("client: shard {} is {}", s.addr.id, first ? "up" : "back");
  } catch (const ConnectError& e) {
    if (closing_) return;
    s.failure = e.what();
    s.backoff = std::min(s.backoff * 2, shard_options_.backoff_max);
    s.state = ShardState::down;
    SPDLOG_DEBUG("client: shard {}: reconnect failed: {}; next in {} ms", s.addr.id, e.what(), s.backoff.count());
    start_retry_timer(i);
  }
}

bool ShardSet::maintain() {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return false;
  release_parked();
  if (closing_ || !sharded()) return false;
  bool changed = apply_members();
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    Shard& s = shards_[i];
    switch (s.state) {
      case ShardState::up:
        if (s.client && conn_gone(s.client->state())) {
          mark_down(i);
          retire(s);
          changed = true;
        }
        break;
      case ShardState::down:
        if (s.client) {
          retire(s);
          changed = true;
        }
        // Its timer fires only while the reactor runs; a caller that only
        // retries this shard's keys (refused at once) does not run it.
        if (reactor::Reactor::now() >= s.retry_at) {
          s.retry.reset();
          try_reconnect(i);
          changed = true;
        }
        break;
      case ShardState::retry_due:
        retire(s);
        try_reconnect(i);
        changed = true;
        break;
      case ShardState::gone:
        if (s.client && (s.client->pending() == 0 || conn_gone(s.client->state()))) {
          retire(s);  // the last of its ops finished
          changed = true;
        }
        break;
      case ShardState::closed:
        break;
    }
  }
  return changed;
}

void ShardSet::close() noexcept {
  assert_owner();
  closing_ = true;
  watch_.reset();
  for (Shard& s : shards_) {
    s.retry.reset();
    retire(s);
    s.state = ShardState::closed;
  }
  release_parked();
}

ClientCounters ShardSet::counters() const noexcept {
  assert_owner();
  ClientCounters sum{};
  for (const Shard& s : shards_) {
    add_counters(sum, s.past);
    if (s.client) add_counters(sum, s.client->counters());
    for (const auto& c : s.parked) add_counters(sum, c->counters());
  }
  return sum;
}

}  // namespace rkv::kv::client
