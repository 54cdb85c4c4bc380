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
// A store access to a key the shard gate refuses: the CALL is answered not_owner.
struct NotOwner : std::runtime_error {
  NotOwner() : std::runtime_error("a key of a shard this server is not the primary of") {}
};
}  // namespace

// One handler run: the reply it writes and the records its writes make.
class ServerConn::CallScope final : public ReplyWriter, public StoreAccess {
 public:
  // wait: the CALL's pending entry, which its writes record under.
  CallScope(ServerConn& conn, std::uint32_t wait) noexcept : c_(&conn), wait_(wait) {}

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
    return (block_ ? block_->block() : std::span<std::byte>(small_)).subspan(at, n);
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
    gate(key, ShardGate::Access::read);
    const auto hit = c_->store_->get(key);
    if (!hit.found) return std::nullopt;
    return hit.value;
  }
  using StoreAccess::set;
  [[nodiscard]] bool set(std::string_view key, std::span<const std::byte> value) override {
    assert_owner();
    if (key.empty() || key.size() > proto::kMaxKey || value.size() > c_->config_.max_value) return false;
    gate(key, ShardGate::Access::write);
    // A handler's write keeps the key's expiry (as Redis' INCR does).
    return record(c_->store_value(key, proto::as_string_view(value), store::kKeepExpiry, wait_));
  }
  bool del(std::string_view key) override {
    assert_owner();
    gate(key, ShardGate::Access::write);
    const Removal r = c_->remove_key(key, wait_);
    record(r.written);
    return r.found;
  }

  [[nodiscard]] bool refused() const noexcept { return refused_; }
  // A key the gate refused was asked for (even if the handler caught the throw).
  [[nodiscard]] bool not_owner() const noexcept { return not_owner_; }
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
  void gate(std::string_view key, ShardGate::Access access) const {
    if (c_->config_.gate->admits(key, access)) return;
    not_owner_ = true;
    throw NotOwner();
  }
  // Whether the write took; a record that waits or failed is counted for the reply.
  bool record(Written w) noexcept {
    switch (w) {
      case Written::now: return true;
      case Written::later:
        ++later_;
        ++c_->durable_waits_;
        return true;
      case Written::log_failed: failed_ = true; return true;
      case Written::no_memory: return false;
    }
    return false;
  }
  // The reply moves to (or grows in) an arena block of at least n bytes.
  void grow(std::size_t n) {
    if (block_ && block_->capacity >= n) return;
    const std::size_t want = std::max(n, block_ ? block_->capacity * 2 : n);
    auto b = c_->arena_->allocate(want);
    if (!b) throw std::bad_alloc();
    b->bytes = b->block();  // the reply may grow into all of it
    proto::copy_bytes(b->bytes.data(), block_ ? block_->bytes.data() : small_.data(), size_);
    block_ = std::move(b);
    small_ = {};
  }

  ServerConn* c_;
  std::uint32_t wait_;
  std::vector<std::byte> small_;
  std::shared_ptr<LargeValue> block_;  // the reply once it is (or is reserved) 4 KiB or more
  std::size_t size_ = 0;
  bool refused_ = false;
  mutable bool not_owner_ = false;  // set by a const get() too
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
  if (reply.status != Status::ok) return Outcome::reply;  // room_for refused it: a tiny client buffer
  Pending p;
  p.op = Opcode::call;
  p.req_id = id;
  p.call_op = proto::call_op(m.key);
  if (!m.rdv) {  // the handler runs now, its reply in the entry (Wait::log: for its records, if any)
    p.wait = Wait::log;
    const auto k = open_entry(std::move(p));
    if (!k) {
      reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_memory);
      return Outcome::reply;
    }
    const Outcome out = run_call(*k, m.value);
    if (out != Outcome::reply) return out;
    Pending& done = *pending_.find(*k);
    call_reply_ = std::move(done.reply_bytes);  // the reply's view moves with the buffer
    reply = done.reply;
    close_entry(*k);
    return Outcome::reply;
  }
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
  p.wait = Wait::read;
  return queue_request_read(std::move(p), std::move(block), *m.rdv, reply);  // the handler runs when it completes
}

ServerConn::Outcome ServerConn::run_call(Key k, std::span<const std::byte> request) noexcept {
  Pending& p = *pending_.find(k);
  const std::uint32_t id = p.req_id;
  const std::uint16_t op = p.call_op;
  const Handler* fn = config_.handlers != nullptr ? config_.handlers->find(op) : nullptr;
  if (fn == nullptr) {
    ++counters_->calls_no_handler;
    SPDLOG_DEBUG("conn {}: CALL req {} of opcode {:#06x}: no handler", config_.label, id, op);
    p.reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_handler);
    return Outcome::reply;
  }
  CallScope scope(*this, k.pack32());
  Status st = Status::ok;
  try {
    (*fn)(request, scope, scope);
  } catch (const std::bad_alloc&) {
    st = Status::no_memory;
  } catch (const ReplyTooLarge&) {
    st = Status::too_large;
  } catch (const NotOwner&) {
    st = Status::not_owner;
  } catch (const std::exception& e) {
    ++counters_->calls_failed;
    spdlog::warn("conn {}: handler of CALL opcode {:#06x} threw: {}", config_.label, op, e.what());
    st = Status::handler_failed;
  } catch (...) {
    ++counters_->calls_failed;
    spdlog::warn("conn {}: handler of CALL opcode {:#06x} threw a non-exception", config_.label, op);
    st = Status::handler_failed;
  }
  p.records = scope.later();  // counted in durable_waits_ as they were made: the entry owns them now
  if (st == Status::ok && scope.refused()) st = Status::refused;
  if (scope.not_owner()) {  // what it wrote before that stays (handler.hpp)
    ++counters_->not_owner;
    st = Status::not_owner;
  }
  if (scope.record_failed()) {
    ++counters_->io_errors;
    st = Status::io_error;
  }
  // The reply (what the client sees once the handler's records are durable).
  try {
    if (st != Status::ok) {
      p.reply = proto::msg::error_reply(Opcode::call, id, 0, st);
    } else if (scope.size() + proto::kHeaderSize <= call_reply_room()) {
      p.reply_bytes = scope.take_small();
      p.reply = proto::msg::call_reply(id, 0, p.reply_bytes);
    } else if (pulls_.size() >= config_.max_pins || pulls_.contains(id)) {
      fail(CloseCause::protocol_error,
           fmt::format("CALL req {}: {} pulled values not released (limit {})", id, pulls_.size(), config_.max_pins));
      return Outcome::failed;  // the entry went with the close
    } else {
      LargeRef block = scope.take_block();
      const proto::RdvDesc desc{block->addr, block->rkey};
      const std::uint64_t len = block->bytes.size();
      pulls_.emplace(id, std::move(block));  // reserved: no rehash below max_pins
      p.reply = proto::msg::call_reply_pull(id, 0, desc, len);
    }
  } catch (const std::bad_alloc&) {
    p.reply = proto::msg::error_reply(Opcode::call, id, 0, Status::no_memory);
  } catch (const ReplyTooLarge&) {
    p.reply = proto::msg::error_reply(Opcode::call, id, 0, Status::too_large);
  }
  // on_durable() answers once every record is durable; the credit rides on the next reply.
  return p.records == 0 ? Outcome::reply : Outcome::no_reply;
}

}  // namespace rkv::kv::server
