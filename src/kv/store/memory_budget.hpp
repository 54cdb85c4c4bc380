#pragma once
// MemoryBudget: the one bound on the store's memory (kvd --max-memory,
// docs/architecture.md "Memory limit"). What charges it: the Store (per key:
// an estimate of its map node plus the key and, for a value kept as a
// std::string, the value), each Arena (whole chunks, when it grows; given
// back when the arena's state goes) and the Server (the one-sided index
// region, once). A charge that would go over the limit is refused, and the
// SET that needed it fails with no_memory; nothing already stored is touched.
// Setup charges (the index) may be forced over the limit.
//
// Thread: the reactor's (plain integers). Shared by the Store and the arenas
// (shared_ptr: an arena's state may outlive the Server).

#include <cstddef>
#include <limits>

namespace rkv::kv::store {

class MemoryBudget {
 public:
  static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

  explicit MemoryBudget(std::size_t limit = kUnlimited) noexcept : limit_(limit) {}

  // Charges n bytes if they fit under the limit; false (nothing charged) if not.
  [[nodiscard]] bool try_charge(std::size_t n) noexcept {
    if (n > available()) return false;
    used_ += n;
    return true;
  }
  // Charges n bytes even over the limit (setup: the index region).
  void charge(std::size_t n) noexcept { used_ += n; }
  void release(std::size_t n) noexcept { used_ = n > used_ ? 0 : used_ - n; }

  [[nodiscard]] std::size_t limit() const noexcept { return limit_; }
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  [[nodiscard]] std::size_t available() const noexcept { return used_ >= limit_ ? 0 : limit_ - used_; }
  [[nodiscard]] bool unlimited() const noexcept { return limit_ == kUnlimited; }

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
};

}  // namespace rkv::kv::store
