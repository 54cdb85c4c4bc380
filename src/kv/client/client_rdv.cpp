// ClientConn, rendezvous part (docs/protocol.md, "Rendezvous path"): SET
// descriptors, landing buffers offered with GETs, the pull path (RDMA READ +
// RELEASE), and handing a landed value to the caller without a copy.
// Reactor thread only.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "kv/client/client_conn.hpp"
#include "proto/crc32c.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::client {

proto::MessageSpec ClientConn::request_spec(Request& r, std::uint32_t id, Slot& s) noexcept {
  if (r.op == proto::Opcode::set) {
    // The value's checksum rides in the descriptor: the server publishes it in
    // the one-sided index without reading the value through (docs/protocol.md).
    proto::MessageSpec m =
        r.path == Path::eager
            ? proto::msg::set_request(id, r.key, r.value)
            : proto::msg::set_request_rdv(id, r.key,
                                          {r.lease.addr_of(r.value.data()), r.lease.rkey(),
                                           proto::crc32c(r.value.data(), r.value.size())},
                                          r.value.size());
    if (r.ttl != 0) m.ttl = r.ttl;
    if (r.epoch != 0) m.epoch = r.epoch;
    return m;
  }
  if (r.op == proto::Opcode::call) {  // no landing buffer offered: a large reply is pulled
    if (r.path == Path::eager) return proto::msg::call_request(id, r.key, r.value);
    return proto::msg::call_request_rdv(id, r.key, {r.lease.addr_of(r.value.data()), r.lease.rkey()},
                                        r.value.size());
  }
  if (r.op == proto::Opcode::stats) return proto::msg::stats_request(id);
  if (r.op == proto::Opcode::del || r.op == proto::Opcode::expire) {
    proto::MessageSpec m = r.op == proto::Opcode::del ? proto::msg::del_request(id, r.key)
                                                      : proto::msg::expire_request(id, r.key, r.ttl);
    if (r.epoch != 0) m.epoch = r.epoch;
    return m;
  }
  if (r.op == proto::Opcode::ttl) return proto::msg::ttl_request(id, r.key);
  if (r.op == proto::Opcode::touch) return proto::msg::touch(id, r.value);
  proto::MessageSpec m;
  if (r.into.on) {  // the caller's memory, registered for this request (flush() moves it to the slot)
    m = !r.into.reg ? proto::msg::get_request(id, r.key)
                    : proto::msg::get_request_rdv(id, r.key, {r.into.reg->addr(), r.into.reg->rkey()},
                                                  r.into.bytes.size());
  } else if (spares_.empty()) {
    m = proto::msg::get_request(id, r.key);
  } else {
    // Offer a landing buffer: a large value is WRITTEN into it (one byte kept for a NUL).
    s.landing = take_spare();
    m = proto::msg::get_request_rdv(id, r.key, {s.landing->addr(), s.landing->rkey()}, s.landing->capacity() - 1);
  }
  m.backup_read = backup_reads_;
  return m;
}

void ClientConn::recycle(std::unique_ptr<LandingBuffer> lb) noexcept {
  if (!lb || !lb->registered()) return;
  // As many as requests can be in flight (each offers one), within the budget.
  const std::size_t most =
      std::max<std::size_t>(rdv_.landing_spares, std::min<std::size_t>(rdv_.max_landing_spares, slots_.max_slots()));
  if (spares_.size() >= most || spare_bytes_ + lb->capacity() > rdv_.keep_landing_max) return;  // lb goes
  if (!put_spare(std::move(lb))) spdlog::debug("client: out of memory keeping a spare landing buffer: dropped");
}

bool ClientConn::put_spare(std::unique_ptr<LandingBuffer> lb) noexcept {
  const std::size_t capacity = lb->capacity();
  try {
    spares_.push_back(std::move(lb));
  } catch (...) {
    return false;  // lb goes
  }
  spare_bytes_ += capacity;
  for (std::size_t i = spares_.size() - 1; i > 0 && spares_[i - 1]->capacity() > spares_[i]->capacity(); --i) {
    std::swap(spares_[i - 1], spares_[i]);  // biggest last: offered first
  }
  return true;
}

std::unique_ptr<LandingBuffer> ClientConn::take_spare() noexcept {
  if (spares_.empty()) return nullptr;
  auto lb = std::move(spares_.back());
  spares_.pop_back();
  spare_bytes_ -= lb->capacity();
  return lb;
}

