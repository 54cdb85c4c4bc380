// Server: see server.hpp. Reactor thread only.
#include "kv/server/server.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <malloc.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>
#include <variant>

#include "proto/connect_params.hpp"
#include "proto/copy.hpp"
#include "proto/index_format.hpp"
#include "verbs/error.hpp"

namespace rkv::kv::server {

using store::Durability;
using conn::Endpoint;
using conn::EndpointConfig;
using store::IndexStats;
using conn::PdRegistrar;
using store::Store;

static_assert(reactor::SlotKey::kGenerationBits <= verbs::WrId::kGenerationBits,
              "a connection's WrIds carry its slot generation");

Server::Server(reactor::Reactor& reactor, Store& store, ServerOptions options, Durability* durability)
    : reactor_(&reactor),
      store_(&store),
      options_(std::move(options)),
      durability_(durability),
      eviction_log_(store, durability),
      handlers_(&reactor),
      conns_(std::max<std::uint32_t>(1, options_.max_clients)) {
  polled_.reserve(std::min<std::uint32_t>(options_.max_clients, 1024));
  if (options_.credits == 0) throw std::invalid_argument("credits must be at least 1");
  if (options_.buf_size < proto::kMaxEagerSetSize || options_.buf_size % 64 != 0) {
    throw std::invalid_argument(fmt::format("buffer size must be a multiple of 64 and at least {}",
                                            proto::kMaxEagerSetSize));
  }
  if (options_.max_clients == 0) throw std::invalid_argument("max clients must be at least 1");
  if (options_.index_buckets != 0 &&
      (!std::has_single_bit(options_.index_buckets) || options_.index_buckets > proto::kMaxIndexBuckets)) {
    throw std::invalid_argument(fmt::format("index buckets must be 0 or a power of two up to {}",
                                            proto::kMaxIndexBuckets));
  }
  if (const auto& budget = store_->budget(); options_.index_buckets != 0 && !budget->unlimited()) {
    const std::size_t index_bytes = proto::index_region_bytes(options_.index_buckets);
    if (index_bytes >= budget->available()) {
      throw std::invalid_argument(fmt::format(
          "the one-sided index ({} buckets, {} bytes) leaves nothing of the memory limit ({} bytes, {} in use): "
          "raise --max-memory or lower --index-buckets",
          options_.index_buckets, index_bytes, budget->limit(), budget->used()));
    }
  }
  if (const auto& budget = store_->budget(); !budget->unlimited()) {
    grant_budget_.limit = budget->limit() / ServerOptions::kGrantShare;
  }
  if (options_.max_grants > conn::Link::kMaxWindows) {
    throw std::invalid_argument(fmt::format("max grants must be at most {}", conn::Link::kMaxWindows));
  }
  if (!options_.auth_token.empty()) auth_ = proto::auth_digest(options_.auth_token);
  listener_.emplace(events_, kListenerToken);
  listener_->bind(options_.bind_address, options_.port);
  listener_->listen(options_.backlog);
  port_ = listener_->local_port();
  if (listener_->has_device()) make_pd(*listener_);
  events_watch_ = reactor_->watch(events_.fd(), EPOLLIN, [this](std::uint32_t) { on_cm_readable(); });
  if (options_.poll.count() < 0) throw std::invalid_argument("poll budget must not be negative");
  reactor::PollerOptions po;
  po.spin = options_.poll;
  po.before_sleep = [this] { return arm_listed(); };
  poller_ = reactor_->add_poller([this] { return poll_listed(); }, std::move(po));
  if (options_.transfer_timeout.count() <= 0) throw std::invalid_argument("transfer timeout must be positive");
  arm_transfer_check();
  arm_expiry();  // recovered keys may carry TTLs
  spdlog::info("server: listening on {}:{} (credits {} to {}, buffers {} B, max clients {})", options_.bind_address,
               port_, initial_credits(), options_.credits, options_.buf_size, options_.max_clients);
  if (options_.metrics) {
    metrics_ = std::make_unique<MetricsEndpoint>(
        *reactor_, *options_.metrics, [this] {
          std::string text = store::format_prometheus(stats_rows()) + latency_.prometheus();
          if (durability_ != nullptr) durability_->append_histograms(text);
          return text;
        },
        [this] { return healthy(); });
  }
}

Server::EvictionLog::EvictionLog(Store& store, Durability* durability) : store_(&store) {
  if (durability != nullptr) store.on_evict([durability](std::string_view k) { durability->record_eviction(k); });
}

Server::EvictionLog::~EvictionLog() { store_->on_evict(nullptr); }

Server::~Server() {
  reactor_->assert_owner_thread();
  metrics_.reset();  // no scrape reads the members below from here on
  poller_.reset();
  store_->detach();  // the index and the arenas go with the Server
  store_->budget()->release(index_charged_);
  events_watch_.reset();
  device_watch_.reset();
  // Each Conn dies watch, deadline, Endpoint (the QP; it disconnects the
  // cm_id if still connected), then ServerConn (see Conn).
  conns_.clear();
}

void Server::make_pd(const verbs::CmId& id) {
  pd_ = std::make_shared<const verbs::ProtectionDomain>(id);
  device_events_.emplace(*pd_);
  device_watch_ =
      reactor_->watch(device_events_->fd(), EPOLLIN, [this](std::uint32_t ev) { on_device_readable(ev); });
  registrar_ = std::make_unique<PdRegistrar>(pd_);
  buffer_registrar_ = std::make_unique<PdRegistrar>(pd_);
  // Chunks of kBufferChunk buffers; at most what every client could hold at once.
  const auto chunks = [](std::uint64_t buffers) {
    return static_cast<std::uint32_t>((buffers + kBufferChunk - 1) / kBufferChunk + 1);
  };
  recv_buffers_.emplace(kBufferChunk, options_.buf_size, *buffer_registrar_, verbs::Access::local_write,
                        chunks(std::uint64_t{options_.max_clients} * options_.credits));
  send_buffers_.emplace(kBufferChunk, options_.buf_size, *buffer_registrar_, verbs::Access::none,
                        chunks(std::uint64_t{options_.max_clients} * options_.max_send_buffers));
  arena_ = std::make_unique<Arena>(*registrar_, options_.arena, store_->budget());
  store_->attach_large_blocks([a = arena_.get()](std::size_t n) { return a->allocate(n); },
                              [a = arena_.get()](std::size_t n) { return a->block_size(n); });
  if (options_.index_buckets != 0) {
    small_arena_ = std::make_unique<Arena>(*registrar_, options_.small_arena, store_->budget());
    index_ = std::make_unique<IndexRegion>(*registrar_, options_.index_buckets);
    index_charged_ = index_->bytes();
    store_->budget()->charge(index_charged_);  // checked against the limit in the constructor
    store_->attach_index(index_->index(), [a = small_arena_.get()](std::size_t n) { return a->allocate(n); },
                         [a = small_arena_.get()](std::size_t n) { return a->block_size(n); });
    spdlog::info("server: one-sided GET index: {} buckets, {} bytes (remote_read)", options_.index_buckets,
                 index_->bytes());
  }
  migrate_large_values();
}

// The device's asynchronous events: its state for /health (healthy()).
void Server::on_device_readable(std::uint32_t ready) noexcept {
  if ((ready & (EPOLLERR | EPOLLHUP)) != 0) {
    // The device's event file is gone (a removed device): no event will come
    // again, and a level-triggered error would wake the loop forever.
    device_watch_.reset();
    if (device_ != DeviceState::failed) {
      device_ = DeviceState::failed;
      spdlog::error("server: the RDMA device's event fd failed; /health answers 503 from now on: restart kvd");
    }
    return;
  }
  while (const auto e = device_events_->take()) {
    ++counters_.device_events;
    switch (e->type) {
      case verbs::DeviceEventType::port_active:
        if (device_ == DeviceState::port_down) {
          device_ = DeviceState::usable;
          spdlog::warn("server: RDMA port {} active again ({}); /health answers 200", e->port, e->name);
        }
        break;
      case verbs::DeviceEventType::port_error:
        if (device_ == DeviceState::usable) {
          device_ = DeviceState::port_down;
          spdlog::error("server: RDMA port {} down ({}); /health answers 503 until it is active", e->port, e->name);
        }
        break;
      case verbs::DeviceEventType::device_fatal:
        if (device_ != DeviceState::failed) {
          device_ = DeviceState::failed;
          spdlog::error("server: the RDMA device failed ({}); /health answers 503 from now on: restart kvd", e->name);
        }
        break;
      case verbs::DeviceEventType::other:
        SPDLOG_DEBUG("server: device event {}", e->name);
        break;
    }
  }
}

// Values loaded before the PD existed (recovery: docs/durability.md) are
// plain strings. Each is kept again as the Store keeps a value of its size
// (Store::put, as every SET is): large ones move into the arena so the
// rendezvous path can serve them; with the index on, small ones land in
// index blocks so one-sided readers find them (not ask-by-message entries).
// Nothing is recorded: they came from the log.
void Server::migrate_large_values() noexcept {
  try {
    std::vector<std::string> keys;
    store_->for_each([&keys, this](std::string_view k, const Store::Lookup& v) {
      if (!v.large && (store_->indexed() || !proto::eager_fits(k.size(), v.value.size()))) keys.emplace_back(k);
    });
    std::size_t moved = 0, bytes = 0, republished = 0;
    for (const auto& k : keys) {
      const auto hit = store_->peek(k);
      if (!hit.found) continue;  // evicted to make room for one moved before it
      const std::string value(hit.value);  // a copy: the put below replaces what it views
      switch (store_->put(k, value, hit.expire_at)) {  // on no_memory the string it would replace stays
        case Store::Kept::small: ++republished; break;
        case Store::Kept::large:
          bytes += value.size();
          ++moved;
          break;
        case Store::Kept::no_memory:
          if (!proto::eager_fits(k.size(), value.size())) {  // a small one stays as it was: GET by message
            spdlog::error("server: no registered memory (arena or memory limit) for the recovered value of {} "
                          "({} bytes): rendezvous GETs of it fail", k, value.size());
          }
          break;
      }
    }
    if (moved + republished > 0) {
      spdlog::info("server: moved {} large values ({} bytes) into registered memory; {} small values into the "
                   "index",
                   moved, bytes, republished);
    }
  } catch (const std::bad_alloc&) {
    spdlog::error("server: out of memory moving recovered values into registered memory");
  }
}

ServerCounters Server::counters() const noexcept {
  ServerCounters c = counters_;
  c.connections = conns_.live();
  for (std::uint32_t i = 0; i < conns_.slot_count(); ++i) {
    const auto key = conns_.key_at(i);
    const Conn* conn = key ? conns_.find(*key) : nullptr;
    if (conn == nullptr || !conn->sc) continue;
    c.conn_bytes += conn->sc->buffer_bytes();
    c.transfers += conn->sc->transfers_in_flight();
    c.pinned += conn->sc->pins();
    c.durable_waits += conn->sc->durable_waits();
  }
  if (recv_buffers_) c.conn_pool_bytes = recv_buffers_->chunk_bytes() + send_buffers_->chunk_bytes();
  return c;
}

ServerStats Server::stats() const noexcept {
  reactor_->assert_owner_thread();
  return {counters(), store_->size(), store_->bytes()};
}

// The sanitizer runtime's live-heap count, where one is linked (ASan: bytes
// malloc'd and not yet freed; memory in ASan's quarantine is freed). Weak: null
// in a build without a sanitizer, which counts with glibc's mallinfo2.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

namespace {
// Bytes the process allocated and has not freed, as its allocator counts
// them: what a leak grows, where RSS also moves with fragmentation, the
// allocator's caches and (under ASan) its quarantine.
std::uint64_t heap_bytes() noexcept {
  if (__sanitizer_get_current_allocated_bytes != nullptr) return __sanitizer_get_current_allocated_bytes();
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;  // in use in the arenas + in mmapped chunks
}

// Resident set size of this process (/proc/self/statm), 0 if unreadable.
std::uint64_t resident_bytes() noexcept {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  const long page = ::sysconf(_SC_PAGESIZE);
  return n == 2 && page > 0 ? resident * static_cast<std::uint64_t>(page) : 0;
}
}  // namespace

store::StatRows Server::stats_rows() const {
  reactor_->assert_owner_thread();
  store::StatRows rows;
  const auto up = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_);
  rows.push_back({"uptime_seconds", static_cast<std::uint64_t>(up.count()), store::StatKind::gauge, "seconds since kvd started serving"});
  rows.push_back({"rss_bytes", resident_bytes(), store::StatKind::gauge, "resident memory of the kvd process"});
  rows.push_back({"heap_bytes", heap_bytes(), store::StatKind::gauge,
                  "live heap: bytes allocated and not freed, as the allocator counts them (ASan's count in a "
                  "sanitized build, mallinfo2 otherwise): what a leak grows"});
  rows.push_back({"bytes_copied_total", proto::copied_bytes(), store::StatKind::counter,
                  "bytes this process copied with the CPU on its data path (every copy goes through "
                  "proto::copy_bytes, which counts it)"});
  const ServerCounters c = counters();
  const store::StatRows counted = counter_rows(c);
  rows.insert(rows.end(), counted.begin(), counted.end());
  // Redis' names for the hit ratio of reads by message (one-sided reads are
  // not seen here: the clients count those, and report them in TOUCH hints).
  rows.push_back({"keyspace_hits", c.get_hits, store::StatKind::counter, "GETs by message that found their key (= get_hits)"});
  rows.push_back({"keyspace_misses", c.gets - c.get_hits, store::StatKind::counter, "GETs by message that did not (gets - get_hits)"});
  const ArenaStats ar = arena_ ? arena_->stats() : ArenaStats{};
  const IndexStats ix = index_ ? index_->index().stats() : IndexStats{};
  const ArenaStats sm = small_arena_ ? small_arena_->stats() : ArenaStats{};
  store_->append_stats(rows);
  rows.insert(rows.end(), {
      {"registrations", arena_ ? arena_->registrations() : 0, store::StatKind::counter, "memory registrations of the arena"},
      {"arena_reserved", ar.reserved_bytes, store::StatKind::gauge, "arena bytes registered (large values)"},
      {"arena_used", ar.used_bytes, store::StatKind::gauge, "arena bytes in blocks that hold values"},
      {"grant_bytes_held", grant_budget_.held, store::StatKind::gauge,
       "arena bytes in grants no client has written yet (bounded by an eighth of the memory limit)"},
      {"index_buckets", ix.buckets, store::StatKind::gauge, "one-sided index home buckets (0: index off)"},
      {"index_used", ix.used, store::StatKind::gauge, "index entries in use"},
      {"index_overflow_keys", ix.overflow_keys, store::StatKind::gauge, "keys whose neighborhood was full: GET by message"},
      {"index_overflow_buckets", ix.overflow_buckets, store::StatKind::gauge, "buckets with the sticky overflow flag"},
      {"index_rpc_only", ix.rpc_only, store::StatKind::gauge, "index entries that send readers to a message GET"},
      {"index_inline", ix.inline_entries, store::StatKind::gauge, "index entries holding their value: one READ per one-sided GET"},
      {"small_arena_reserved", sm.reserved_bytes, store::StatKind::gauge, "small-value arena bytes registered (index on)"},
      {"small_arena_used", sm.used_bytes, store::StatKind::gauge, "small-value arena bytes in use"},
  });
  rows.push_back({"device_usable", device_ == DeviceState::usable ? 1u : 0u, store::StatKind::gauge,
                  "1 while the RDMA device's port is up and the device has not failed (/health needs it)"});
  if (durability_ != nullptr) durability_->append_stats(rows);
  latency_.append_stats(rows);
  if (metrics_) metrics_->append_stats(rows);
  if (extra_stats_) extra_stats_(rows);
  return rows;
}

