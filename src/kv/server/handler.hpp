#pragma once
// User-defined operations (docs/protocol.md "CALL", docs/architecture.md
// "Handlers"): what a program embedding the server registers with
// Server::handle(op, fn), and the two small interfaces a handler gets.
//
// A Handler runs on the reactor thread, inside the request path, once per
// CALL of its opcode: it gets the request bytes (a view: eager ones in the
// receive buffer, large ones in the arena block the server RDMA READ them
// into), writes its reply through a ReplyWriter and may read and write the
// Store through a StoreAccess. It must not block (no I/O, no waiting, no
// sleeping, no locks another thread holds): every other client waits while
// it runs. Debug builds assert the thread in every StoreAccess call and in
// ReplyWriter's append/extend/reserve. It must not keep the views or the two references after it returns.
//
// A handler that throws gets its client a handler_failed status (the
// exception's text is logged), never a dropped connection; writes it made
// before throwing stay (and are recorded, so the reply still waits for them
// under --fsync always). refuse() answers `refused` (a request the operation
// does not accept, e.g. INCR of a value that is not an integer). A store
// access to a key the server does not answer for (a cluster member's key
// of another primary's shard, or a write while its lease may have lapsed:
// shard_gate.hpp) throws, and the CALL is answered not_owner even if the
// handler caught it; writes it made before stay.
//
// Writes through StoreAccess follow the rules of a built-in SET/DEL: applied
// to the Store at once (visible to every later request and, with the index,
// to one-sided GETs: the entry is published before the reply), and recorded
// with the Durability; the CALL's reply waits until every record it made is
// durable (io_error if one failed), exactly as a SET_REPLY would.
//
// Owns: Handlers, the table of registered handlers (Server holds one).
// Thread: the reactor's.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>

#include "proto/wire.hpp"

namespace rkv::reactor {
class Reactor;
}

namespace rkv::kv::server {

// The reply under construction. Empty by default (a CALL_REPLY with no bytes).
class ReplyWriter {
 public:
  ReplyWriter() = default;
  ReplyWriter(const ReplyWriter&) = delete;
  ReplyWriter& operator=(const ReplyWriter&) = delete;
  ReplyWriter(ReplyWriter&&) = delete;
  ReplyWriter& operator=(ReplyWriter&&) = delete;

  // Appends bytes to the reply. Throws std::bad_alloc when no memory is left
  // (the CALL is then answered no_memory), or a std::length_error of its own
  // beyond the server's value limit (answered too_large).
  virtual void append(std::span<const std::byte> bytes) = 0;
  void append(std::string_view text) { append(proto::as_bytes(text)); }
  // n more bytes at the end of the reply, to fill in place (valid until the
  // next call on this writer). A reply of 4 KiB or more is built in
  // registered memory and pulled by the client from there: reserve() its
  // size first and it is written once, never copied.
  [[nodiscard]] virtual std::span<std::byte> extend(std::size_t n) = 0;
  virtual void reserve(std::size_t n) = 0;
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
  // Answer `refused` instead of the bytes (what was appended is dropped).
  virtual void refuse() noexcept = 0;

 protected:
  ~ReplyWriter() = default;
};

// The handler's view of the Store: the same rules as built-in GET/SET/DEL.
class StoreAccess {
 public:
  StoreAccess() = default;
  StoreAccess(const StoreAccess&) = delete;
  StoreAccess& operator=(const StoreAccess&) = delete;
  StoreAccess(StoreAccess&&) = delete;
  StoreAccess& operator=(StoreAccess&&) = delete;

  // The key's value, or nullopt. The view is valid until the handler's next
  // set()/del() (with an eviction policy a set may evict any key to make
  // room) or its return.
  [[nodiscard]] virtual std::optional<std::string_view> get(std::string_view key) const = 0;
  // Inserts or overwrites (a value of 4 KiB and more goes into the arena,
  // like a rendezvous SET's). False: the key is empty or too long, the value
  // over the server's limit, or no memory (nothing changed).
  [[nodiscard]] virtual bool set(std::string_view key, std::span<const std::byte> value) = 0;
  bool set(std::string_view key, std::string_view value) { return set(key, proto::as_bytes(value)); }
  // Removes the key; true if it existed.
  virtual bool del(std::string_view key) = 0;

 protected:
  ~StoreAccess() = default;
};

using Handler = std::function<void(std::span<const std::byte> request, ReplyWriter& reply, StoreAccess& store)>;

// The registered handlers, by user opcode.
class Handlers {
 public:
  // `owner`: the reactor whose thread runs the handlers (asserted in debug builds).
  explicit Handlers(const reactor::Reactor* owner = nullptr) noexcept : owner_(owner) {}

  // Registers (or replaces) the handler of `op`. Throws std::invalid_argument
  // for an op below proto::kFirstCallOp (reserved) or an empty fn.
  void add(std::uint16_t op, Handler fn);
  // Null when `op` has none.
  [[nodiscard]] const Handler* find(std::uint16_t op) const noexcept;
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  // Debug builds: the caller is the owner reactor's thread.
  void assert_owner() const noexcept;

 private:
  const reactor::Reactor* owner_;
  std::unordered_map<std::uint16_t, Handler> map_;
};

}  // namespace rkv::kv::server
