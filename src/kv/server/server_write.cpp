// ServerConn, write part: THE way a value gets into the Store, a key out of
// it and a key's expiry changed, whoever asks (an eager SET, a rendezvous SET whose READ completed, a
// CALL handler's StoreAccess): the Store sizes and allocates the value's
// memory (Store::put, Store::value_block), the write is counted here, and it
// is recorded with the Durability here. What the result means for a request's
// reply is decided once, in deferred(). Recovery (Server::migrate_large_values)
// keeps recovered values with the same Store::put and records nothing: they
// came from the log. Reactor thread only.
#include <spdlog/spdlog.h>

#include <new>

#include "kv/server/server_conn.hpp"

namespace rkv::kv::server {

using store::DurableAck;
using store::LargeRef;

using proto::Opcode;
using proto::Status;

namespace {
ServerConn::Written written(DurableAck ack) noexcept {
  switch (ack) {
    case DurableAck::now: return ServerConn::Written::now;
    case DurableAck::later: return ServerConn::Written::later;
    case DurableAck::failed: return ServerConn::Written::log_failed;
  }
  return ServerConn::Written::log_failed;
}
}  // namespace

ServerConn::Written ServerConn::store_value(std::string_view key, std::string_view value, store::ExpireAt expire_at,
                                            std::uint32_t wait) noexcept {
  Store::Kept kept = Store::Kept::no_memory;
  try {
    kept = store_->put(key, value, expire_at);
  } catch (const std::bad_alloc&) {
  }
  switch (kept) {
    case Store::Kept::no_memory: ++counters_->no_memory; return Written::no_memory;  // nothing changed
    case Store::Kept::small: break;
    case Store::Kept::large: ++counters_->large_sets; break;
  }
  if (durability_ == nullptr) return Written::now;
  // A value put in an arena block is logged from there (the log pins it); a
  // small one is copied by the log. The record carries the key's absolute
  // expiry as the Store has it now.
  LargeRef block;
  if (kept == Store::Kept::large || expire_at == store::kKeepExpiry) {
    const auto now = store_->peek(key);
    block = kept == Store::Kept::large ? now.large : LargeRef{};
    expire_at = now.expire_at;
  }
  return written(
      durability_->record_set(key, block ? block->view() : value, block, expire_at, config_.token, wait));
}

ServerConn::Written ServerConn::store_block(std::string_view key, const LargeRef& block, std::uint32_t value_crc,
                                            store::ExpireAt expire_at, std::uint32_t wait) noexcept {
  try {
    // The old value goes when its last pin does. The index entry carries the
    // writer's checksum: a wrong one only sends one-sided readers of this key
    // to the message path (docs/protocol.md, "Rendezvous path").
    if (!store_->set_large(key, block, value_crc, expire_at)) {  // the key's entry is over the memory limit
      ++counters_->no_memory;
      return Written::no_memory;
    }
  } catch (const std::bad_alloc&) {
    ++counters_->no_memory;
    return Written::no_memory;
  }
  ++counters_->large_sets;
  if (durability_ == nullptr) return Written::now;
  // Logged straight from the arena block (the log pins it until written).
  return written(durability_->record_set(key, block->view(), block, expire_at, config_.token, wait));
}

// Erased from the Store (its index entry cleared, its value freed when no
// transfer pins it: Store::erase), then recorded as a tombstone exactly as a
// SET is recorded, so the answer waits for the same durability.
ServerConn::Removal ServerConn::remove_key(std::string_view key, std::uint32_t wait) noexcept {
  const bool found = store_->erase(key);
  if (durability_ == nullptr) return {found, Written::now};
  return {found, written(durability_->record_del(key, config_.token, wait))};
}

ServerConn::Removal ServerConn::expire_key(std::string_view key, store::ExpireAt expire_at,
                                          std::uint32_t wait) noexcept {
  const bool found = store_->expire(key, expire_at);
  if (!found || durability_ == nullptr) return {found, Written::now};  // no key: nothing changed, nothing to log
  return {found, written(durability_->record_expire(key, expire_at, config_.token, wait))};
}

std::optional<ServerConn::Key> ServerConn::open_log_wait(Opcode op, std::uint32_t req_id) noexcept {
  Pending p;
  p.wait = Wait::log;
  p.op = op;
  p.req_id = req_id;
  return open_entry(std::move(p));
}

bool ServerConn::deferred(Written w, std::optional<Key> wait, Opcode op, proto::MessageSpec& reply) noexcept {
  switch (w) {
    case Written::now: return false;
    case Written::later: {  // only with a log, and then the request has its entry
      Pending& p = *pending_.find(*wait);
      p.reply = reply;
      p.records = 1;
      ++durable_waits_;
      return true;  // on_durable() answers; the credit rides on the next reply
    }
    case Written::log_failed:
      ++counters_->io_errors;
      reply = proto::msg::error_reply(op, reply.req_id, 0, Status::io_error);
      return false;
    case Written::no_memory:
      reply = proto::msg::error_reply(op, reply.req_id, 0, Status::no_memory);
      return false;
  }
  return false;
}

}  // namespace rkv::kv::server