std::string Server::stats_text() const { return store::format_stats_line(stats_rows()); }
std::string Server::stats_json() const { return store::format_stats_json(stats_rows()); }

// --- connection manager -------------------------------------------------------

void Server::on_cm_readable() noexcept {
  for (;;) {
    try {
      auto ev = events_.next();
      if (!ev) return;
      on_cm_event(*ev);
    } catch (const std::exception& e) {
      spdlog::error("server: rdma_cm event handling failed: {}", e.what());
      return;
    }
  }
}

void Server::on_cm_event(verbs::CmEvent& ev) {
  SPDLOG_DEBUG("server: cm event {} (status {}) token {:#x}", to_string(ev.type), ev.status, ev.token);
  if (ev.type == verbs::CmEventType::connect_request) {
    on_connect_request(ev);
    return;
  }
  if (ev.token == kListenerToken) {
    SPDLOG_DEBUG("server: listener event {} ignored", to_string(ev.type));
    return;
  }
  const Key key = Key::unpack(ev.token);
  if (conns_.find(key) == nullptr) {
    SPDLOG_DEBUG("server: stale cm event {} for token {:#x} dropped", to_string(ev.type), ev.token);
    return;
  }
  on_conn_event(key, ev);
}

void Server::on_connect_request(verbs::CmEvent& ev) {
  const std::string peer = ev.peer_address;
  if (!ev.new_id) return;
  verbs::CmId id = std::move(*ev.new_id);
  auto reject = [&](const std::string& why, std::span<const std::byte> data = {}) {
    spdlog::warn("server: rejecting {}: {}", peer, why);
    ++counters_.rejected;
    if (const int rc = id.reject(data); rc != 0) SPDLOG_DEBUG("server: rdma_reject: errno {}", rc);
  };
  if (shutting_down_) return reject("shutting down");
  const auto decoded = proto::decode_connect_params(ev.private_data(), proto::Role::client);
  if (const auto* err = std::get_if<proto::ConnectError>(&decoded)) {
    return reject(fmt::format("bad connect parameters: {}", to_string(*err)));
  }
  const auto& params = std::get<proto::ConnectParams>(decoded);
  if (auth_) {  // before anything is made for the peer, and before the accept reveals the index
    const bool sent = proto::auth_present(params.auth);
    if (!sent || !proto::auth_equal(params.auth, *auth_)) {
      ++counters_.auth_failures;
      const auto why = sent ? proto::RejectReason::auth_failed : proto::RejectReason::auth_required;
      const auto data = proto::encode_reject(why);
      return reject(fmt::format("authentication failed: {}", sent ? "wrong token" : "no token"), data);
    }
  }
  const auto key = conns_.try_insert(Conn{});
  if (!key) return reject(fmt::format("connection table full ({} clients)", options_.max_clients));
  Conn& c = *conns_.find(*key);
  const std::uint64_t tok = key->pack();
  try {
    if (!pd_) make_pd(id);
    id.set_token(tok);
    EndpointConfig cfg;
    cfg.own_buffers = false;  // recv_buffers_ and send_buffers_ feed it
    cfg.recv_count = options_.credits;
    cfg.recv_size = options_.buf_size;
    cfg.send_count = std::max<std::uint32_t>(1, std::min<std::uint32_t>(params.credits, options_.max_send_buffers));
    cfg.send_size = options_.buf_size;
    const std::uint32_t transfers = std::max<std::uint32_t>(1, std::min<std::uint32_t>(params.credits, options_.max_transfers));
    // Grants, for a client that asked (docs/protocol.md "SET by grant"): one
    // per credit it may hold, at most max_grants; each a bind and an
    // invalidation on the send queue at most.
    const std::uint32_t grants =
        (params.features & proto::kFeatureGrants) != 0
            ? std::min({options_.max_grants, std::uint32_t{params.credits}, conn::Link::kMaxWindows})
            : 0;
    cfg.rdma_depth = ServerConn::transfer_room(transfers) + 2 * grants;
    // Into the slot at once: a failure below destroys the Conn, QP before ServerConn.
    c.ep = std::make_unique<Endpoint>(std::move(id), pd_, cfg);
    Endpoint* ep = c.ep.get();
    ServerConnConfig scfg;
    scfg.credits = initial_credits();
    scfg.max_credits = options_.credits;
    scfg.max_send_buffers = cfg.send_count;
    scfg.generation = key->generation;
    scfg.peer_recv_size = params.recv_buf_size;
    // The decoder takes any RDV length; ServerConn refuses one over max_value
    // with too_large (a clear reply, not a disconnect).
    scfg.limits.max_value = std::numeric_limits<std::uint64_t>::max();
    scfg.max_value = options_.max_value;
    scfg.max_transfers = transfers;
    scfg.max_pins = params.credits;
    scfg.label = peer;
    scfg.stats = [this] { return stats_rows(); };
    scfg.latency = &latency_;
    scfg.gate = &gate_;
    scfg.token = tok;
    scfg.reply_batch = options_.reply_batch;
    scfg.handlers = &handlers_;
    scfg.max_grants = grants;
    scfg.grant_budget = &grant_budget_;
    c.sc = std::make_unique<ServerConn>(ep->link(), *recv_buffers_, *send_buffers_, *store_, *arena_, counters_,
                                        std::move(scfg), durability_);
    ServerConn* sc = c.sc.get();
    if (sc->start() != Verdict::keep) {  // receives go up BEFORE accept
      throw std::runtime_error("posting the receive buffers failed: " + sc->disconnect_reason());
    }
    reactor::Registration watch =
        reactor_->watch(ep->cq_fd(), EPOLLIN, [this, k = *key](std::uint32_t) { on_cq_event(k); });
    reactor::Timer handshake = reactor_->after(options_.connect_timeout, [this, k = *key] { on_connect_timeout(k); });
    proto::ConnectParams mine;
    mine.role = proto::Role::server;
    mine.credits = initial_credits();
    mine.recv_buf_size = options_.buf_size;
    mine.max_value = options_.max_value;
    if (grants != 0) mine.features = proto::kFeatureGrants;
    if (index_) {
      mine.index_addr = index_->addr();
      mine.index_rkey = index_->rkey();
      mine.index_buckets = index_->index().buckets();
      mine.index_layout = proto::kIndexLayout;
    }
    const auto priv = proto::encode_connect_params(mine);
    verbs::ConnParams cp;
    cp.private_data = priv;
    // The accept's RNR retry count governs the CLIENT's QP (IB CM REP). Its
    // SENDs beyond its credits must reach us so the overrun is detected,
    // counted and the client dropped with a reason (ServerConn::on_recv):
    // retry. Our replies never RNR (the client's connect asks for 0).
    cp.rnr_retry_count = 7;
    ep->id().accept(cp);
    c.peer = peer;
    c.cq_watch = std::move(watch);
    c.deadline = std::move(handshake);
  } catch (const std::exception& e) {
    spdlog::warn("server: rejecting {}: {}", peer, e.what());
    ++counters_.rejected;
    conns_.erase(*key);  // destroying the cm_id (moved into ep, or still in id) rejects the request
    return;
  }
  ++counters_.accepted;
  SPDLOG_DEBUG("server: accepted {} into slot {} (client credits {}, recv_buf_size {})", peer, key->index,
               params.credits, params.recv_buf_size);
}

