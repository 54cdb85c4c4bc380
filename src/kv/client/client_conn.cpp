// ClientConn: see client_conn.hpp. Reactor thread only.
#include "kv/client/client_conn.hpp"
#include "proto/endian.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <exception>
#include <optional>
#include <utility>
#include <variant>

#include "proto/connect_params.hpp"
#include "proto/decode.hpp"
#include "proto/copy.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::client {

using conn::AppendStatus;
using conn::BufferPool;
using conn::Link;
using conn::Registrar;

std::string_view to_string(ConnState s) noexcept {
  switch (s) {
    case ConnState::connecting: return "connecting";
    case ConnState::accepted: return "accepted";
    case ConnState::established: return "established";
    case ConnState::failed: return "failed";
    case ConnState::disconnected: return "disconnected";
    case ConnState::closing: return "closing";
    case ConnState::closed: return "closed";
  }
  return "invalid";
}

ClientConn::ClientConn(Link& link, BufferPool& recv, BufferPool& send, Registrar* registrar, RdvOptions rdv,
                       std::uint32_t generation)
    : link_(&link),
      registrar_(registrar),
      rdv_(rdv),
      cache_(registrar != nullptr ? std::make_unique<RegCache>(*registrar, rdv.reg_cache_bytes) : nullptr),
      recv_(&recv),
      channel_(link, recv, send, generation),
      slots_(std::min<std::uint32_t>(recv.count(), kMaxSlots)),
      scratch_(recv.buffer_size()) {
  // One READ per slot at most: room for twice that, so the data path never
  // grows it (fifo_vector.hpp).
  if (!reads_posted_.make_room(2 * std::size_t{slots_.max_slots()})) throw std::bad_alloc();
  channel_.count_value_copies(&counters_.bytes_copied);  // eager values, counted by their copy
  channel_.count_posted({.reads = &counters_.rdma_reads,
                         .transfer_posts = &counters_.read_posts,
                         .transfers_unsignaled = &counters_.reads_unsignaled});
  channel_.set_transfer_signaling({.reads = kReadSignalInterval, .writes = kReadSignalInterval}, &reads_posted_);
}

ClientConn::~ClientConn() = default;

ClientConn::Slot& ClientConn::live_slot(SlotKey key) noexcept {
  Slot* s = slots_.find(key);
  assert(s != nullptr && "ClientConn: a request slot used after it was freed");
  return *s;
}

int ClientConn::post_receives() noexcept {
  for (std::uint32_t i = 0; i < recv_->count(); ++i) {
    if (int rc = channel_.repost(i); rc != 0) return rc;
    ++recvs_posted_;
  }
  return 0;
}

void ClientConn::on_accepted() noexcept {
  if (state_ == ConnState::connecting) state_ = ConnState::accepted;
}

void ClientConn::on_established(std::uint16_t credits, std::uint32_t server_recv_size, std::uint64_t max_value,
                                std::uint16_t features) noexcept {
  if (state_ != ConnState::accepted) return;
  credits_ = credits;
  max_value_ = max_value;
  if ((features & proto::kFeatureGrants) == 0) {  // it will not grant: a grant from it is a protocol error
    tail_reg_.reset();
    tail_mem_ = {};
  }
  channel_.set_peer_recv_size(server_recv_size);
  state_ = ConnState::established;
  replenish();
  SPDLOG_DEBUG("client: established, {} credits, server recv size {}, max in flight {}", credits,
               server_recv_size, slots_.max_slots());
}

Status ClientConn::submit_set(std::string_view key, std::span<const std::byte> value, Callback cb, Path* path,
                              std::uint64_t ttl_ms) {
  return submit(proto::Opcode::set, key, value, std::move(cb), path, ttl_ms);
}

Status ClientConn::submit_get(std::string_view key, Callback cb) {
  return submit(proto::Opcode::get, key, {}, std::move(cb));
}

