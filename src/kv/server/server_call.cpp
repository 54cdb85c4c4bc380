// ServerConn, CALL part (docs/protocol.md "CALL"): user-defined operations.
// A CALL's request bytes arrive eagerly or by RDMA READ into an arena block
// (as a large SET's value); its handler (handler.hpp) runs here, on the
// reactor thread, with a CallScope as its ReplyWriter and StoreAccess; the
// reply goes out eagerly, or pulled from an arena block (as a large GET's),
// once every record the handler's writes made is durable. Also Handlers.
// Reactor thread only.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <new>
#include <stdexcept>
#include <utility>

#include "kv/server/server_conn.hpp"
#include "proto/copy.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::server {

using store::DurableAck;
using store::LargeRef;

using proto::Opcode;
using proto::Status;

void Handlers::add(std::uint16_t op, Handler fn) {
  assert_owner();
  if (op < proto::kFirstCallOp) {
    throw std::invalid_argument(fmt::format("CALL opcode {:#06x} is reserved (handlers take {:#06x} and up)", op,
                                            proto::kFirstCallOp));
  }
  if (!fn) throw std::invalid_argument("an empty handler");
  map_.insert_or_assign(op, std::move(fn));
}

const Handler* Handlers::find(std::uint16_t op) const noexcept {
  const auto it = map_.find(op);
  return it == map_.end() ? nullptr : &it->second;
}

void Handlers::assert_owner() const noexcept {
#ifndef NDEBUG
  if (owner_ != nullptr) owner_->assert_owner_thread();
#endif
}

namespace {
// A reply over the value limit: answered too_large. Its own type, so a handler's own std::length_error stays a
// handler failure.
struct ReplyTooLarge : std::length_error {
  using std::length_error::length_error;
};
}  // namespace

// One handler run: the reply it writes and the records its writes make.
class ServerConn::CallScope final : public ReplyWriter, public StoreAccess {
 public:
  CallScope(ServerConn& conn, std::uint32_t req_id) noexcept : c_(&conn), id_(req_id) {}

  // --- ReplyWriter ---
  void append(std::span<const std::byte> bytes) override {
    const auto dst = extend(bytes.size());
    proto::copy_bytes(dst, bytes);
  }
  using ReplyWriter::append;
  std::span<std::byte> extend(std::size_t n) override {
    assert_owner();
    if (n > c_->config_.max_value - std::min<std::uint64_t>(size_, c_->config_.max_value)) {
      throw ReplyTooLarge("CALL reply over the server's value limit");
    }
    const std::size_t need = size_ + n;
    if (!block_ && need < proto::kEagerLimit) {
      small_.resize(need);
    } else {
      grow(need);
    }
    const std::size_t at = size_;
    size_ = need;
    return (block_ ? block_->bytes.first(block_->capacity) : std::span<std::byte>(small_)).subspan(at, n);
  }
  void reserve(std::size_t n) override {
    assert_owner();
    if (n >= proto::kEagerLimit && n <= c_->config_.max_value) {
      grow(n);
    } else if (n < proto::kEagerLimit) {
      small_.reserve(n);
    }
  }
  [[nodiscard]] std::size_t size() const noexcept override { return size_; }
  void refuse() noexcept override { refused_ = true; }

  // --- StoreAccess ---
  [[nodiscard]] std::optional<std::string_view> get(std::string_view key) const override {
    assert_owner();
    const auto hit = c_->store_->get(key);
    if (!hit.found) return std::nullopt;
    return hit.value;
  }
  using StoreAccess::set;
  [[nodiscard]] bool set(std::string_view key, std::span<const std::byte> value) override {
    assert_owner();
    if (key.empty() || key.size() > proto::kMaxKey || value.size() > c_->config_.max_value) return false;
    const std::string_view text = proto::as_string_view(value);
    if (proto::eager_fits(key.size(), value.size())) {
      try {
        if (!c_->store_->set(key, text)) {  // a small-arena block with the index on (Store::set)
          ++c_->counters_->no_memory;  // over kvd --max-memory: nothing changed
          return false;
        }
      } catch (const std::bad_alloc&) {
        return false;
      }
      record(c_->durability_ != nullptr ? c_->durability_->record_set(key, text, {}, c_->config_.token, id_)
                                        : DurableAck::now);
      return true;
    }
    // As a rendezvous SET's: an arena block laid out [value][key] with the index on.
    const std::size_t tail = c_->store_->indexed() ? key.size() : 0;
    auto block = c_->arena_->allocate(value.size() + tail);
    if (!block) return false;
    proto::copy_bytes(block->bytes, value);
    block->bytes = block->bytes.first(value.size());
    LargeRef ref = std::move(block);
    try {
      if (!c_->store_->set_large(key, ref)) {  // over kvd --max-memory: nothing changed
        ++c_->counters_->no_memory;
        return false;
      }
    } catch (const std::bad_alloc&) {
      return false;
    }
    ++c_->counters_->large_sets;
    record(c_->durability_ != nullptr ? c_->durability_->record_set(key, ref->view(), ref, c_->config_.token, id_)
                                      : DurableAck::now);
    return true;
  }
  bool del(std::string_view key) override {
    assert_owner();
    const bool found = c_->store_->erase(key);
    record(c_->durability_ != nullptr ? c_->durability_->record_del(key, c_->config_.token, id_) : DurableAck::now);
    return found;
  }