void Server::on_conn_event(Key key, const verbs::CmEvent& ev) {
  Conn& c = *conns_.find(key);
  switch (ev.type) {
    case verbs::CmEventType::established:
      if (c.sc->state() == ConnState::connecting) c.deadline.reset();  // the handshake's; not a teardown's
      c.sc->on_established();
      spdlog::info("server: connected {} (slot {}, {} connections)", c.peer, key.index, conns_.live());
      return;
    case verbs::CmEventType::disconnected:
      begin_close(key, CloseCause::peer_left, "peer disconnected");  // answers the DREQ if we did not send one
      cm_finished(key);
      return;
    case verbs::CmEventType::rejected:
    case verbs::CmEventType::unreachable:
    case verbs::CmEventType::connect_error:
    case verbs::CmEventType::device_removal:
      begin_close(key, CloseCause::peer_left,
                  fmt::format("{} (status {})", to_string(ev.type), ev.status));  // no DISCONNECTED follows
      cm_finished(key);
      return;
    case verbs::CmEventType::timewait_exit:
    case verbs::CmEventType::addr_resolved:
    case verbs::CmEventType::route_resolved:
    case verbs::CmEventType::connect_request:
    case verbs::CmEventType::addr_error:
    case verbs::CmEventType::route_error:
    case verbs::CmEventType::other:
      SPDLOG_DEBUG("server: {} event {} ignored", c.peer, to_string(ev.type));
      return;
  }
}

