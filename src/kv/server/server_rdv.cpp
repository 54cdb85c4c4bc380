// ServerConn, rendezvous part (docs/protocol.md, "Rendezvous path"): large
// SETs pulled by RDMA READ into the arena, large GETs pushed by RDMA WRITE
// into the client's offered buffer or pinned for the client to READ, RELEASE.
// Reactor thread only.
#include <spdlog/spdlog.h>

#include <new>
#include <utility>

#include "kv/server/server_conn.hpp"

namespace rkv::kv::server {

using store::LargeRef;

using proto::Opcode;
using proto::Status;
using verbs::WrId;
using verbs::WrKind;

std::uint32_t ServerConn::take_transfer() noexcept {
  const std::uint32_t slot = free_transfers_.back();
  free_transfers_.pop_back();
  ++transfers_in_flight_;
  ++counters_->transfers;
  return slot;
}

void ServerConn::free_transfer(std::uint32_t slot) noexcept {
  Transfer& t = transfers_[slot];
  t.kind = TransferKind::none;
  t.key.clear();
  t.pin.reset();
  free_transfers_.push_back(slot);  // capacity reserved in the constructor
  --transfers_in_flight_;
  --counters_->transfers;
}

ServerConn::Outcome ServerConn::execute_set_rdv(const proto::MessageView& m, proto::MessageSpec& reply) noexcept {
  const std::uint32_t id = m.header.req_id;
  const std::uint64_t len = m.header.value_len;
  if (len == 0 || len > config_.max_value) {  // before any allocation
    ++counters_->too_large;
    reply = proto::msg::error_reply(Opcode::set, id, 0, len == 0 ? Status::bad_request : Status::too_large);
    return Outcome::reply;
  }
  // With the one-sided index the key is stored after the value ([value][key],
  // docs/protocol.md): the READ lands at the block start as ever.
  const std::size_t tail = store_->indexed() ? m.key.size() : 0;
  // The key's entry must fit the memory limit too: no READ of a value that could not be kept.
  auto block = store_->large_fits(m.key) ? arena_->allocate(static_cast<std::size_t>(len) + tail) : nullptr;
  if (block) block->bytes = block->bytes.first(static_cast<std::size_t>(len));
  if (!block) {  // the memory limit (or the arena's) is reached, or mapping failed
    ++counters_->no_memory;
    reply = proto::msg::error_reply(Opcode::set, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  const std::uint32_t slot = take_transfer();  // process() checked transfers_full()
  Transfer& t = transfers_[slot];
  try {
    t.key.assign(m.key);
  } catch (const std::bad_alloc&) {
    free_transfer(slot);
    reply = proto::msg::error_reply(Opcode::set, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  t.kind = TransferKind::set_read;
  t.req_id = id;
  t.value_crc = m.rdv->value_crc;
  return post_request_read(slot, std::move(block), *m.rdv);  // SET_REPLY when the READ completes
}

ServerConn::Outcome ServerConn::post_request_read(std::uint32_t slot, std::shared_ptr<LargeValue> block,
                                                  const proto::RdvDesc& from) noexcept {
  Transfer& t = transfers_[slot];
  const auto target = block->bytes;
  const auto lkey = block->lkey;
  t.pin = Pin(std::move(block), *counters_);
  if (const int rc = channel_.link().post_read(WrId(slot, config_.generation, WrKind::rdma_read), target, lkey,
                                              from.addr, from.rkey);
      rc != 0) {
    free_transfer(slot);
    fail(CloseCause::post_error, fmt::format("RDMA READ post failed: errno {}", rc));
    return Outcome::failed;
  }
  ++counters_->rdma_reads;
  SPDLOG_TRACE("conn {}: req {} RDMA READ {} bytes into slot {}", config_.label, t.req_id, target.size(), slot);
  return Outcome::no_reply;
}

ServerConn::Outcome ServerConn::execute_get_large(const proto::MessageView& m, const LargeRef& v,
                                                  proto::MessageSpec& reply) noexcept {
  const std::uint32_t id = m.header.req_id;
  const std::uint64_t len = v->bytes.size();
  if (m.rdv && m.header.value_len >= len && !transfers_full()) {
    // Push: WRITE into the offered buffer, then the reply (RC order: the WRITE
    // is placed before the client sees the SEND that follows it).
    const std::uint32_t slot = take_transfer();
    Transfer& t = transfers_[slot];
    t.kind = TransferKind::get_write;
    t.req_id = id;
    t.pin = Pin(v, *counters_);
    if (const int rc = channel_.link().post_write(WrId(slot, config_.generation, WrKind::rdma_write), v->bytes,
                                                 v->lkey, m.rdv->addr, m.rdv->rkey);
        rc != 0) {
      free_transfer(slot);
      fail(CloseCause::post_error, fmt::format("RDMA WRITE post failed: errno {}", rc));
      return Outcome::failed;
    }
    ++counters_->rdma_writes;
    ++counters_->large_gets_written;
    reply = proto::msg::get_reply_rdv(id, 0, *m.rdv, len);
    return Outcome::reply;
  }
  // Pull: the client READs it from the arena and RELEASEs the pin.
  if (pulls_.size() >= config_.max_pins || pulls_.contains(id)) {
    fail(CloseCause::protocol_error,
         fmt::format("GET req {}: {} pulled values not released (limit {})", id, pulls_.size(), config_.max_pins));
    return Outcome::failed;
  }
  try {
    pulls_.emplace(id, Pin(v, *counters_));  // reserved: no rehash below max_pins
  } catch (const std::bad_alloc&) {
    reply = proto::msg::error_reply(Opcode::get, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  ++counters_->large_gets_pulled;
  reply = proto::msg::get_reply_pull(id, 0, {v->addr, v->rkey}, len);
  return Outcome::reply;
}

ServerConn::Outcome ServerConn::execute_release(const proto::MessageView& m) noexcept {
  ++counters_->releases;
  if (pulls_.erase(m.header.req_id) == 0) {
    fail(CloseCause::protocol_error, fmt::format("RELEASE of req {} which holds no pin", m.header.req_id));
    return Outcome::failed;
  }
  return Outcome::no_reply;
}

void ServerConn::on_transfer(const verbs::Completion& c) noexcept {
  const std::uint32_t slot = c.wr_id.slot();
  const bool is_read = c.wr_id.kind() == WrKind::rdma_read;
  const auto kind = slot < transfers_.size() ? transfers_[slot].kind : TransferKind::none;
  if (is_read ? kind != TransferKind::set_read && kind != TransferKind::call_read : kind != TransferKind::get_write) {
    ++counters_->stale_completions;
    return;
  }
  ++transfers_finished_;
  if (!serving() || !c.ok()) {
    ++counters_->transfers_aborted;
    free_transfer(slot);  // the QP is in error: nothing of it reaches the client or the Store
    if (!serving()) return;
    return fail(CloseCause::completion_error,
                fmt::format("RDMA {} failed: {} ({})", to_string(c.wr_id.kind()), to_string(c.status),
                            c.status_detail()));
  }
  Transfer& t = transfers_[slot];
  if (t.kind == TransferKind::get_write) {  // the reply went out right after the WRITE
    free_transfer(slot);
    return process_held();
  }
  if (t.kind == TransferKind::call_read) {  // the request bytes are in the block: run the handler on them
    proto::MessageSpec reply;
    const Outcome out = run_call(t.req_id, t.op, t.pin.value()->bytes, reply);
    free_transfer(slot);  // the handler is done with the request bytes
    if (out == Outcome::failed) return;
    if (out == Outcome::reply && !emit(reply)) return;
    return process_held();
  }
  proto::MessageSpec reply = proto::msg::set_reply(t.req_id, 0);
  Outcome out = Outcome::reply;
  try {
    // The old value goes when its last pin does. The index entry carries the
    // writer's checksum: a wrong one only sends one-sided readers of this key
    // to the message path (docs/protocol.md, "Rendezvous path").
    if (store_->set_large(t.key, t.pin.value(), t.value_crc)) {
      ++counters_->large_sets;
      // Logged straight from the arena block (the log pins it until written).
      out = record_durable(t.key, t.pin.value()->view(), t.pin.value(), t.req_id, reply);
    } else {  // the key's entry is over the memory limit: the block goes back with the transfer
      ++counters_->no_memory;
      reply = proto::msg::error_reply(Opcode::set, t.req_id, 0, Status::no_memory);
    }
  } catch (const std::bad_alloc&) {
    ++counters_->no_memory;
    reply = proto::msg::error_reply(Opcode::set, t.req_id, 0, Status::no_memory);
  }
  free_transfer(slot);
  if (out == Outcome::reply && !emit(reply)) return;
  process_held();
}

}  // namespace rkv::kv::server
