#pragma once
// MemoryRegion: ibv_reg_mr with access flags the caller states explicitly.
// Least privilege: there is no default, and nothing grants remote access
// unless asked for. Local read (as a SEND / RDMA WRITE source) needs no
// flag; a buffer the HCA writes into locally (RECV target, RDMA READ
// destination) needs local_write.
//
// The MR does not own the memory: the caller keeps the buffer alive (and
// unmoved) for longer than the MR and any WR that references it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

struct ibv_mr;  // from <infiniband/verbs.h>; only src/verbs touches it

namespace rkv::verbs {

namespace detail {
struct PdHandle;
}
class ProtectionDomain;

enum class Access : std::uint8_t {
  none = 0,
  local_write = 1u << 0,
  remote_read = 1u << 1,
  remote_write = 1u << 2,  // verbs requires local_write alongside it
  mw_bind = 1u << 3,       // memory windows (mw.hpp) may be bound on it; grants nothing by itself
};

constexpr Access operator|(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr Access operator&(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<std::uint8_t>(a) & static_cast<std::uint8_t>(b));
}
// True if every flag of `flags` is in `set`.
constexpr bool has(Access set, Access flags) noexcept { return (set & flags) == flags; }
std::string to_string(Access a);  // e.g. "local_write|remote_read", "none"

class MemoryRegion {
 public:
  // Throws verbs::Error (EINVAL for remote_write without local_write).
  MemoryRegion(const ProtectionDomain& pd, std::span<std::byte> buffer, Access access);

  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion();  // ibv_dereg_mr, then releases the PD

  [[nodiscard]] std::uint32_t lkey() const noexcept;
  [[nodiscard]] std::uint32_t rkey() const noexcept;  // give to a peer only if remote access was granted
  [[nodiscard]] std::uint64_t addr() const noexcept;  // the remote address a peer uses
  [[nodiscard]] std::size_t length() const noexcept { return buffer_.size(); }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return buffer_; }
  [[nodiscard]] Access access() const noexcept { return access_; }
  [[nodiscard]] bool valid() const noexcept { return mr_ != nullptr; }

 private:
  friend class QueuePair;  // a window bind names the MR
  void reset() noexcept;

  std::shared_ptr<detail::PdHandle> pd_;  // declared first: released after mr_ is deregistered
  ::ibv_mr* mr_ = nullptr;
  std::span<std::byte> buffer_;
  Access access_ = Access::none;
};

}  // namespace rkv::verbs