void Server::on_connect_timeout(Key key) noexcept {
  Conn* c = conns_.find(key);
  if (c == nullptr || c->sc->state() != ConnState::connecting) return;  // established (a request came first)
  ++counters_.connect_timeouts;
  spdlog::warn("server: {}: handshake not finished within {} ms; dropping it", c->peer,
               options_.connect_timeout.count());
  begin_close(key, CloseCause::handshake_timeout, "handshake timed out");  // no DISCONNECTED will follow
  cm_finished(key);
}

void Server::arm_transfer_check() {
  transfer_check_ = reactor_->after(
      std::max<std::chrono::milliseconds>(options_.transfer_timeout / kTransferChecks, std::chrono::milliseconds(1)),
      [this] {
        check_transfers();
        try {
          arm_transfer_check();
        } catch (const std::exception& e) {
          spdlog::error("server: transfer check not re-armed: {}", e.what());
        }
      });
}

void Server::arm_expiry() noexcept {
  if (store_->expiring() == 0 || expiry_timer_.pending()) return;
  try {
    expiry_timer_ = reactor_->every(kExpiryPeriod, [this] { expire_keys(); });
  } catch (const std::exception& e) {
    spdlog::error("server: expiry timer not armed: {} (expired keys go lazily, when looked up)", e.what());
  }
}

