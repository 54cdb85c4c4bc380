// Server: see server.hpp. Reactor thread only.
#include "kv/server/server.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <variant>

#include "proto/connect_params.hpp"
#include "proto/index_format.hpp"
#include "verbs/error.hpp"

namespace rkv::kv::server {

using store::Durability;
using conn::Endpoint;
using conn::EndpointConfig;
using store::IndexStats;
using conn::PdRegistrar;
using store::Store;

Server::Server(reactor::Reactor& reactor, Store& store, ServerOptions options, Durability* durability)
    : reactor_(&reactor), store_(&store), options_(std::move(options)), durability_(durability) {
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
  listener_.emplace(events_, kListenerToken);
  listener_->bind(options_.bind_address, options_.port);
  listener_->listen(options_.backlog);
  port_ = listener_->local_port();
  if (listener_->has_device()) make_pd(*listener_);
  events_watch_ = reactor_->watch(events_.fd(), EPOLLIN, [this](std::uint32_t) { on_cm_readable(); });
  if (options_.busy_poll) poller_ = reactor_->add_poller([this] { return poll_all(); });
  spdlog::info("server: listening on {}:{} (credits {}, buffers {} B, max clients {})", options_.bind_address,
               port_, options_.credits, options_.buf_size, options_.max_clients);
}

Server::~Server() {
  poller_.reset();
  store_->detach_index();  // the index and the small arena go with the Server
  events_watch_.reset();
  for (auto& c : conns_) {
    c.deadline.reset();
    c.cq_watch.reset();
    c.ep.reset();  // destroys the QP (and disconnects the cm_id if still connected)
    c.sc.reset();  // then the memory its transfers targeted
  }
}

void Server::make_pd(const verbs::CmId& id) {
  pd_ = std::make_shared<const verbs::ProtectionDomain>(id);
  registrar_ = std::make_unique<PdRegistrar>(pd_);
  arena_ = std::make_unique<Arena>(*registrar_, options_.arena);
  if (options_.index_buckets != 0) {
    small_arena_ = std::make_unique<Arena>(*registrar_, options_.small_arena);
    index_ = std::make_unique<IndexRegion>(*registrar_, options_.index_buckets);
    store_->attach_index(index_->index(), [a = small_arena_.get()](std::size_t n) { return a->allocate(n); });
    spdlog::info("server: one-sided GET index: {} buckets, {} bytes (remote_read)", options_.index_buckets,
                 index_->bytes());
  }
  migrate_large_values();
}

std::vector<std::pair<std::string_view, std::uint64_t>> Server::index_stats() const {
  const IndexStats st = index_ ? index_->index().stats() : IndexStats{};
  const ArenaStats sm = small_arena_ ? small_arena_->stats() : ArenaStats{};
  return {{"index_buckets", st.buckets},           {"index_used", st.used},
          {"index_overflow_keys", st.overflow_keys}, {"index_overflow_buckets", st.overflow_buckets},
          {"index_rpc_only", st.rpc_only},         {"small_arena_reserved", sm.reserved_bytes},
          {"small_arena_used", sm.used_bytes}};
}

// Values loaded before the PD existed (recovery: docs/durability.md) are
// plain strings. Large ones move into the arena so the rendezvous path can
// serve them; with the index on, small ones are SET again so they land in
// index blocks and one-sided readers find them (not ask-by-message entries).
void Server::migrate_large_values() noexcept {
  try {
    std::vector<std::string> keys;
    store_->for_each([&keys, this](std::string_view k, const Store::Lookup& v) {
      if (!v.large && (store_->indexed() || !proto::eager_fits(k.size(), v.value.size()))) keys.emplace_back(k);
    });
    std::size_t moved = 0, bytes = 0, republished = 0;
    for (const auto& k : keys) {
      const std::string value(store_->get(k).value);  // a copy: the set below replaces what it views
      if (proto::eager_fits(k.size(), value.size())) {
        store_->set(k, value);
        ++republished;
        continue;
      }
      const std::size_t tail = store_->indexed() ? k.size() : 0;  // [value][key] blocks (docs/protocol.md)
      auto block = arena_->allocate(value.size() + tail);
      if (!block) {
        spdlog::error("server: no arena memory for the recovered value of {} ({} bytes): GETs of it fail", k,
                      value.size());
        continue;
      }
      block->bytes = block->bytes.first(value.size());
      std::memcpy(block->bytes.data(), value.data(), value.size());
      bytes += value.size();
      ++moved;
      store_->set_large(k, std::move(block));
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

ServerStats Server::stats() const noexcept {
  return {counters_, store_->size(), store_->bytes()};
}

std::string Server::stats_text() const {
  const auto& k = counters_;
  return fmt::format(
      "connections={} accepted={} rejected={} closed={} protocol_errors={} credit_overruns={} "
      "completion_errors={} sends_received={} sends_posted={} sets={} gets={} get_hits={} stats={} "
      "rdv_refused={} error_replies={} pauses={} keys={} bytes={} messages_received={} replies_sent={} "
      "large_sets={} large_gets_written={} large_gets_pulled={} releases={} rdma_reads={} rdma_writes={} "
      "bytes_copied={} too_large={} transfers_aborted={} pinned={} transfers={} registrations={} "
      "arena_reserved={} arena_used={}",
      k.connections, k.accepted, k.rejected, k.closed, k.protocol_errors, k.credit_overruns, k.completion_errors,
      k.sends_received, k.sends_posted, k.sets, k.gets, k.get_hits, k.stats, k.rdv_refused, k.error_replies,
      k.pauses, store_->size(), store_->bytes(), k.messages_received, k.replies_sent, k.large_sets,
      k.large_gets_written, k.large_gets_pulled, k.releases, k.rdma_reads, k.rdma_writes, k.bytes_copied,
      k.too_large, k.transfers_aborted, k.pinned, k.transfers, arena_ ? arena_->registrations() : 0,
      arena_ ? arena_->stats().reserved_bytes : 0, arena_ ? arena_->stats().used_bytes : 0) +
         fmt::format(" max_conn_outstanding={} conn_bytes={} completions={} cq_wakeups={} busy_polls={} "
                     "durable_waits={} io_errors={}",
                     k.max_conn_outstanding, k.conn_bytes, k.completions, k.cq_wakeups, k.busy_polls,
                     k.durable_waits, k.io_errors) +
         [this] {
           std::string out;
           for (const auto& [name, value] : index_stats()) out += fmt::format(" {}={}", name, value);
           return out;
         }() +
         (durability_ != nullptr ? durability_->stats_text() : std::string());
}

Server::Conn* Server::find(std::uint64_t tok) noexcept {
  const auto slot = static_cast<std::uint32_t>(tok);
  const auto gen = static_cast<std::uint32_t>(tok >> 32);
  if (slot >= conns_.size()) return nullptr;
  Conn& c = conns_[slot];
  return (c.in_use && c.generation == gen) ? &c : nullptr;
}

std::optional<std::uint32_t> Server::alloc_slot() noexcept {
  if (counters_.connections >= options_.max_clients) return std::nullopt;
  if (!free_slots_.empty()) {
    const auto s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }
  try {
    conns_.emplace_back();
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  return static_cast<std::uint32_t>(conns_.size() - 1);
}

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
  Conn* c = find(ev.token);
  if (c == nullptr) {
    SPDLOG_DEBUG("server: stale cm event {} for token {:#x} dropped", to_string(ev.type), ev.token);
    return;
  }
  on_conn_event(*c, static_cast<std::uint32_t>(ev.token), ev);
}

void Server::on_connect_request(verbs::CmEvent& ev) {
  const std::string peer = ev.peer_address;
  if (!ev.new_id) return;
  verbs::CmId id = std::move(*ev.new_id);
  auto reject = [&](const std::string& why) {
    spdlog::warn("server: rejecting {}: {}", peer, why);
    ++counters_.rejected;
    (void)id.reject();
  };
  if (shutting_down_) return reject("shutting down");
  const auto decoded = proto::decode_connect_params(ev.private_data(), proto::Role::client);
  if (const auto* err = std::get_if<proto::ConnectError>(&decoded)) {
    return reject(fmt::format("bad connect parameters: {}", to_string(*err)));
  }
  const auto& params = std::get<proto::ConnectParams>(decoded);
  const auto slot = alloc_slot();
  if (!slot) return reject(fmt::format("connection table full ({} clients)", options_.max_clients));
  Conn& c = conns_[*slot];
  const std::uint64_t tok = token(*slot, c.generation);
  try {
    if (!pd_) make_pd(id);
    id.set_token(tok);
    EndpointConfig cfg;
    cfg.recv_count = options_.credits;
    cfg.recv_size = options_.buf_size;
    cfg.send_count = std::min<std::uint32_t>(params.credits, options_.max_send_buffers);
    cfg.send_size = options_.buf_size;
    const std::uint32_t transfers = std::max<std::uint32_t>(1, std::min<std::uint32_t>(params.credits, options_.max_transfers));
    cfg.rdma_depth = transfers;
    auto ep = std::make_unique<Endpoint>(std::move(id), pd_, cfg);
    ServerConnConfig scfg;
    scfg.credits = options_.credits;
    scfg.generation = c.generation;
    scfg.peer_recv_size = params.recv_buf_size;
    // The decoder takes any RDV length; ServerConn refuses one over max_value
    // with too_large (a clear reply, not a disconnect).
    scfg.limits.max_value = std::numeric_limits<std::uint64_t>::max();
    scfg.max_value = options_.max_value;
    scfg.max_transfers = transfers;
    scfg.max_pins = params.credits;
    scfg.label = peer;
    scfg.index_stats = [this] { return index_stats(); };
    scfg.token = tok;
    auto sc = std::make_unique<ServerConn>(ep->link(), ep->recv_pool(), ep->send_pool(), *store_, counters_,
                                           std::move(scfg), arena_.get(), durability_);
    if (sc->start() != Verdict::keep) {  // receives go up BEFORE accept
      (void)ep->id().reject();
      throw std::runtime_error("posting the receive buffers failed: " + sc->disconnect_reason());
    }
    reactor::Registration watch;  // busy-poll mode: poll_all() finds the connection instead
    if (!options_.busy_poll) {
      watch = reactor_->watch(ep->cq_fd(), EPOLLIN, [this, tok](std::uint32_t) {
        ++counters_.cq_wakeups;
        (void)on_cq(tok);
      });
    }
    proto::ConnectParams mine;
    mine.role = proto::Role::server;
    mine.credits = options_.credits;
    mine.recv_buf_size = options_.buf_size;
    mine.max_value = options_.max_value;
    if (index_) {
      mine.index_addr = index_->addr();
      mine.index_rkey = index_->rkey();
      mine.index_buckets = index_->index().buckets();
      mine.index_bucket_size = static_cast<std::uint32_t>(proto::kBucketSize);
    }
    const auto priv = proto::encode_connect_params(mine);
    verbs::ConnParams cp;
    cp.private_data = priv;
    ep->id().accept(cp);
    c.in_use = true;
    c.closing = false;
    c.cm_done = false;
    c.peer = peer;
    c.ep = std::move(ep);
    c.sc = std::move(sc);
    c.cq_watch = std::move(watch);
  } catch (const std::exception& e) {
    spdlog::warn("server: rejecting {}: {}", peer, e.what());
    ++counters_.rejected;
    free_slots_.push_back(*slot);  // nothing in it; generation unchanged (no token escaped)
    return;                        // the moved-from/destroyed cm_id rejects the request
  }
  ++counters_.connections;
  counters_.conn_bytes += conns_[*slot].ep->recv_pool().bytes().size() + conns_[*slot].ep->send_pool().bytes().size();
  ++counters_.accepted;
  SPDLOG_DEBUG("server: accepted {} into slot {} (client credits {}, recv_buf_size {})", peer, *slot,
               params.credits, params.recv_buf_size);
}

void Server::on_conn_event(Conn& c, std::uint32_t slot, const verbs::CmEvent& ev) {
  switch (ev.type) {
    case verbs::CmEventType::established:
      c.sc->on_established();
      spdlog::info("server: connected {} (slot {}, {} connections)", c.peer, slot, counters_.connections);
      return;
    case verbs::CmEventType::disconnected:
      begin_close(slot, CloseCause::peer_left, "peer disconnected");  // answers the DREQ if we did not send one
      cm_finished(slot);
      return;
    case verbs::CmEventType::rejected:
    case verbs::CmEventType::unreachable:
    case verbs::CmEventType::connect_error:
    case verbs::CmEventType::device_removal:
      begin_close(slot, CloseCause::peer_left,
                  fmt::format("{} (status {})", to_string(ev.type), ev.status));  // no DISCONNECTED follows
      cm_finished(slot);
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

// --- data path ------------------------------------------------------------------

// One drain batch (busy-poll mode: one poll batch), then one flush. A
// disconnect decision shows as the ServerConn draining while the Conn is not
// `closing` yet (see on_cq).
std::size_t Server::drain_cq(Conn& c) noexcept {
  ServerConn& sc = *c.sc;
  auto feed = [&sc](const verbs::Completion& wc) noexcept { (void)sc.on_completion(wc); };
  std::size_t handled = 0;
  int error = 0;
  if (options_.busy_poll) {
    const int n = c.ep->cq().poll(kBusyPollBatch, feed);
    if (n < 0) error = -n;
    else handled = static_cast<std::size_t>(n);
  } else {
    const auto st = c.ep->cq().drain(feed);
    error = st.error;
    handled = st.completions();
  }
  counters_.completions += handled;
  if (!options_.busy_poll || handled > 0) {  // an idle poll appends nothing
    (void)sc.flush();
    if (durability_ != nullptr) durability_->flush();  // this batch's records go out together
  }
  if (error != 0 && !c.closing) {
    spdlog::error("server: {}: CQ poll failed: errno {}", c.peer, error);
    sc.begin_draining(CloseCause::internal, fmt::format("CQ poll failed: errno {}", error));
  }
  return handled;
}

std::size_t Server::on_cq(std::uint64_t tok) noexcept {
  Conn* c = find(tok);
  if (c == nullptr) return 0;
  const auto slot = static_cast<std::uint32_t>(tok);
  const std::size_t handled = drain_cq(*c);
  if (!c->closing && c->sc->state() == ConnState::draining) {
    begin_close(slot, c->sc->close_cause(), c->sc->disconnect_reason());
  }
  if (c->closing) try_finish(slot, false);
  return handled;
}

bool Server::poll_all() noexcept {
  ++counters_.busy_polls;
  std::size_t handled = 0;
  // Index-based and re-checked per slot: on_cq may destroy a connection.
  for (std::uint32_t s = 0; s < conns_.size(); ++s) {
    if (conns_[s].in_use) handled += on_cq(token(s, conns_[s].generation));
  }
  return handled > 0;
}

void Server::on_durable(std::uint64_t tok, std::uint32_t req_id, bool ok) noexcept {
  Conn* c = find(tok);
  if (c == nullptr || c->closing) return;  // the connection went away: nobody to answer
  const auto slot = static_cast<std::uint32_t>(tok);
  (void)c->sc->on_durable(req_id, ok);
  (void)c->sc->flush();
  if (!c->closing && c->sc->state() == ConnState::draining) {
    begin_close(slot, c->sc->close_cause(), c->sc->disconnect_reason());
  }
}

// --- teardown ---------------------------------------------------------------------

void Server::begin_close(std::uint32_t slot, CloseCause cause, const std::string& reason) noexcept {
  Conn& c = conns_[slot];
  if (c.closing) return;
  c.closing = true;
  c.sc->begin_draining(cause, reason);  // no-op if the ServerConn decided it
  // Step 2: initiator disconnects; the passive side answers the peer's DREQ the same way.
  if (const int rc = c.ep->id().disconnect(); rc != 0) {
    SPDLOG_DEBUG("server: {}: rdma_disconnect: errno {}", c.peer, rc);
    c.cm_done = true;  // never connected, or already gone: no DISCONNECTED to wait for
  }
  const std::uint64_t tok = token(slot, c.generation);
  try {
    c.deadline = reactor_->after(options_.disconnect_timeout + options_.drain_timeout, [this, tok] {
      if (Conn* cc = find(tok)) {
        spdlog::warn("server: {}: teardown did not finish in time (DISCONNECTED {}, {} recvs / {} sends "
                     "outstanding); destroying",
                     cc->peer, cc->cm_done ? "seen" : "missing", cc->sc->recvs_posted(),
                     cc->sc->sends_in_flight());
        try_finish(static_cast<std::uint32_t>(tok), true);
      }
    });
  } catch (const std::exception& e) {
    spdlog::error("server: {}: no teardown timer: {}", c.peer, e.what());
  }
  if (c.cm_done) cm_finished(slot);
}

void Server::cm_finished(std::uint32_t slot) noexcept {
  Conn& c = conns_[slot];
  if (!c.in_use) return;
  c.cm_done = true;
  (void)c.ep->qp().to_error();  // step 4: every outstanding WR flushes
  drain_cq(c);                  // step 5 (more arrive as CQ events)
  try_finish(slot, false);
}

void Server::try_finish(std::uint32_t slot, bool force) noexcept {
  Conn& c = conns_[slot];
  if (!c.in_use) return;
  if (!force && !(c.cm_done && c.sc->drained())) return;
  destroy(slot);
}

void Server::destroy(std::uint32_t slot) noexcept {
  Conn& c = conns_[slot];
  const std::string reason = c.sc->disconnect_reason();
  c.deadline.reset();
  c.cq_watch.reset();  // before the completion channel fd closes
  c.sc->close();
  counters_.conn_bytes -= c.ep->recv_pool().bytes().size() + c.ep->send_pool().bytes().size();
  c.ep.reset();  // step 6: QP, CQ, MRs, buffers, channel, cm_id
  c.sc.reset();  // then transfers and pins: no WR can reach their memory any more
  c.in_use = false;
  c.closing = false;
  c.cm_done = false;
  c.generation = verbs::WrId::next_generation(c.generation);
  if (c.generation == 0) c.generation = 1;
  free_slots_.push_back(slot);
  --counters_.connections;
  ++counters_.closed;
  spdlog::info("server: disconnected {} ({}; {} connections)", c.peer, reason, counters_.connections);
  if (shutting_down_ && counters_.connections == 0 && on_shutdown_done_) {
    auto done = std::move(on_shutdown_done_);
    on_shutdown_done_ = nullptr;
    done();
  }
}

void Server::shutdown(std::function<void()> on_done) {
  if (!shutting_down_) {
    shutting_down_ = true;
    listener_.reset();  // stop accepting
    spdlog::info("server: shutting down ({} connections)", counters_.connections);
  }
  on_shutdown_done_ = std::move(on_done);
  for (std::uint32_t s = 0; s < conns_.size(); ++s) {
    if (conns_[s].in_use) begin_close(s, CloseCause::shutdown, "server shutdown");
  }
  if (counters_.connections == 0 && on_shutdown_done_) {
    auto done = std::move(on_shutdown_done_);
    on_shutdown_done_ = nullptr;
    done();
  }
}

}  // namespace rkv::kv::server