  [[nodiscard]] bool refused() const noexcept { return refused_; }
  [[nodiscard]] std::uint32_t later() const noexcept { return later_; }
  [[nodiscard]] bool record_failed() const noexcept { return failed_; }
  // The reply bytes: eager (moved out) or in the block (null when small).
  [[nodiscard]] std::vector<std::byte> take_small() {
    if (block_) {  // reserved large, written small: copy the few bytes out
      const auto b = block_->bytes.first(size_);
      return {b.begin(), b.end()};
    }
    small_.resize(size_);
    return std::move(small_);
  }
  // The reply in an arena block of exactly size() bytes (copied there if it
  // was built small), or null when no block can be had.
  [[nodiscard]] std::shared_ptr<LargeValue> take_block() {
    if (!block_) grow(size_);
    block_->bytes = block_->bytes.first(size_);
    return std::move(block_);
  }

 private:
  void assert_owner() const noexcept {
    if (c_->config_.handlers != nullptr) c_->config_.handlers->assert_owner();
  }
  void record(DurableAck ack) noexcept {
    switch (ack) {
      case DurableAck::now: return;
      case DurableAck::later:
        ++later_;
        ++c_->durable_waits_;
        ++c_->counters_->durable_waits;
        return;
      case DurableAck::failed: failed_ = true; return;
    }
  }
  // The reply moves to (or grows in) an arena block of at least n bytes.
  void grow(std::size_t n) {
    if (block_ && block_->capacity >= n) return;
    const std::size_t want = std::max(n, block_ ? block_->capacity * 2 : n);
    auto b = c_->arena_->allocate(want);
    if (!b) throw std::bad_alloc();
    b->bytes = b->bytes.first(b->capacity);
    proto::copy_bytes(b->bytes.data(), block_ ? block_->bytes.data() : small_.data(), size_);
    block_ = std::move(b);
    small_ = {};
  }

  ServerConn* c_;
  std::uint32_t id_;
  std::vector<std::byte> small_;
  std::shared_ptr<LargeValue> block_;  // the reply once it is (or is reserved) 4 KiB or more
  std::size_t size_ = 0;
  bool refused_ = false;
  std::uint32_t later_ = 0;  // records answered `later`
  bool failed_ = false;      // a record failed
};

std::size_t ServerConn::call_reply_room() const noexcept {
  const std::size_t max_msg = channel_.max_message();
  const std::size_t eager = max_msg > proto::kHeaderSize ? std::min(proto::kEagerLimit - 1, max_msg - proto::kHeaderSize) : 0;
  return proto::kHeaderSize + eager;
}