void Server::expire_keys() noexcept {
  const std::size_t n = store_->expire_due(kExpireBatch);
  if (store_->expiring() == 0) {
    expiry_timer_ = reactor::Timer();  // nothing left to expire: no wakeups until a key has a TTL again
    return;
  }
  if (n < kExpireBatch) return;
  // More are due: go on at the next turn, after what is waiting (never a stall).
  try {
    expire_more_ = reactor_->after(std::chrono::nanoseconds(0), [this] { expire_keys(); });
  } catch (const std::exception& e) {
    spdlog::error("server: expiry not continued: {}", e.what());  // the periodic timer still runs
  }
}

void Server::check_transfers() noexcept {
  for (std::uint32_t i = 0; i < conns_.slot_count(); ++i) {
    const auto key = conns_.key_at(i);
    if (!key) continue;
    Conn& c = *conns_.find(*key);
    if (!c.sc || c.sc->transfers_in_flight() == 0 || c.sc->transfers_finished() != c.transfer_mark) {
      c.transfer_mark = c.sc ? c.sc->transfers_finished() : 0;
      c.stalled_checks = 0;
      continue;
    }
    if (++c.stalled_checks < kTransferChecks) continue;
    c.stalled_checks = 0;
    const Verdict v = c.sc->begin_draining(CloseCause::transfer_timeout, "RDMA transfers made no progress");
    if (v == Verdict::disconnect) {
      ++counters_.transfer_timeouts;
      spdlog::warn("server: {}: {} RDMA transfers in flight, none finished for {} ms; dropping the connection",
                   c.peer, c.sc->transfers_in_flight(), options_.transfer_timeout.count());
    }
    act(*key, v);
  }
}