Status ClientConn::submit_get_into(std::string_view key, std::span<std::byte> into, Callback cb) {
  Into dst;
  dst.on = true;
  dst.bytes = into;
  // A value that may not come in a message (key + value past the eager
  // limit: stored large) is written or read into the buffer: register it for
  // this request only. Kept cached, a remote_write registration of the
  // caller's memory would outlive the request (reg_cache.hpp's caveat).
  if (registrar_ != nullptr && !into.empty() && !proto::eager_fits(key.size(), into.size()) &&
      !ended() && !key.empty() && key.size() <= proto::kMaxKey) {
    try {
      dst.reg = registrar_->register_memory(into, verbs::Access::local_write | verbs::Access::remote_write);
    } catch (const std::exception& e) {
      spdlog::warn("client: registering a {}-byte GET destination failed: {}", into.size(), e.what());
      ++counters_.refused;
      return Status::no_memory;
    }
  }
  const Status st = submit(proto::Opcode::get, key, {}, std::move(cb));
  if (st != Status::ok) return st;  // the registration ends here
  queue_.back().into = std::move(dst);  // submit queued it last (nothing flushes inside)
  ++counters_.gets_into;
  return Status::ok;
}

Status ClientConn::submit_del(std::string_view key, Callback cb) {
  return submit(proto::Opcode::del, key, {}, std::move(cb));
}

Status ClientConn::submit_expire(std::string_view key, std::uint64_t ttl_ms, Callback cb) {
  return submit(proto::Opcode::expire, key, {}, std::move(cb), nullptr, ttl_ms);
}

Status ClientConn::submit_record(proto::Opcode op, std::string_view key, std::span<const std::byte> value,
                                 std::uint64_t ttl_ms, std::uint64_t epoch, Callback cb, Path* path) {
  const bool write = op == proto::Opcode::set || op == proto::Opcode::del || op == proto::Opcode::expire;
  if (!write || epoch == 0 || (op != proto::Opcode::set && !value.empty())) {
    ++counters_.refused;
    return Status::bad_request;
  }
  return submit(op, key, value, std::move(cb), path, ttl_ms, epoch);
}

Status ClientConn::submit_ttl(std::string_view key, Callback cb) {
  return submit(proto::Opcode::ttl, key, {}, std::move(cb));
}

std::int64_t ClientConn::ttl_of(std::span<const std::byte> value) noexcept {
  if (value.size() != kTtlValueSize) return -1;
  return static_cast<std::int64_t>(proto::load_le<std::uint64_t>(value, 0));
}

Status ClientConn::submit_call(std::uint16_t op, std::span<const std::byte> request, Callback cb, Path* path) {
  const auto key = proto::call_op_key(op);
  return submit(proto::Opcode::call, std::string_view(key.data(), key.size()), request, std::move(cb), path);
}

Status ClientConn::submit_stats(Callback cb) { return submit(proto::Opcode::stats, {}, {}, std::move(cb)); }

Status ClientConn::submit(proto::Opcode op, std::string_view key, std::span<const std::byte> value, Callback cb,
                          Path* path_out, std::uint64_t ttl, std::uint64_t epoch) {
  // Only SET and CALL carry a value, so only they can go by rendezvous.
  const Path path = op == proto::Opcode::get && onesided()          ? Path::onesided
                    : proto::eager_fits(key.size(), value.size()) ? Path::eager
                                                                  : Path::rendezvous;
  Status st = Status::ok;
  if (ended()) {
    st = Status::not_connected;
  } else if (op != proto::Opcode::stats && (key.empty() || key.size() > proto::kMaxKey)) {
    st = Status::bad_key;
  } else if (ttl > proto::kMaxTtlMs) {
    st = Status::bad_request;
  } else if (path == Path::rendezvous) {
    // Rendezvous: the server READs the value from this (registered) buffer.
    if (registrar_ == nullptr || (max_value_ != 0 && value.size() > max_value_)) st = Status::too_large;
  } else if (state_ == ConnState::established &&
             proto::kHeaderSize + key.size() + (ttl != 0 ? proto::kTtlSize : 0) +
                     (epoch != 0 ? proto::kEpochSize : 0) + value.size() >
                 channel_.max_message()) {
    st = Status::too_large;  // the server's receive buffers are smaller than this request
  }
  RegCache::Lease lease;
  if (st == Status::ok && path == Path::rendezvous) {
    // The rkey travels in the SET: this registration (or cache hit) must precede the SEND.
    try {
      lease = cache_->acquire(value, verbs::Access::remote_read);
    } catch (const std::exception& e) {
      spdlog::warn("client: registering a {}-byte {} value failed: {}", value.size(), proto::to_string(op), e.what());
      st = Status::no_memory;
    }
  }
  if (st != Status::ok) {
    ++counters_.refused;
    return st;
  }
  queue_.push_back(Request{op, std::string(key), value, std::move(cb), std::move(lease), path, {}, ttl, {}, epoch});
  ++counters_.requests;
  if (path_out != nullptr) *path_out = path;
  SPDLOG_TRACE("client: queued {} key_len {} value_len {}", proto::to_string(op), key.size(), value.size());
  return Status::ok;
}

