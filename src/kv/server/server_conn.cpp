// ServerConn: see server_conn.hpp. Reactor thread only.
#include "kv/server/server_conn.hpp"
#include "proto/endian.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <new>
#include <stdexcept>
#include <utility>
#include <variant>

namespace rkv::kv::server {

using conn::AppendStatus;
using conn::BufferPool;
using store::Durability;
using store::DurableAck;
using store::LargeRef;
using conn::Link;
using store::Store;

using proto::Opcode;
using proto::Status;
using verbs::CompletionStatus;
using verbs::WrKind;

ServerConn::ServerConn(Link& link, BufferPool& recv, BufferPool& send, Store& store, Arena& arena,
                       ServerCounters& counters, ServerConnConfig config, Durability* durability)
    : store_(&store),
      counters_(&counters),
      config_(std::move(config)),
      recv_(&recv),
      channel_(link, recv, send, config_.generation, config_.peer_recv_size),
      granted_(config_.credits),
      link_(&link),
      arena_(&arena),
      durability_(durability) {
  if (!config_.stats) throw std::invalid_argument("ServerConn: no STATS source (ServerConnConfig::stats)");
  if (config_.latency == nullptr) throw std::invalid_argument("ServerConn: no latency histograms (ServerConnConfig::latency)");
  if (config_.gate == nullptr) throw std::invalid_argument("ServerConn: no shard gate (ServerConnConfig::gate)");
  channel_.count_posted({.post_calls = &counters_->post_calls,
                         .bytes_out = &counters_->bytes_sent,
                         .bytes_in = &counters_->bytes_received,
                         .reads = &counters_->rdma_reads,
                         .writes = &counters_->rdma_writes});
  channel_.set_send_limit(config_.max_send_buffers);
  // Room for every transfer the connection may have in flight (transfers_full), so a post never grows it.
  if (!transfers_posted_.make_room(transfer_room(config_.max_transfers))) throw std::bad_alloc();
  channel_.set_transfer_signaling({.reads = 1, .writes = kWriteSignalInterval}, &transfers_posted_);
  pulls_.reserve(config_.max_pins);
  grants_.resize(std::min<std::uint32_t>(config_.max_grants, Link::kMaxWindows));
}

ServerConn::~ServerConn() {
  // The owner destroyed the QP (or every WR came back): the memory of the
  // transfers may be reused. Pins go with the entries.
  counters_->transfers_aborted += transfers_in_flight_;
  for (const auto& g : grants_) {
    if (g) unhold(*g);  // unwritten grants go with the connection
  }
  // No completion will return what the QP held: every buffer goes back now.
  posted_.for_each([&](std::uint32_t slot) { recv_->give_back(slot); });
  held_.for_each([&](const Held& h) {
    if (h.slot != kRecycled) recv_->give_back(h.slot);
  });
  channel_.release_buffers();
}

std::size_t ServerConn::buffer_bytes() const noexcept {
  return std::size_t{allowance_} * recv_->buffer_size() + channel_.send_buffer_bytes();
}

Verdict ServerConn::start() noexcept {
  for (std::uint32_t i = 0; i < config_.credits; ++i) {
    std::uint32_t slot = 0;
    if (!recv_->take(slot)) {
      fail(CloseCause::internal, "no receive buffer: the pool could not grow");
      return Verdict::disconnect;
    }
    ++allowance_;
    if (!post_receive(slot)) return Verdict::disconnect;
  }
  return Verdict::keep;
}

void ServerConn::on_established() noexcept {
  if (state_ == ConnState::connecting) state_ = ConnState::established;
}

Verdict ServerConn::begin_draining(CloseCause cause, std::string_view reason) noexcept {
  if (!serving()) return Verdict::keep;  // decided before: the owner acted then
  std::string why;
  try {
    why.assign(reason);
  } catch (const std::bad_alloc&) {
    // the cause alone
  }
  close_decided(cause, std::move(why));
  return Verdict::disconnect;
}

bool ServerConn::cm_done() noexcept {
  switch (state_) {
    case ConnState::connecting:
    case ConnState::established:
    case ConnState::draining:
      state_ = ConnState::flushing;
      pulls_.clear();  // the owner moves the QP to error now: the client can no longer READ them
      drop_unposted();
      return true;
    case ConnState::flushing:
    case ConnState::closed: return false;
  }
  return false;
}

bool ServerConn::drained() const noexcept {
  return state_ == ConnState::flushing && posted_.empty() && channel_.sends_in_flight() == 0 &&
         transfers_in_flight_ == 0 && window_ops_ == 0;
}

void ServerConn::fail(CloseCause cause, std::string reason) noexcept {
  if (!serving()) return;  // already decided
  switch (cause) {
    case CloseCause::protocol_error: ++counters_->protocol_errors; break;
    case CloseCause::credit_overrun: ++counters_->credit_overruns; break;
    case CloseCause::completion_error: ++counters_->completion_errors; break;
    case CloseCause::none:
    case CloseCause::post_error:
    case CloseCause::internal:
    case CloseCause::peer_left:
    case CloseCause::handshake_timeout:
    case CloseCause::transfer_timeout:
    case CloseCause::shutdown: break;
  }
  spdlog::warn("conn {}: disconnecting ({}): {}", config_.label, to_string(cause), reason);
  close_decided(cause, std::move(reason));
}

void ServerConn::close_decided(CloseCause cause, std::string reason) noexcept {
  state_ = ConnState::draining;
  cause_ = cause;
  reason_ = std::move(reason);
  held_.for_each([&](const Held& h) {  // not re-posted: nothing more is executed
    if (h.slot == kRecycled) return;
    recv_->give_back(h.slot);
    --allowance_;
  });
  held_.clear();
  queued_.clear();
  drop_unposted();
  for (std::uint32_t i = 0; i < pending_.slot_count(); ++i) {
    const auto k = pending_.key_at(i);
    if (!k) continue;
    switch (pending_.find(*k)->wait) {
      case Wait::read:
      case Wait::write:
      case Wait::invalidate: break;  // until the (flushed) completion: the QP may still touch the memory
      case Wait::log:
      case Wait::send: close_entry(*k); break;  // the reply is dropped with the connection
    }
  }
}

void ServerConn::close_entry(Key k) noexcept {
  Pending* p = pending_.find(k);
  if (p == nullptr) return;
  switch (p->wait) {
    case Wait::read:
    case Wait::write:
      --transfers_in_flight_;
      break;
    case Wait::log:
      durable_waits_ -= p->records;
      break;
    case Wait::send: break;
    case Wait::invalidate:  // its grant is used up: the block goes with the entry
      grants_[p->grant].reset();
      break;
  }
  pending_.erase(k);
}

void ServerConn::finish(Key k) noexcept {
  Pending& p = *pending_.find(k);
  if (p.grant_for != 0) offer_grant(p);  // before its size is known: the grant rides in it
  if (queued_.empty() && channel_.can_append(proto::encoded_size(p.reply))) {
    if (append_reply(p.reply, p.op, p.received, p.large_request)) close_entry(k);
    return;
  }
  try {
    queued_.push_back(k);
  } catch (const std::bad_alloc&) {
    return fail(CloseCause::internal, "out of memory queueing a reply");
  }
  p.wait = Wait::send;
}

bool ServerConn::post_receive(std::uint32_t slot) noexcept {
  const int rc = posted_.make_room() ? channel_.repost(slot) : ENOMEM;
  if (rc != 0) {
    drop(slot);
    fail(CloseCause::post_error, fmt::format("post_recv failed: errno {}", rc));
    return false;
  }
  posted_.push(slot);
  return true;
}

void ServerConn::drop(std::uint32_t slot) noexcept {
  recv_->give_back(slot);
  --allowance_;
}

void ServerConn::size_credits() noexcept {
  const std::uint64_t unspent = granted_ - received_;  // received_ <= granted_: checked
  if (unspent == 0 && allowance_ < max_credits()) {  // it spent its last credit
    grow_credits();
    shrink_ = 0;
    window_ = 0;
    low_water_ = allowance_;
    return;
  }
  low_water_ = std::min<std::uint64_t>(low_water_, unspent);
  if (++window_ < allowance_) return;
  // A whole allowance of SENDs and the client never spent half its credits:
  // the half it never touched goes back (by recycle(), as buffers come free).
  if (low_water_ >= allowance_ / 2) shrink_ = static_cast<std::uint32_t>(low_water_ / 2);
  window_ = 0;
  low_water_ = allowance_;
}

bool ServerConn::recycle(std::uint32_t slot) noexcept {
  if (shrink_ > 0 && allowance_ > config_.credits) {
    --shrink_;
    drop(slot);
    ++counters_->credit_shrinks;
    return true;
  }
  shrink_ = 0;
  if (!post_receive(slot)) return false;
  ++owed_;
  return true;
}

void ServerConn::grow_credits() noexcept {
  const std::uint32_t more = std::min(allowance_, max_credits() - allowance_);
  for (std::uint32_t i = 0; i < more; ++i) {
    std::uint32_t slot = 0;
    if (!recv_->take(slot)) {
      SPDLOG_DEBUG("conn {}: no receive buffer to grow its credits past {}", config_.label, allowance_);
      return;
    }
    ++allowance_;
    if (!post_receive(slot)) return;
    ++owed_;  // posted before it is granted: the credit is backed when the client sees it
    ++counters_->credit_grows;
  }
}

Verdict ServerConn::on_completion(const verbs::Completion& c) noexcept {
  const bool was_serving = serving();
  if (!c.wr_id.is_current(config_.generation)) {
    ++counters_->stale_completions;
    SPDLOG_DEBUG("conn {}: dropping stale completion (generation {} != {})", config_.label,
                 c.wr_id.generation(), config_.generation);
    return Verdict::keep;
  }
  switch (c.wr_id.kind()) {
    case WrKind::recv: on_recv(c); break;
    case WrKind::send: on_send(c); break;
    case WrKind::rdma_read:
    case WrKind::rdma_write: on_transfer(c); break;
    case WrKind::window: on_window(c); break;
    case WrKind::none:
      ++counters_->stale_completions;
      fail(CloseCause::internal, fmt::format("completion of a WR kind never posted: {}", to_string(c.wr_id.kind())));
      break;
  }
  return decided_if(was_serving);
}

void ServerConn::on_recv(const verbs::Completion& c) noexcept {
  if (!posted_.remove(c.wr_id.slot())) {
    ++counters_->stale_completions;
    return;
  }
  if (!serving() || !c.ok()) drop(c.wr_id.slot());  // not executed
  if (!serving()) return;  // flushed while closing: normal
  if (!c.ok()) {
    if (c.status == CompletionStatus::flushed) {
      return fail(CloseCause::completion_error, "receive flushed: the QP went to error");
    }
    return fail(CloseCause::completion_error,
                fmt::format("receive completion error: {} ({})", to_string(c.status), c.status_detail()));
  }
  state_ = ConnState::established;
  ++received_;
  ++counters_->sends_received;
  counters_->bytes_received += c.byte_len;
  if (received_ > granted_) {
    drop(c.wr_id.slot());
    return fail(CloseCause::credit_overrun,
                fmt::format("credit overrun: {} SENDs received, {} credits granted", received_, granted_));
  }
  size_credits();
  const auto slot = c.wr_id.slot();
  if (c.opcode == verbs::CompletionOpcode::recv_rdma_with_imm) return on_granted_write(c, slot);
  const auto bytes = recv_->buffer(slot).first(std::min<std::size_t>(c.byte_len, recv_->buffer_size()));

  // Validate the whole buffer before executing any of it. Then the memory
  // its requests' keys will touch starts loading (Store::probe, in three
  // passes over the first kProbes keys of a buffer of several).
  proto::Decoder check(bytes, config_.limits);
  std::array<store::Store::Probe, kProbes> probes;
  std::size_t probed = 0;
  for (;;) {
    const auto r = check.next();
    if (const auto* err = std::get_if<proto::DecodeError>(&r)) {
      drop(slot);
      return fail(CloseCause::protocol_error, fmt::format("malformed request at offset {} of a {}-byte SEND: {}",
                                                          err->offset, bytes.size(), to_string(err->reason)));
    }
    if (std::holds_alternative<proto::EndOfBuffer>(r)) break;
    const auto& m = std::get<proto::MessageView>(r);
    if (!proto::is_request(m.opcode())) {
      drop(slot);
      return fail(CloseCause::protocol_error, fmt::format("reply opcode {} at offset {} from a client",
                                                          to_string(m.opcode()), m.offset));
    }
    if (m.opcode() != Opcode::release) ++outstanding_;  // RELEASE gets no reply
    if (!m.key.empty() && probed < probes.size()) {
      probes[probed++] = {m.key.data(), m.key.size(), 0, m.opcode() == Opcode::set || m.opcode() == Opcode::del};
    }
  }
  if (probed == 1) {
    store_->probe_alone(probes[0].key(), probes[0].write);
  } else if (probed > 1) {
    for (std::size_t i = 0; i < probed; ++i) probes[i] = store_->probe(probes[i].key(), probes[i].write);
    for (std::size_t i = 0; i < probed; ++i) store_->probe_node(probes[i]);
    for (std::size_t i = 0; i < probed; ++i) store_->probe_value(probes[i]);
  }
  counters_->max_conn_outstanding = std::max(counters_->max_conn_outstanding, outstanding_);
  if (!held_.make_room()) {
    drop(slot);
    return fail(CloseCause::internal, "out of memory holding a received buffer");
  }
  held_.push({slot, bytes.size(), 0, Clock::now()});
  return process_held();
}

void ServerConn::on_send(const verbs::Completion& c) noexcept {
  const bool ours = channel_.on_send_completion(c);
  if (!ours) {
    ++counters_->stale_completions;
    return;
  }
  if (!serving()) return;
  if (!c.ok()) {
    return fail(CloseCause::completion_error,
                fmt::format("send completion error: {} ({})", to_string(c.status), c.status_detail()));
  }
  return process_held();  // a send buffer is free again
}

void ServerConn::no_send_buffer() noexcept {
  // A send completion of ours resumes a pause. With none of our buffers out
  // there is none to wait for: the shared pool could not grow.
  if (channel_.send_buffers() == 0) fail(CloseCause::internal, "no send buffer: the pool could not grow");
}

void ServerConn::process_held() noexcept {
  while (!queued_.empty() && serving()) {  // deferred replies first, in order
    const Key k = queued_.front();
    Pending& p = *pending_.find(k);  // queued entries close only here or with the connection
    if (!channel_.can_append(proto::encoded_size(p.reply))) {
      ++counters_->pauses;
      return no_send_buffer();
    }
    queued_.pop_front();
    if (!append_reply(p.reply, p.op, p.received, p.large_request)) return;
    close_entry(k);
  }
  while (!held_.empty()) {
    switch (process(held_.front())) {
      case Progress::finished: (void)held_.pop_front(); break;
      case Progress::paused:
        ++counters_->pauses;
        SPDLOG_DEBUG("conn {}: no send buffer free; {} received buffer(s) wait", config_.label, held_.size());
        return no_send_buffer();
      case Progress::failed: return;  // fail() decided
    }
  }
}

ServerConn::Progress ServerConn::process(Held& h) noexcept {
  if (h.grant != kNoGrant) return start_granted(h.grant, h.written, h.received) ? Progress::finished : Progress::failed;
  if (h.offset == h.len) {  // an empty SEND: nothing to answer, the buffer is free
    if (!recycle(std::exchange(h.slot, kRecycled))) return Progress::failed;
    return Progress::finished;
  }
  const auto bytes = std::span<const std::byte>(recv_->buffer(h.slot)).first(h.len);
  for (;;) {
    // on_recv validated the whole buffer and nothing writes it until it is
    // re-posted (below, after its last request): read each message again
    // without re-checking it.
    const proto::MessageView m = proto::view_validated(bytes, h.offset);
    if (m.size == 0 || m.size > h.len - h.offset) {  // cannot happen; never loop or overrun
      fail(CloseCause::internal, "held buffer no longer decodes");
      return Progress::failed;
    }
    proto::MessageSpec reply;
    executing_received_ = h.received;  // entries run() opens start their latency here
    const Outcome out = run(m, reply);
    if (out == Outcome::paused) return Progress::paused;  // h.offset stays here
    if (out == Outcome::failed) return Progress::failed;
    h.offset += m.size;
    const bool last = h.offset == h.len;
    // Every request of the buffer is executed: give it back now.
    if (last && !recycle(std::exchange(h.slot, kRecycled))) return Progress::failed;
    // No reply yet (a transfer answers on completion; RELEASE has none): the
    // credit rides on the next reply.
    if (out == Outcome::reply && !append_reply(reply, m.opcode(), h.received, m.rdv.has_value())) {
      return Progress::failed;
    }
    if (out == Outcome::pushed && !append_pushed(*std::exchange(pushed_, std::nullopt), h.received)) {
      return Progress::failed;
    }
    if (config_.reply_batch != 0 && !crowded_ && channel_.open_messages() >= config_.reply_batch &&
        flush() != Verdict::keep) {
      return Progress::failed;
    }
    if (last) return Progress::finished;
  }
}

std::optional<ServerConn::Key> ServerConn::open_entry(Pending p) noexcept {
  p.received = executing_received_;
  return pending_.try_insert(std::move(p));
}

namespace {
OpClass class_of(proto::Opcode request, const proto::MessageSpec& reply, bool large_request) noexcept {
  switch (request) {
    case Opcode::get: return reply.rdv ? OpClass::get_large : OpClass::get;
    case Opcode::set: return large_request ? OpClass::set_large : OpClass::set;
    case Opcode::del: return OpClass::del;
    case Opcode::call: return OpClass::call;
    default: return OpClass::other;
  }
}
}  // namespace

void ServerConn::record_posted() noexcept {
  if (unposted_.empty()) return;
  const Clock::time_point now = Clock::now();
  for (const Unposted& u : unposted_) config_.latency->record(u.cls, u.received, now);
  unposted_.clear();
}

bool ServerConn::append_reply(proto::MessageSpec& reply, proto::Opcode request, Clock::time_point received,
                              bool large_request) noexcept {
  reply.credits = static_cast<std::uint16_t>(owed_);
  if (reply.status != Status::ok) ++counters_->error_replies;
  if (const auto st = channel_.append(reply, proto::Origin::built); st != AppendStatus::ok) {
    fail(CloseCause::internal,
         fmt::format("reply to {} req {} not appended: {}", to_string(request), reply.req_id, to_string(st)));
    return false;
  }
  ++counters_->replies_sent;
  replied(class_of(request, reply, large_request), received);
  return true;
}

void ServerConn::replied(OpClass cls, Clock::time_point received) noexcept {
  // Grown as replies come (an idle connection holds none), up to
  // kMaxUnposted replies waiting for their posts (many send buffers queued):
  // past that, or without memory, those are timed now, a little early.
  if (unposted_.size() == unposted_.capacity()) {
    bool grown = false;
    if (unposted_.capacity() < kMaxUnposted) {
      try {
        unposted_.reserve(std::min(kMaxUnposted, std::max<std::size_t>(32, 2 * unposted_.capacity())));
        grown = true;
      } catch (const std::bad_alloc&) {
        // timed now instead
      }
    }
    if (!grown) record_posted();
  }
  const Unposted u{cls, received};
  if (unposted_.size() < unposted_.capacity()) {
    unposted_.push_back(u);
  } else {
    config_.latency->record(u.cls, u.received, Clock::now());
  }
  if (outstanding_ > 0) --outstanding_;
  granted_pending_ += owed_;
  owed_ = 0;
}

bool ServerConn::room_for(const proto::MessageView& m, proto::MessageSpec& reply) noexcept {
  std::size_t need = proto::encoded_size(reply);
  if (need > channel_.max_message() && m.opcode() != Opcode::release) {  // e.g. a small client receive buffer
    reply = proto::msg::error_reply(m.opcode(), m.header.req_id, 0, Status::too_large);
    need = proto::encoded_size(reply);
  }
  // A CALL's reply is known only once its handler ran: room for the largest eager one.
  if (m.opcode() == Opcode::call && reply.status == Status::ok) need = std::max(need, call_reply_room());
  return queued_.empty() && channel_.can_append(need);
}

// An eager SET or a DEL: its log entry (with a log) opened before anything
// changes, so a full table refuses it whole; then `write(wait id)`, then what
// its result means for `reply`. A template, so each request's write is
// inlined here.
template <class Write>
ServerConn::Outcome ServerConn::logged(Opcode op, std::uint32_t id, proto::MessageSpec& reply, Write&& write) noexcept {
  std::optional<Key> wait;
  if (durability_ != nullptr && !(wait = open_log_wait(op, id))) {
    reply = proto::msg::error_reply(op, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  const Written w = write(wait ? wait->pack32() : 0);
  if (w != Written::now && deferred(w, wait, op, reply)) return Outcome::no_reply;
  if (wait) close_entry(*wait);
  return Outcome::reply;
}

namespace {

// What a request does to its key, as the shard gate asks (none: not a keyed
// request; a CALL's key is its opcode, its handler's accesses are checked).
std::optional<ShardGate::Access> key_access(const proto::MessageView& m) noexcept {
  switch (m.opcode()) {
    case Opcode::set:
    case Opcode::del:
    case Opcode::expire: return ShardGate::Access::write;
    case Opcode::get: return m.header.backup_read() ? ShardGate::Access::backup_read : ShardGate::Access::read;
    case Opcode::ttl: return ShardGate::Access::read;
    case Opcode::stats:
    case Opcode::release:
    case Opcode::call:
    case Opcode::touch:  // hints, never answered
    case Opcode::set_reply:
    case Opcode::get_reply:
    case Opcode::stats_reply:
    case Opcode::del_reply:
    case Opcode::call_reply:
    case Opcode::expire_reply:
    case Opcode::ttl_reply:
    case Opcode::touch_reply: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

ServerConn::Outcome ServerConn::run(const proto::MessageView& m, proto::MessageSpec& reply) noexcept {
  const std::uint32_t id = m.header.req_id;
  ShardGate::Admission admission;
  if (const auto access = key_access(m)) {
    admission = config_.gate->admit(m.key, *access, m.epoch);
    if (!admission.admitted) {
      reply = proto::msg::error_reply(m.opcode(), id, 0, Status::not_owner);  // nothing done: the client places it again
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->not_owner;
      return Outcome::reply;
    }
  }
  if (m.epoch != 0) record_shard_ = admission.shard;
  switch (m.opcode()) {
    case Opcode::set:
      reply = proto::msg::set_reply(id, 0);
      if (!room_for(m, reply) || (m.rdv && transfers_full())) return Outcome::paused;  // a READ/WRITE completes first
      ++counters_->messages_received;
      ++counters_->sets;
      if (m.epoch != 0) ++counters_->records_applied;  // a backup applies it as the primary did
      if (m.rdv) return execute_set_rdv(m, reply);
      if (reply.status != Status::ok) return Outcome::reply;
      return logged(Opcode::set, id, reply,  // `reply` is the SET_REPLY already
                    [&](std::uint32_t wait) { return store_value(m.key, m.value_text(), expiry_of(m), wait); });
    case Opcode::get: {
      const auto hit = store_->get(m.key);
      reply = !hit.found   ? proto::msg::get_reply_missing(id, 0)
              : hit.large  ? proto::msg::get_reply_pull(id, 0, {}, hit.value.size())  // the largest it can become
                           : proto::msg::get_reply_found(id, 0, proto::as_bytes(hit.value));
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->gets;
      if (admission.role == proto::ShardRole::backup) ++counters_->backup_gets;  // an in-sync backup answered it
      if (!hit.found || reply.status != Status::ok) return Outcome::reply;
      ++counters_->get_hits;
      return hit.large ? execute_get_large(m, hit.large, reply) : Outcome::reply;
    }
    case Opcode::release:
      reply = proto::msg::set_reply(id, 0);  // none is sent; sized like one
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      return execute_release(m);
    case Opcode::stats:
      try {
        stats_text_ = store::format_stats_lines(config_.stats());
        reply = proto::msg::stats_reply(id, 0, stats_text_);
      } catch (const std::bad_alloc&) {
        reply = proto::msg::error_reply(Opcode::stats, id, 0, Status::no_memory);
      }
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->stats;
      return Outcome::reply;
    case Opcode::del:
      reply = proto::msg::del_reply(id, 0, false);  // the erase says whether it was found
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->dels;
      if (m.epoch != 0) ++counters_->records_applied;
      return logged(Opcode::del, id, reply, [&](std::uint32_t wait) {
        const Removal r = remove_key(m.key, wait);
        if (r.found) ++counters_->del_hits;
        reply = proto::msg::del_reply(id, 0, r.found);
        return r.written;
      });
    case Opcode::expire:
      reply = proto::msg::expire_reply(id, 0, false);  // the Store says whether it was found
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->expires;
      if (m.epoch != 0) ++counters_->records_applied;
      return logged(Opcode::expire, id, reply, [&](std::uint32_t wait) {
        const Removal r = expire_key(m.key, expiry_of(m), wait);
        reply = proto::msg::expire_reply(id, 0, r.found);
        return r.written;
      });
    case Opcode::ttl: {
      const auto left = store_->ttl(m.key);
      reply = proto::msg::ttl_reply(id, 0, !left ? std::nullopt
                                           : *left < 0 ? std::optional{proto::kNoTtl}
                                                       : std::optional{static_cast<std::uint64_t>(*left)});
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      ++counters_->ttls;
      return Outcome::reply;
    }
    case Opcode::touch:
      reply = proto::msg::touch_reply(id, 0);
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      execute_touch(m);
      return Outcome::reply;
    case Opcode::call:  // sized as a pulled reply; room_for keeps room for an eager one
      reply = proto::msg::call_reply_pull(id, 0, {}, 0);
      if (!room_for(m, reply) || (m.rdv && transfers_full())) return Outcome::paused;
      ++counters_->messages_received;
      return execute_call(m, reply);
    case Opcode::set_reply:
    case Opcode::get_reply:
    case Opcode::stats_reply:
    case Opcode::del_reply:
    case Opcode::call_reply:
    case Opcode::expire_reply:
    case Opcode::ttl_reply:
    case Opcode::touch_reply:  // refused on arrival (on_recv); answered bad_request if one ever got here
      reply = proto::msg::error_reply(m.opcode(), id, 0, Status::bad_request);
      if (!room_for(m, reply)) return Outcome::paused;
      ++counters_->messages_received;
      return Outcome::reply;
  }
  return Outcome::failed;
}

void ServerConn::execute_touch(const proto::MessageView& m) noexcept {
  // The packed list: u16 LE length + key bytes, each; a malformed tail is
  // ignored (hints only: nothing is answered, nothing can go wrong for anyone).
  const auto b = m.value;
  std::size_t p = 0;
  while (b.size() - p >= 2) {
    const std::size_t n = proto::load_le<std::uint16_t>(b, p);
    p += 2;
    if (n == 0 || n > proto::kMaxKey || n > b.size() - p) break;
    ++counters_->touches;
    (void)store_->touch_key(proto::as_string_view(b.subspan(p, n)));
    p += n;
  }
}

Verdict ServerConn::on_durable(std::uint32_t wait, Status status) noexcept {
  const Key k = Key::unpack32(wait);
  Pending* p = serving() ? pending_.find(k) : nullptr;
  if (p == nullptr || p->wait != Wait::log || p->records == 0) {
    ++counters_->stale_completions;
    return Verdict::keep;
  }
  --p->records;
  --durable_waits_;
  if (p->failed == Status::ok) p->failed = status;
  if (p->records != 0) return Verdict::keep;  // a CALL's other records
  if (p->failed != Status::ok) {
    if (p->failed == Status::io_error) ++counters_->io_errors;  // (moved: the Replicator's repl_failed_writes)
    pulls_.erase(p->req_id);  // a pulled CALL reply the client will never see: no RELEASE comes
    p->reply = proto::msg::error_reply(p->op, p->req_id, 0, p->failed);
  }
  finish(k);
  process_held();
  return decided_if(true);
}

Verdict ServerConn::flush() noexcept {
  if (!serving()) return Verdict::keep;  // closing: post nothing new
  int err = 0;
  counters_->sends_posted += channel_.flush(std::numeric_limits<std::size_t>::max(), &err);
  if (err != 0) {
    fail(CloseCause::post_error, fmt::format("post of the replies and transfers failed: errno {}", err));
    return Verdict::disconnect;
  }
  arena_->top_up();  // replies are on the wire: grow the arena now, if it must
  if (channel_.queued_sends() == 0) {  // every reply appended so far is on the wire
    granted_ += granted_pending_;
    granted_pending_ = 0;
    record_posted();
  }
  return Verdict::keep;
}

}  // namespace rkv::kv::server