// --- data path ------------------------------------------------------------------

Verdict Server::service(Conn& c, CqPass pass, std::size_t& handled) noexcept {
  ServerConn& sc = *c.sc;
  Verdict v = Verdict::keep;
  auto feed = [&sc, &v](const verbs::Completion& wc) noexcept { v = v | sc.on_completion(wc); };
  handled = 0;
  // Other connections with traffic listed: this one's replies wait for the
  // end of its pass (ServerConn::set_crowded).
  sc.set_crowded(polled_.size() > 1);
  int error = 0;
  switch (pass) {
    case CqPass::poll: {
      const int n = c.ep->cq().poll(kPollBatch, feed);
      if (n < 0) error = -n;
      else handled = static_cast<std::size_t>(n);
      break;
    }
    case CqPass::arm: {
      const auto st = c.ep->cq().arm_and_poll(feed);
      error = st.error;
      handled = st.completions;
      break;
    }
  }
  counters_.completions += handled;
  if (handled > 0) {  // a pass that found nothing has nothing to send
    v = v | sc.flush();
    if (durability_ != nullptr) durability_->flush();  // this batch's records go out together
    arm_expiry();  // a request of this batch may have given a key a TTL
  }
  if (error != 0) {
    const Verdict d = sc.begin_draining(CloseCause::internal, fmt::format("CQ poll failed: errno {}", error));
    if (d == Verdict::disconnect) spdlog::error("server: {}: CQ poll failed: errno {}", c.peer, error);
    v = v | d;
  }
  return v;
}