std::size_t ClientConn::flush() noexcept {
  if (state_ != ConnState::established) return 0;
  // Hints ride with a message request, or go alone once a batch waits.
  if (!touches_.empty() &&
      (touch_keys_ >= kTouchBatch ||
       std::any_of(queue_.begin(), queue_.end(), [](const Request& r) { return r.path != Path::onesided; }))) {
    queue_touch();
  }
  if (queue_.empty() && releases_.empty()) {
    post(0);  // READs decided in the CQ pass that ends with this flush
    return 0;
  }
  // The channel holds nothing unposted between flushes (each flush posts all
  // it appended), so its buffer filling is mirrored here exactly: a message
  // opens a new SEND when it does not fit the open one; each SEND is a credit.
  const std::size_t max_msg = channel_.max_message();
  std::size_t new_sends = 0;
  std::size_t open_used = 0;
  std::uint64_t in_current = 0;
  bool credit_limited = false;
  std::size_t spent = 0;  // SENDs posted and granted SETs queued: the credits this flush spent
  // Posts the queued transfers and the new SENDs (which come after every
  // transfer queued so far: a granted SET calls it first when SENDs precede it).
  auto post_sends = [&]() noexcept {
    const std::size_t posted = post(new_sends);  // the READs first in the chain: they need no server wake-up
    credits_ -= static_cast<std::uint32_t>(posted);
    counters_.sends_posted += posted;
    spent += posted;
    new_sends = 0;
    open_used = 0;
    in_current = 0;
  };
  // One message appended: it opened a new SEND or joined the open one.
  auto appended = [&](bool new_buffer, std::size_t need) noexcept {
    if (new_buffer) {
      ++new_sends;
      open_used = 0;
      in_current = 0;
    }
    open_used += need;
    ++in_current;
  };
  // RELEASEs first (they free server memory). One alone may not take the last
  // credit: nothing would return it. With a request behind it that goes in a
  // SEND (not a one-sided GET's READs, not a SET into a grant), it shares its SEND.
  const bool request_follows = !queue_.empty() && queue_.front().path != Path::onesided &&
                               granted_fit(queue_.front()) == kNoGrant;
  while (!releases_.empty()) {
    const proto::MessageSpec spec = proto::msg::release(releases_.front());
    const std::size_t need = proto::encoded_size(spec);
    const bool new_buffer = new_sends == 0 || open_used + need > max_msg;
    const std::uint32_t left = credits_ - static_cast<std::uint32_t>(new_sends);
    if (new_buffer && (left == 0 || (left == 1 && !request_follows))) break;
    if (channel_.append(spec) != AppendStatus::ok) break;  // no send buffer: after a send completion
    appended(new_buffer, need);
    ++counters_.messages_sent;
    ++counters_.releases_sent;
    releases_.pop_front();
  }
  while (!queue_.empty() && !slots_.full()) {
    // The request's slot is taken first (its key is the req_id the message
    // carries) and erased again if the request does not go out now.
    const std::optional<SlotKey> taken_key = slots_.try_insert(Slot{});
    if (!taken_key) break;  // out of memory: the request stays queued
    const SlotKey key = *taken_key;
    Request& r = queue_.front();
    if (r.path == Path::onesided) {  // RDMA READs only: no credit, no send buffer; posted below, chained
      Request taken = std::move(r);
      queue_.pop_front();
      start_onesided(key, taken);
      continue;
    }
    if (const std::size_t g = granted_fit(r); g != kNoGrant) {
      if (new_sends >= credits_) {
        credit_limited = true;
        free_slot(key);
        break;
      }
      // The SENDs appended before it go first: the server takes requests in
      // the order their SENDs and WRITEs with immediate arrive.
      if (new_sends > 0) post_sends();
      if (ended()) return spent;  // the post failed the connection
      Request taken = std::move(r);
      queue_.pop_front();
      queue_granted_set(key, taken, g);
      if (ended()) return spent;
      ++spent;
      continue;
    }
    Slot& s = live_slot(key);
    const proto::MessageSpec spec = request_spec(r, req_id(key), s);
    const std::size_t need = proto::encoded_size(spec);
    if (need > max_msg) {  // queued before the server's limit was known
      free_slot(key);  // recycles an offered landing buffer
      Request dead = std::move(queue_.front());
      queue_.pop_front();
      finish(Status::too_large, false, {}, dead.cb);
      if (state_ != ConnState::established) return 0;
      continue;
    }
    const bool new_buffer = new_sends == 0 || open_used + need > max_msg;
    if (new_buffer && new_sends == credits_) {
      credit_limited = true;
      free_slot(key);  // an offered landing buffer goes back
      break;
    }
    const AppendStatus ap = channel_.append(spec);
    if (ap != AppendStatus::ok) free_slot(key);
    if (ap == AppendStatus::no_buffer) break;  // resumes after a send completion
    if (ap != AppendStatus::ok) {
      spdlog::error("client: encoder refused a {} request: {}", proto::to_string(r.op), to_string(ap));
      Request dead = std::move(queue_.front());
      queue_.pop_front();
      finish(Status::bad_request, false, {}, dead.cb);
      if (state_ != ConnState::established) return 0;
      continue;
    }
    appended(new_buffer, need);
    counters_.max_coalesced = std::max(counters_.max_coalesced, in_current);
    s.op = r.op;
    s.cb = std::move(r.cb);
    s.lease = std::move(r.lease);
    s.into = std::move(r.into);
    if (r.op == proto::Opcode::set || r.op == proto::Opcode::call) {
      if (r.op == proto::Opcode::call) ++counters_.calls;
      if (r.path == Path::rendezvous) {
        ++(r.op == proto::Opcode::set ? counters_.sets_large : counters_.calls_large);
      }
    }
    ++counters_.messages_sent;
    queue_.pop_front();
  }
  if (credit_limited) ++counters_.credit_stalls;
  post_sends();
  if (spent == 0 || ended()) return spent;  // nothing for the server (READs only), or the post failed the connection
  // The SENDs are on the wire: registration work happens while they fly.
  retired_.clear();
  replenish();
  SPDLOG_TRACE("client: posted {} sends and granted SETs, {} credits left, {} in flight, {} queued", spent,
               credits_, slots_.live(), queue_.size());
  return spent;
}

