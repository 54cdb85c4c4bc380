#pragma once
// WrId: the 64-bit work-request id carried through the HCA and back in every
// completion. Pure value type, no verbs dependency.
//
//   bits  0..31  slot index        (which owner-side slot the WR belongs to)
//   bits 32..55  generation        (bumped by the owner each time the slot is
//                                   freed and reused)
//   bits 56..63  kind              (what the WR was: recv, send, ...)
//
// Why: completions must be routed back to their owner without a raw pointer
// in wr_id (a pointer dangles once the owner is gone, and flushed completions
// arrive after teardown started). A flush for a slot that has since been
// freed and reused carries the old generation, so the owner can recognise it
// as stale with is_current() and drop it.

#include <cstdint>
#include <string_view>

namespace rkv::verbs {

enum class WrKind : std::uint8_t {
  none = 0,  // zero value, never posted; catches an uninitialised wr_id
  recv = 1,
  send = 2,
  rdma_read = 3,
  rdma_write = 4,
  window = 5,  // a memory window's bind or invalidation
};

constexpr std::string_view to_string(WrKind kind) noexcept {
  switch (kind) {
    case WrKind::none: return "none";
    case WrKind::recv: return "recv";
    case WrKind::send: return "send";
    case WrKind::rdma_read: return "rdma_read";
    case WrKind::rdma_write: return "rdma_write";
    case WrKind::window: return "window";
  }
  return "invalid";  // a decoded byte that is not an enumerator
}

class WrId {
 public:
  static constexpr unsigned kSlotBits = 32;
  static constexpr unsigned kGenerationBits = 24;
  static constexpr unsigned kKindBits = 8;
  static constexpr std::uint32_t kGenerationMask = (1u << kGenerationBits) - 1;

  constexpr WrId() noexcept = default;

  // generation is taken modulo 2^24 (it wraps; see next_generation()).
  constexpr WrId(std::uint32_t slot, std::uint32_t generation, WrKind kind) noexcept
      : raw_(std::uint64_t{slot} |
             (std::uint64_t{generation & kGenerationMask} << kSlotBits) |
             (std::uint64_t{static_cast<std::uint8_t>(kind)} << (kSlotBits + kGenerationBits))) {}

  // encode/decode: the value stored in ibv_send_wr/ibv_recv_wr/ibv_wc.wr_id.
  [[nodiscard]] constexpr std::uint64_t encode() const noexcept { return raw_; }
  [[nodiscard]] static constexpr WrId decode(std::uint64_t raw) noexcept {
    WrId id;
    id.raw_ = raw;
    return id;
  }

  [[nodiscard]] constexpr std::uint32_t slot() const noexcept {
    return static_cast<std::uint32_t>(raw_);
  }
  [[nodiscard]] constexpr std::uint32_t generation() const noexcept {
    return static_cast<std::uint32_t>(raw_ >> kSlotBits) & kGenerationMask;
  }
  [[nodiscard]] constexpr WrKind kind() const noexcept {
    return static_cast<WrKind>(raw_ >> (kSlotBits + kGenerationBits));
  }

  // False for a stale completion: the slot was freed and reused (its
  // generation bumped) after this WR was posted.
  [[nodiscard]] constexpr bool is_current(std::uint32_t slot_generation) const noexcept {
    return generation() == (slot_generation & kGenerationMask);
  }

  // The generation an owner should give a slot when it reuses it.
  [[nodiscard]] static constexpr std::uint32_t next_generation(std::uint32_t g) noexcept {
    return (g + 1) & kGenerationMask;
  }

  friend constexpr bool operator==(WrId, WrId) noexcept = default;

 private:
  std::uint64_t raw_ = 0;
};

static_assert(WrId::kSlotBits + WrId::kGenerationBits + WrId::kKindBits == 64);
static_assert(WrId::decode(WrId(7, 3, WrKind::send).encode()).slot() == 7);
static_assert(WrId::decode(WrId(7, 3, WrKind::send).encode()).generation() == 3);
static_assert(WrId::decode(WrId(7, 3, WrKind::send).encode()).kind() == WrKind::send);
static_assert(WrId(0xffffffffu, WrId::kGenerationMask, WrKind::rdma_write).slot() == 0xffffffffu);
static_assert(WrId::next_generation(WrId::kGenerationMask) == 0);

}  // namespace rkv::verbs