void Server::on_cq_event(Key key) noexcept {
  Conn* c = conns_.find(key);
  if (c == nullptr) return;
  ++counters_.cq_wakeups;
  const int rc = c->ep->cq().take_event();
  if (rc < 0) {
    const Verdict d = c->sc->begin_draining(CloseCause::internal,
                                            fmt::format("completion channel read failed: errno {}", -rc));
    if (d == Verdict::disconnect) spdlog::error("server: {}: completion channel read failed: errno {}", c->peer, -rc);
    act(key, d);
    return;
  }
  if (!c->polled && !c->ep->cq().armed()) {
    try {
      polled_.push_back(key);
      c->polled = true;
    } catch (const std::bad_alloc&) {
      // Not listed: arm it at once instead, so its next completion wakes us.
      std::size_t handled = 0;
      act(key, service(*c, CqPass::arm, handled));
    }
  }
  on_cq(key, CqPass::poll);
}

std::size_t Server::on_cq(Key key, CqPass pass) noexcept {
  Conn* c = conns_.find(key);
  if (c == nullptr) return 0;
  std::size_t handled = 0;
  act(key, service(*c, pass, handled));
  try_finish(key, false);  // flushing and drained by this pass: destroy
  return handled;
}

// Index-based, and every key re-checked: a pass may destroy connections (never
// list one: only on_cq_event does). Keys of destroyed or armed connections
// are dropped here.
bool Server::poll_listed() noexcept {
  if (polled_.empty()) return false;
  ++counters_.cq_polls;
  std::size_t handled = 0;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < polled_.size(); ++i) {
    const Key key = polled_[i];
    const Conn* c = conns_.find(key);
    if (c == nullptr || !c->polled) continue;
    polled_[keep++] = key;
    handled += on_cq(key, CqPass::poll);
  }
  polled_.resize(keep);
  return handled > 0;
}

bool Server::arm_listed() noexcept {
  std::size_t handled = 0;
  for (std::size_t i = 0; i < polled_.size(); ++i) {
    const Key key = polled_[i];
    Conn* c = conns_.find(key);
    if (c == nullptr || !c->polled) continue;
    c->polled = false;  // armed by this pass (or failed and torn down)
    ++counters_.cq_arms;
    handled += on_cq(key, CqPass::arm);
  }
  polled_.clear();
  return handled > 0;
}

void Server::handle(std::uint16_t op, Handler fn) {
  reactor_->assert_owner_thread();
  handlers_.add(op, std::move(fn));
}

