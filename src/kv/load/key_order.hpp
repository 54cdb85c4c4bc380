#pragma once
// KeyOrder: per-key FIFO admission, the ordering rule of kvload's pipelined
// runs. Operations on one key go one at a time, in the order they arrived
// (acquire() order = file order in kvload); operations on different keys do
// not wait for each other. Pure logic: waiters are opaque 64-bit tokens
// (kvload passes FiberIds), and handing a key over returns the next holder so
// the caller can wake it.
//
// Thread: not thread-safe; one owner.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rkv::kv::load {

class KeyOrder {
 public:
  using Waiter = std::uint64_t;

  // `w` asks for `key`. True: it holds the key now. False: it was queued
  // behind the earlier arrivals; it holds the key once release()/abandon()
  // hands it over (returned to the caller of those).
  bool acquire(std::string_view key, Waiter w);

  // The holder of `key` is done. Returns the next waiter, which holds the key
  // from now on, or nullopt (the key is free). Releasing a key nobody holds
  // does nothing and returns nullopt.
  std::optional<Waiter> release(std::string_view key) noexcept;

  // `w` gives up on `key` whether it holds it or still waits (a cancelled
  // fiber). Returns the waiter that now holds the key, if that changed.
  std::optional<Waiter> abandon(std::string_view key, Waiter w) noexcept;

  // The current holder of `key`, nullopt if free.
  [[nodiscard]] std::optional<Waiter> holder(std::string_view key) const noexcept;
  [[nodiscard]] std::size_t busy_keys() const noexcept { return keys_.size(); }  // held keys
  [[nodiscard]] std::size_t waiting() const noexcept { return waiting_; }          // queued, not holding

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  struct Entry {
    Waiter holder = 0;
    std::deque<Waiter> queue;  // arrival order
  };
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> keys_;
  std::size_t waiting_ = 0;
};

}  // namespace rkv::kv::load