void ClientConn::on_completion(const verbs::Completion& c) noexcept {
  switch (c.wr_id.kind()) {
    case verbs::WrKind::recv:
      on_recv(c);
      return;
    case verbs::WrKind::send:
      channel_.on_send_completion(c);
      break;
    case verbs::WrKind::rdma_read:
    case verbs::WrKind::rdma_write:  // a granted SET's
      on_transfer(c);
      return;
    case verbs::WrKind::none:
    case verbs::WrKind::window:
      SPDLOG_DEBUG("client: unexpected {} completion", verbs::to_string(c.wr_id.kind()));
      break;
  }
  if (c.ok() || ended()) return;
  try {
    fail(fmt::format("{} completion {}: {}", verbs::to_string(c.wr_id.kind()), verbs::to_string(c.status),
                     c.status_detail()));
  } catch (...) {
    fail("work completion error");
  }
}

void ClientConn::on_recv(const verbs::Completion& c) noexcept {
  const auto r = channel_.received(c);
  if (!r) {
    SPDLOG_DEBUG("client: dropping a stale receive completion");
    return;
  }
  if (recvs_posted_ > 0) --recvs_posted_;
  if (ended()) return;  // teardown flushes
  if (!c.ok()) {
    try {
      fail(fmt::format("recv completion {}: {}", verbs::to_string(c.status), c.status_detail()));
    } catch (...) {
      fail("recv completion error");
    }
    return;
  }
  ++counters_.recv_completions;
  // A large GET's value WRITTEN with its reply in the immediate: nothing is
  // in the buffer (byte_len is the length written).
  const bool written = c.opcode == verbs::CompletionOpcode::recv_rdma_with_imm;
  // Copy, then re-post at once: a callback below may submit, and the reply to
  // that must find a posted receive. The views handed to callbacks point into
  // scratch_, which no completion can overwrite.
  const std::size_t n = written ? 0 : std::min(r->bytes.size(), scratch_.size());
  proto::copy_bytes(std::span<std::byte>(scratch_).first(n), r->bytes.first(n));
  if (int rc = channel_.repost(r->slot); rc != 0) {
    fail(std::string("post_recv failed: ") + std::strerror(rc));
    return;
  }
  ++recvs_posted_;
  if (written) {
    on_written(proto::unpack_written_reply(c.imm), c.byte_len);
    return;
  }
  handle_replies(std::span<const std::byte>(scratch_.data(), n));
}