ServerConn::Outcome ServerConn::execute_call(const proto::MessageView& m, proto::MessageSpec& reply) noexcept {
  ++counters_->calls;
  const std::uint32_t id = m.header.req_id;
  if (reply.status != Status::ok) return Outcome::reply;  // plan_reply refused it: a tiny client buffer
  const std::uint16_t op = proto::call_op(m.key);
  if (!m.rdv) return run_call(id, op, m.value, reply);
  // Large request: READ it into an arena block, run the handler when it is there (on_transfer).
  const std::uint64_t len = m.header.value_len;
  if (len == 0 || len > config_.max_value) {
    ++counters_->too_large;
    reply = proto::msg::error_reply(Opcode::call, id, 0, len == 0 ? Status::bad_request : Status::too_large);
    return Outcome::reply;
  }
  auto block = arena_->allocate(static_cast<std::size_t>(len));
  if (!block) {
    reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  const std::uint32_t slot = take_transfer();  // process() checked transfers_full()
  Transfer& t = transfers_[slot];
  t.kind = TransferKind::call_read;
  t.req_id = id;
  t.op = op;
  return post_request_read(slot, std::move(block), *m.rdv);  // the handler runs when the READ completes
}

ServerConn::Outcome ServerConn::run_call(std::uint32_t id, std::uint16_t op, std::span<const std::byte> request,
                                         proto::MessageSpec& reply) noexcept {
  const Handler* fn = config_.handlers != nullptr ? config_.handlers->find(op) : nullptr;
  if (fn == nullptr) {
    ++counters_->calls_no_handler;
    SPDLOG_DEBUG("conn {}: CALL req {} of opcode {:#06x}: no handler", config_.label, id, op);
    reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_handler);
    return Outcome::reply;
  }
  CallScope scope(*this, id);
  Status st = Status::ok;
  try {
    (*fn)(request, scope, scope);
  } catch (const std::bad_alloc&) {
    st = Status::no_memory;
  } catch (const ReplyTooLarge&) {
    st = Status::too_large;
  } catch (const std::exception& e) {
    ++counters_->calls_failed;
    spdlog::warn("conn {}: handler of CALL opcode {:#06x} threw: {}", config_.label, op, e.what());
    st = Status::handler_failed;
  } catch (...) {
    ++counters_->calls_failed;
    spdlog::warn("conn {}: handler of CALL opcode {:#06x} threw a non-exception", config_.label, op);
    st = Status::handler_failed;
  }
  if (st == Status::ok && scope.refused()) st = Status::refused;
  if (scope.record_failed()) {
    ++counters_->io_errors;
    st = Status::io_error;
  }
  // The reply (what the client sees once the handler's records are durable).
  try {
    if (st != Status::ok) {
      reply = proto::msg::error_reply(Opcode::call, id, 0, st);
    } else if (scope.size() + proto::kHeaderSize <= call_reply_room()) {
      auto [it, fresh] = call_replies_.insert_or_assign(id, scope.take_small());
      reply = proto::msg::call_reply(id, 0, it->second);
    } else if (pulls_.size() >= config_.max_pins || pulls_.contains(id)) {
      fail(CloseCause::protocol_error,
           fmt::format("CALL req {}: {} pulled values not released (limit {})", id, pulls_.size(), config_.max_pins));
      return Outcome::failed;
    } else {
      LargeRef block = scope.take_block();
      const proto::RdvDesc desc{block->addr, block->rkey};
      const std::uint64_t len = block->bytes.size();
      pulls_.emplace(id, Pin(std::move(block), *counters_));  // reserved: no rehash below max_pins
      reply = proto::msg::call_reply_pull(id, 0, desc, len);
    }
  } catch (const std::bad_alloc&) {
    reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_memory);
  } catch (const ReplyTooLarge&) {
    reply = proto::msg::error_reply(Opcode::call, id, 0, Status::too_large);
  }
  if (scope.later() == 0) return Outcome::reply;
  try {
    durable_calls_.insert_or_assign(id, CallWait{scope.later(), false, reply});
  } catch (const std::bad_alloc&) {
    // Cannot wait for the log: the records may yet fail, so do not say ok.
    drop_call_reply(id);
    durable_waits_ -= scope.later();
    counters_->durable_waits -= scope.later();
    reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_memory);
    return Outcome::reply;
  }
  return Outcome::no_reply;  // on_durable() answers; the credit rides on the next reply
}

void ServerConn::finish_call_wait(std::uint32_t req_id, CallWait& w) noexcept {
  proto::MessageSpec reply = w.reply;
  const bool failed = w.failed;
  durable_calls_.erase(req_id);
  if (failed) {
    ++counters_->io_errors;
    drop_call_reply(req_id);
    reply = proto::msg::error_reply(Opcode::call, req_id, 0, Status::io_error);
  }
  if (emit(reply)) process_held();
}

void ServerConn::drop_call_reply(std::uint32_t req_id) noexcept {
  call_replies_.erase(req_id);
  pulls_.erase(req_id);  // a pulled reply the client will never see: no RELEASE comes
}

}  // namespace rkv::kv::server