void Server::on_durable(std::uint64_t tok, std::uint32_t wait, proto::Status status) noexcept {
  reactor_->assert_owner_thread();
  const Key key = Key::unpack(tok);
  Conn* c = conns_.find(key);
  if (c == nullptr) {  // the connection went away: nobody to answer
    ++counters_.stale_completions;
    return;
  }
  const Verdict v = c->sc->on_durable(wait, status);
  act(key, v | c->sc->flush());
}

// --- teardown ---------------------------------------------------------------------

void Server::act(Key key, Verdict v) noexcept {
  switch (v) {
    case Verdict::keep: return;
    case Verdict::disconnect: break;
  }
  Conn* c = conns_.find(key);
  if (c == nullptr) return;
  // Step 2: the initiator disconnects; the passive side answers the peer's DREQ the same way.
  const int rc = c->ep->id().disconnect();
  try {
    c->deadline = reactor_->after(options_.disconnect_timeout + options_.drain_timeout, [this, key] {
      if (Conn* cc = conns_.find(key)) {
        spdlog::warn("server: {}: teardown did not finish in time ({}, {} recvs / {} sends outstanding); "
                     "destroying",
                     cc->peer, to_string(cc->sc->state()), cc->sc->recvs_posted(), cc->sc->sends_in_flight());
        try_finish(key, true);
      }
    });
  } catch (const std::exception& e) {
    spdlog::error("server: {}: no teardown timer: {}", c->peer, e.what());
  }
  if (rc != 0) {  // never connected, or already gone: no DISCONNECTED to wait for
    SPDLOG_DEBUG("server: {}: rdma_disconnect: errno {}", c->peer, rc);
    cm_finished(key);
  }
}

void Server::begin_close(Key key, CloseCause cause, std::string_view reason) noexcept {
  if (Conn* c = conns_.find(key)) act(key, c->sc->begin_draining(cause, reason));
}

void Server::cm_finished(Key key) noexcept {
  Conn* c = conns_.find(key);
  if (c == nullptr) return;
  if (c->sc->cm_done()) {
    // Step 4: every outstanding WR flushes (if this fails, the deadline destroys).
    if (const int rc = c->ep->qp().to_error(); rc != 0) {
      spdlog::warn("server: {}: moving the QP to error failed: errno {}", c->peer, rc);
    }
    std::size_t handled = 0;
    act(key, service(*c, CqPass::poll, handled));  // step 5 (more arrive by events or polls)
  }
  try_finish(key, false);
}

void Server::try_finish(Key key, bool force) noexcept {
  Conn* c = conns_.find(key);
  if (c == nullptr) return;
  if (!force && !c->sc->drained()) return;
  destroy(key);
}

void Server::destroy(Key key) noexcept {
  Conn& c = *conns_.find(key);
  const CloseCause cause = c.sc->close_cause();
  const std::optional<std::uint32_t> record_shard = c.sc->record_shard();
  c.deadline.reset();
  c.cq_watch.reset();  // before the completion channel fd closes
  c.sc->close();
  c.ep.reset();  // step 6: QP, CQ, MRs, buffers, channel, cm_id
  c.sc.reset();  // then transfers and pins: no WR can reach their memory any more
  const std::string peer = std::move(c.peer);
  conns_.erase(key);  // the generation moves on: late events for this slot are stale
  ++counters_.closed;
  // The reason was logged where it was decided (ServerConn::fail, service()).
  spdlog::info("server: disconnected {} ({}; {} connections)", peer, to_string(cause), conns_.live());
  if (record_shard && cause != CloseCause::shutdown && on_record_peer_lost_) on_record_peer_lost_(*record_shard);
  if (shutting_down_ && conns_.live() == 0 && on_shutdown_done_) {
    auto done = std::move(on_shutdown_done_);
    on_shutdown_done_ = nullptr;
    done();
  }
}

void Server::shutdown(std::function<void()> on_done) {
  reactor_->assert_owner_thread();
  if (!shutting_down_) {
    shutting_down_ = true;
    listener_.reset();  // stop accepting
    spdlog::info("server: shutting down ({} connections)", conns_.live());
  }
  on_shutdown_done_ = std::move(on_done);
  for (std::uint32_t i = 0; i < conns_.slot_count(); ++i) {
    if (const auto key = conns_.key_at(i)) begin_close(*key, CloseCause::shutdown, "server shutdown");
  }
  if (conns_.live() == 0 && on_shutdown_done_) {
    auto done = std::move(on_shutdown_done_);
    on_shutdown_done_ = nullptr;
    done();
  }
}

}  // namespace rkv::kv::server