std::unique_ptr<LandingBuffer> ClientConn::take_spare_over(std::uint64_t len) noexcept {
  if (spares_.empty() || spares_.back()->capacity() <= len) return nullptr;
  return take_spare();
}

void ClientConn::replenish() noexcept {
  if (registrar_ == nullptr || state_ != ConnState::established) return;
  // Landing buffers lent to GETs in flight come back: count them as spares.
  std::size_t lent = 0;
  if (spares_.size() < rdv_.landing_spares) {
    for (std::uint32_t i = 0; i < slots_.slot_count(); ++i) {
      if (const auto key = slots_.key_at(i)) lent += live_slot(*key).landing ? 1 : 0;
    }
  }
  while (spares_.size() + lent < rdv_.landing_spares) {
    try {
      if (!put_spare(LandingBuffer::create(*registrar_, rdv_.landing_size + 1))) break;
    } catch (const std::exception& e) {
      spdlog::warn("client: no spare landing buffer: {}", e.what());
      break;
    }
  }
}

void ClientConn::free_slot(SlotKey key) noexcept {
  recycle(std::move(live_slot(key).landing));
  slots_.erase(key);  // destroys the rest (the lease ends); the key is stale from now on
}

void ClientConn::on_written(proto::WrittenReply w, std::uint32_t len) noexcept {
  const auto key = slots_.key_at(w.req_low);
  Slot* const s = key ? &live_slot(*key) : nullptr;
  if (s == nullptr || s->stage != Stage::reply || s->op != proto::Opcode::get) {
    fail("WRITE with immediate for req " + std::to_string(w.req_low) + ", which awaits no GET reply");
    return;
  }
  // RC order: the value is in place. It fits what the GET offered, or the
  // WRITE would have failed against the registration; checked all the same.
  if (s->into.on ? !s->into.reg || len > s->into.bytes.size() : !s->landing || len >= s->landing->capacity()) {
    fail("WRITE with immediate into a buffer this client did not offer");
    return;
  }
  credits_ += w.credits;
  ++counters_.gets_written;
  deliver(*key, len);
}

bool ClientConn::on_get_rdv(SlotKey key, const proto::Header& h, const proto::RdvDesc& desc) noexcept {
  Slot& s = live_slot(key);
  const std::uint64_t len = h.value_len;
  // Pull: READ it from the server, then RELEASE its pin.
  ++(s.op == proto::Opcode::call ? counters_.calls_pulled : counters_.gets_pulled);
  if (!s.landing) s.landing = take_spare_over(len);  // a CALL offered none: a spare that fits
  const std::uint32_t id = req_id(key);
  if (max_value_ != 0 && len > max_value_) {
    fail("GET reply larger than the server's own limit");
    return false;
  }
  if (s.into.on) {
    if (!s.into.reg || len > s.into.bytes.size()) {  // does not fit the caller's buffer
      try {
        releases_.push_back(id);
      } catch (...) {
        fail("out of memory queueing a RELEASE");
        return false;
      }
      Callback cb = std::move(s.cb);
      free_slot(key);
      finish(Status::too_large, true, {}, cb);
      return true;
    }
  } else if (!s.landing || s.landing->capacity() <= len) {
    recycle(std::move(s.landing));
    try {
      // Unavoidable here: the size was unknown until this reply. Registering
      // the next spare at this size keeps the next GET of it on the WRITE path.
      s.landing = LandingBuffer::create(*registrar_, static_cast<std::size_t>(len) + 1);
    } catch (const std::exception& e) {
      spdlog::warn("client: no {}-byte landing buffer for a GET: {}", len, e.what());
      releases_.push_back(id);
      Callback cb = std::move(s.cb);
      free_slot(key);
      finish(Status::no_memory, false, {}, cb);
      return true;
    }
  }
  const auto target = s.into.on ? s.into.bytes.first(static_cast<std::size_t>(len))
                                : s.landing->data().first(static_cast<std::size_t>(len));
  const std::uint32_t lkey = s.into.on ? s.into.reg->lkey() : s.landing->lkey();
  s.stage = Stage::pull;
  if (s.into.on) {
    s.into.len = static_cast<std::size_t>(len);
  } else {
    s.landing->set_size(static_cast<std::size_t>(len));
  }
  // Posted with the CQ pass's other READs (the one-sided GETs'), by flush().
  queue_read(verbs::SendWr::read(read_wr_id(key), target, lkey, desc.addr, desc.rkey));
  return !ended();
}