bool ClientConn::handle_replies(std::span<const std::byte> bytes) noexcept {
  proto::Decoder dec(bytes);
  for (;;) {
    const proto::DecodeResult res = dec.next();
    if (std::holds_alternative<proto::EndOfBuffer>(res)) return true;
    if (const auto* e = std::get_if<proto::DecodeError>(&res)) {
      fail(std::string("malformed reply: ") + std::string(proto::to_string(e->reason)));
      return false;
    }
    const auto& m = std::get<proto::MessageView>(res);
    const proto::Opcode op = m.opcode();
    if (proto::is_request(op)) {
      fail(std::string("unexpected message from the server: ") + std::string(proto::to_string(op)));
      return false;
    }
    const SlotKey key = SlotKey::unpack32(m.header.req_id);
    Slot* const found_slot = slots_.find(key);
    if (found_slot == nullptr) {
      fail("reply for an unknown or stale req_id " + std::to_string(m.header.req_id));
      return false;
    }
    Slot& s = *found_slot;
    if (s.stage != Stage::reply) {  // a one-sided GET (no message sent) or a pull already answered
      fail("reply for req_id " + std::to_string(m.header.req_id) + ", which awaits no reply");
      return false;
    }
    if (proto::reply_opcode(s.op) != op) {
      fail("reply opcode " + std::string(proto::to_string(op)) + " does not answer a " +
           std::string(proto::to_string(s.op)));
      return false;
    }
    if (m.header.rdv() && op != proto::Opcode::get_reply && op != proto::Opcode::call_reply) {
      fail("rendezvous descriptor on a " + std::string(proto::to_string(op)));
      return false;
    }
    credits_ += m.header.credits;
    ++counters_.replies;
    if (m.grant && !keep_grant(*m.grant, m.header.value_len)) return false;
    if (m.header.rdv()) {
      if (!on_get_rdv(key, m.header, *m.rdv)) return false;
      if (ended()) return true;
      continue;
    }
    Callback cb = std::move(s.cb);
    free_slot(key);  // recycles a landing buffer offered but not used (eager value, miss, error)
    const Status st = from_wire(m.header.status);
    const bool call_ok = op == proto::Opcode::call_reply && st == Status::ok;
    // FOUND is allowed only where it means "the key exists" (the decoder checked).
    const bool found = m.found() || call_ok;
    SPDLOG_TRACE("client: reply req_id {} {} found {} value_len {} credits +{}", m.header.req_id,
                 to_string(st), found, m.value.size(), m.header.credits);
    std::array<std::byte, kTtlValueSize> ttl{};
    std::span<const std::byte> value;
    if ((found && op == proto::Opcode::get_reply) || op == proto::Opcode::stats_reply || call_ok) {
      value = m.value;
    } else if (found && op == proto::Opcode::ttl_reply) {  // the remaining ms (kNoTtl: -1) as the value
      proto::store_le<std::uint64_t>(ttl, 0, m.ttl);
      value = ttl;
    }
    finish(st, found, value, cb);
    // A callback that closed or failed the connection already completed the rest.
    if (ended()) return true;
  }
}

