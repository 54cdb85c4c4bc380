// ServerConn, rendezvous part (docs/protocol.md, "Rendezvous path"): large
// SETs pulled by RDMA READ into the arena, large GETs pushed by RDMA WRITE
// into the client's offered buffer or pinned for the client to READ, RELEASE.
// Reactor thread only.
#include <spdlog/spdlog.h>

#include <limits>
#include <new>
#include <utility>

#include "kv/server/server_conn.hpp"
#include "proto/grant.hpp"

namespace rkv::kv::server {

using store::LargeRef;

using proto::Opcode;
using proto::Status;
using verbs::WrId;
using verbs::WrKind;

std::optional<ServerConn::Key> ServerConn::open_transfer(Pending p) noexcept {
  const auto k = open_entry(std::move(p));
  if (!k) return std::nullopt;
  ++transfers_in_flight_;
  return k;
}

bool ServerConn::queued_transfer(Key k, bool queued, std::string_view what) noexcept {
  if (queued) return true;
  close_entry(k);
  fail(CloseCause::internal, fmt::format("out of memory queueing an RDMA {}", what));
  return false;
}

void ServerConn::drop_unposted() noexcept {
  // Queued, never posted: no completion will come for them. A transfer's
  // slot is its entry's key; a window's WR is a grant's (server_grant.cpp).
  channel_.drop_queued_rdma([&](verbs::WrId id) {
    if (id.kind() == verbs::WrKind::window) return drop_window_op(id.slot());
    close_entry(Key::unpack32(id.slot()));
  });
}

ServerConn::Outcome ServerConn::execute_set_rdv(const proto::MessageView& m, proto::MessageSpec& reply) noexcept {
  const std::uint32_t id = m.header.req_id;
  const std::uint64_t len = m.header.value_len;
  if (len == 0 || len > config_.max_value) {  // before any allocation
    ++counters_->too_large;
    reply = proto::msg::error_reply(Opcode::set, id, 0, len == 0 ? Status::bad_request : Status::too_large);
    return Outcome::reply;
  }
  // The Store sizes the block ([value][key] with the index on: the READ
  // lands at its start as ever) and checks the key's entry fits the memory
  // limit too: no READ of a value that could not be kept.
  auto block = store_->value_block(m.key, static_cast<std::size_t>(len));
  Pending p;
  p.wait = Wait::read;
  p.op = Opcode::set;
  p.req_id = id;
  p.value_crc = m.rdv->value_crc;
  p.large_request = true;
  p.expire_at = expiry_of(m);
  p.epoch = m.epoch;
  if (!grants_.empty()) p.grant_for = proto::granted_set_size(m.key.size(), len);  // the next one like it
  try {
    if (block) p.key.assign(m.key);
  } catch (const std::bad_alloc&) {
    block.reset();
  }
  if (!block) {  // the memory limit (or the arena's) is reached, or mapping failed
    ++counters_->no_memory;
    reply = proto::msg::error_reply(Opcode::set, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  return queue_request_read(std::move(p), std::move(block), *m.rdv, reply);  // SET_REPLY when the READ completes
}

ServerConn::Outcome ServerConn::queue_request_read(Pending p, std::shared_ptr<LargeValue> block,
                                                  const proto::RdvDesc& from, proto::MessageSpec& reply) noexcept {
  const auto target = block->bytes;
  const auto lkey = block->lkey;
  const Opcode op = p.op;
  const std::uint32_t id = p.req_id;
  p.pin = std::move(block);
  const auto k = open_transfer(std::move(p));  // process() checked transfers_full()
  if (!k) {
    ++counters_->no_memory;
    reply = proto::msg::error_reply(op, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  const bool queued = channel_.queue_rdma(verbs::SendWr::read(
      WrId(k->pack32(), config_.generation, WrKind::rdma_read), target, lkey, from.addr, from.rkey));
  if (!queued_transfer(*k, queued, "READ")) return Outcome::failed;  // counted when posted (flush)
  SPDLOG_TRACE("conn {}: req {} RDMA READ {} bytes into entry {}", config_.label, id, target.size(), k->index);
  return Outcome::no_reply;
}

ServerConn::Outcome ServerConn::execute_get_large(const proto::MessageView& m, const LargeRef& v,
                                                  proto::MessageSpec& reply) noexcept {
  const std::uint32_t id = m.header.req_id;
  const std::uint64_t len = v->bytes.size();
  if (m.rdv && m.header.value_len >= len && len <= std::numeric_limits<std::uint32_t>::max() && !pushes_full()) {
    // Push: one WRITE with immediate into the offered buffer, the reply
    // folded into it (append_pushed queues it once the request's buffer is
    // recycled, so its credit rides along).
    Pending p;
    p.wait = Wait::write;
    p.op = Opcode::get;
    p.req_id = id;
    p.pin = v;
    p.offer = *m.rdv;
    if (const auto k = open_transfer(std::move(p))) {  // else (no memory) it is pulled
      pushed_ = *k;
      return Outcome::pushed;
    }
  }
  // Pull: the client READs it from the arena and RELEASEs the pin.
  if (pulls_.size() >= config_.max_pins || pulls_.contains(id)) {
    fail(CloseCause::protocol_error,
         fmt::format("GET req {}: {} pulled values not released (limit {})", id, pulls_.size(), config_.max_pins));
    return Outcome::failed;
  }
  try {
    pulls_.emplace(id, v);  // reserved: no rehash below max_pins
  } catch (const std::bad_alloc&) {
    reply = proto::msg::error_reply(Opcode::get, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  ++counters_->large_gets_pulled;
  counters_->bytes_sent += len;  // the client READs it: it leaves by this server's NIC all the same
  reply = proto::msg::get_reply_pull(id, 0, {v->addr, v->rkey}, len);
  return Outcome::reply;
}

bool ServerConn::append_pushed(Key k, Clock::time_point received) noexcept {
  const Pending& p = *pending_.find(k);  // opened by execute_get_large just now
  const std::uint32_t imm = proto::pack_written_reply(p.req_id, static_cast<std::uint16_t>(owed_));
  const bool queued = channel_.queue_rdma(verbs::SendWr::write_imm(
      WrId(k.pack32(), config_.generation, WrKind::rdma_write), p.pin->bytes, p.pin->lkey, p.offer.addr, p.offer.rkey,
      imm));
  if (!queued_transfer(k, queued, "WRITE")) return false;  // counted when posted (flush)
  ++counters_->large_gets_written;
  replied(OpClass::get_large, received);
  return true;
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
  // After an error the earlier ones close as flushed, behind the error that
  // fails the connection, so every entry closes and the connection drains.
  const bool posted =
      conn::complete_transfers(transfers_posted_, c, [this](const verbs::Completion& d) { transfer_done(d); });
  if (!posted) ++counters_->stale_completions;  // never posted, or already completed by a later one
}

void ServerConn::transfer_done(const verbs::Completion& c) noexcept {
  const Key k = Key::unpack32(c.wr_id.slot());
  Pending* p = pending_.find(k);
  if (p == nullptr || p->wait != (c.wr_id.kind() == WrKind::rdma_read ? Wait::read : Wait::write)) {
    ++counters_->stale_completions;
    return;
  }
  ++transfers_finished_;
  if (!serving() || !c.ok()) {
    ++counters_->transfers_aborted;
    close_entry(k);  // the QP is in error: nothing of it reaches the client or the Store
    if (!serving()) return;
    return fail(CloseCause::completion_error,
                fmt::format("RDMA {} failed: {} ({})", to_string(c.wr_id.kind()), to_string(c.status),
                            c.status_detail()));
  }
  if (p->wait == Wait::write) {  // the reply went out right after the WRITE
    close_entry(k);
    return process_held();
  }
  // The READ is done: the request runs now, its reply waits in the entry (as for the log).
  --transfers_in_flight_;
  p->wait = Wait::log;
  if (p->op == Opcode::call) {  // the request bytes are in the block: run the handler on them
    const Outcome out = run_call(k, p->pin->bytes);
    if (out == Outcome::failed) return;
    p->pin.reset();  // the handler is done with the request bytes
    if (out == Outcome::reply) finish(k);
    return process_held();
  }
  const LargeRef block = std::move(p->pin);  // the Store (and the log) take their own references
  if (!config_.gate->admits(p->key, ShardGate::Access::write, p->epoch)) {
    // Its shard moved, or the lease may have lapsed, while the value was
    // read (it was admitted when asked): not stored, the client places it
    // again (a record: the primary sends it again or gives the backup up).
    ++counters_->not_owner;
    p->reply = proto::msg::error_reply(Opcode::set, p->req_id, 0, Status::not_owner);
    finish(k);
    return process_held();
  }
  p->reply = proto::msg::set_reply(p->req_id, 0);
  if (!deferred(store_block(p->key, block, p->value_crc, p->expire_at, k.pack32()), k, Opcode::set, p->reply)) {
    finish(k);
  }
  process_held();
}

}  // namespace rkv::kv::server