void ClientConn::on_transfer(const verbs::Completion& c) noexcept {
  // After an error the connection fails at the first, and the earlier ones,
  // flushed, find it ended.
  if (conn::complete_transfers(reads_posted_, c, [this](const verbs::Completion& d) { transfer_done(d); })) return;
  // Not a transfer in flight: a repeated completion, or one never posted.
  if (ended()) return;
  const SlotKey key = read_key(c.wr_id);
  if (slots_.find(key) == nullptr) {  // its request is gone (the slot was freed, maybe reused)
    ++counters_.stale_reads;
    SPDLOG_DEBUG("client: dropping a stale RDMA READ completion (slot {} generation {}, {})", key.index,
                 key.generation, verbs::to_string(c.status));
    return;
  }
  fail(std::string(verbs::to_string(c.wr_id.kind())) + " completion for a request that posted none");
}

void ClientConn::transfer_done(const verbs::Completion& c) noexcept {
  if (ended()) return;  // teardown flushes
  if (c.wr_id.kind() == verbs::WrKind::rdma_write) {  // a granted SET's: its reply completes the request
    if (!c.ok()) {
      try {
        fail(fmt::format("RDMA WRITE of a granted SET: {} ({})", verbs::to_string(c.status), c.status_detail()));
      } catch (...) {
        fail("RDMA WRITE of a granted SET failed");
      }
    }
    return;
  }
  const SlotKey key = read_key(c.wr_id);
  const Slot* s = slots_.find(key);
  if (s == nullptr) {  // cannot happen while established: a posted READ's slot lives until it completes
    fail("RDMA READ completion for a freed request");
    return;
  }
  switch (s->stage) {
    case Stage::pull:
      on_pull_read(key, c);
      return;
    case Stage::hood:
    case Stage::block:
      on_onesided_read(key, c);
      return;
    case Stage::reply:
      break;
  }
  fail("RDMA READ completion for a request that posted none");
}

void ClientConn::on_pull_read(SlotKey key, const verbs::Completion& c) noexcept {
  if (!c.ok()) {
    try {
      fail(fmt::format("RDMA READ of a GET value: {} ({})", verbs::to_string(c.status), c.status_detail()));
    } catch (...) {
      fail("RDMA READ of a GET value failed");
    }
    return;
  }
  Slot& s = live_slot(key);
  try {
    releases_.push_back(req_id(key));  // folded into the next SEND (flush runs after this drain)
  } catch (...) {
    fail("out of memory queueing a RELEASE");
    return;
  }
  deliver(key, s.into.on ? s.into.len : s.landing->size());
}

void ClientConn::deliver(SlotKey key, std::size_t len) noexcept {
  Slot& s = live_slot(key);
  Callback cb = std::move(s.cb);
  if (s.into.on) {  // in the caller's memory
    const auto value = s.into.bytes.first(len);
    ++counters_.gets_into_direct;
    free_slot(key);  // the registration ends: the memory is the caller's alone again
    finish(Status::ok, true, value, cb);
    return;
  }
  delivering_ = std::move(s.landing);
  free_slot(key);
  delivering_->set_size(len);
  delivering_->data()[len] = std::byte{0};  // C callers get a NUL-terminated string
  const auto value = delivering_->value();
  finish(Status::ok, true, value, cb);
  recycle(std::move(delivering_));  // not adopted: ready for another GET
  delivering_.reset();
}

std::unique_ptr<LandingBuffer> ClientConn::adopt_landing() noexcept {
  if (!delivering_) return nullptr;
  if (delivering_->size() <= kCopyOutMax) {  // the caller copies it; the buffer is recycled
    return nullptr;
  }
  // The caller owns the bytes now: no remote access any more. The
  // deregistration itself waits until the next SEND is posted.
  if (auto reg = delivering_->take_registration()) {
    try {
      retired_.push_back(std::move(reg));
    } catch (...) {
      // reg is destroyed here: deregistered now instead of later
    }
  }
  return std::move(delivering_);
}

void ClientConn::forget(std::span<const std::byte> bytes) noexcept {
  if (cache_) cache_->forget(bytes);
}

RegCacheStats ClientConn::reg_cache_stats() const noexcept { return cache_ ? cache_->stats() : RegCacheStats{}; }

}  // namespace rkv::kv::client