void ClientConn::finish(Status st, bool found, std::span<const std::byte> value, Callback& cb) noexcept {
  ++counters_.completed;
  if (!cb) return;
  try {
    cb(st, found, value);
  } catch (const std::exception& e) {
    spdlog::error("client: completion callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("client: completion callback threw");
  }
}

void ClientConn::complete_all(Status st) noexcept {
  // Take everything out first: callbacks may submit (refused now) or close.
  std::vector<Callback> cbs;
  try {
    cbs.reserve(slots_.live() + queue_.size());
  } catch (...) {
    // reserve is an optimisation; push_back below may still throw, so finish in place.
  }
  for (std::uint32_t i = 0; i < slots_.slot_count(); ++i) {
    const std::optional<SlotKey> key = slots_.key_at(i);
    if (!key) continue;
    Callback cb = std::move(live_slot(*key).cb);
    // Erasing destroys the slot: its lease ends and its landing buffer is
    // deregistered here, so no DMA reaches it afterwards. A READ's flush
    // completion only lowers reads_in_flight_ (its key is stale now anyway).
    slots_.erase(*key);
    try {
      cbs.push_back(std::move(cb));
    } catch (...) {
      finish(st, false, {}, cb);
    }
  }
  std::deque<Request> queued = std::move(queue_);
  queue_.clear();
  channel_.drop_queued_rdma([](verbs::WrId) {});  // never posted; their slots are gone (posted ones still flush)
  releases_.clear();  // the server drops its pins with the connection
  for (auto& cb : cbs) finish(st, false, {}, cb);
  for (auto& r : queued) finish(st, false, {}, r.cb);
}

ClientCounters ClientConn::counters() const noexcept {
  ClientCounters c = counters_;
  // Mirrors of what the registrar and the pin-down cache count themselves.
  if (registrar_ != nullptr) c.registrations = registrar_->registrations();
  if (cache_) {
    const RegCacheStats cs = cache_->stats();
    c.reg_cache_hits = cs.hits;
    c.reg_cache_misses = cs.misses;
  }
  return c;
}

bool ClientConn::ended() const noexcept {
  switch (state_) {
    case ConnState::connecting:
    case ConnState::accepted:
    case ConnState::established:
      return false;
    case ConnState::failed:
    case ConnState::disconnected:
    case ConnState::closing:
    case ConnState::closed:
      return true;
  }
  return true;
}

void ClientConn::end_requests(ConnState to, std::string_view reason) noexcept {
  state_ = to;
  try {
    failure_.assign(reason);
  } catch (...) {
    failure_.clear();
  }
  spdlog::warn("client: connection failed: {} ({} requests pending)", reason, pending());
  complete_all(Status::connection_failed);
}

void ClientConn::fail(std::string_view reason) noexcept {
  switch (state_) {
    case ConnState::connecting:
      end_requests(ConnState::disconnected, reason);  // no rdma_cm connection yet
      return;
    case ConnState::accepted:
    case ConnState::established:
      end_requests(ConnState::failed, reason);
      return;
    case ConnState::failed:
    case ConnState::disconnected:
    case ConnState::closing:
    case ConnState::closed:
      return;
  }
}

void ClientConn::close() noexcept {
  switch (state_) {
    case ConnState::connecting:
    case ConnState::disconnected:
      state_ = ConnState::closed;
      break;
    case ConnState::accepted:
    case ConnState::established:
    case ConnState::failed:
      state_ = ConnState::closing;
      break;
    case ConnState::closing:
    case ConnState::closed:
      return;
  }
  complete_all(Status::closed);
}

bool ClientConn::on_disconnected() noexcept {
  ++counters_.disconnects;
  switch (state_) {
    case ConnState::connecting:
    case ConnState::accepted:
    case ConnState::established:
      // Its callbacks may close(): disconnected -> closed.
      end_requests(ConnState::disconnected, "the server closed the connection");
      return true;
    case ConnState::failed:
      state_ = ConnState::disconnected;
      return true;
    case ConnState::closing:
      state_ = ConnState::closed;
      return true;
    case ConnState::disconnected:
    case ConnState::closed:
      return false;
  }
  return false;
}

void ClientConn::cm_done() noexcept {
  if (state_ != ConnState::closing) return;
  state_ = ConnState::closed;
  ++counters_.unconfirmed_disconnects;
}

}  // namespace rkv::kv::client
