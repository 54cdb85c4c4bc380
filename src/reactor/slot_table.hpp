// SlotTable<T>: THE generation-checked slot table of this project. Every id
// that rides through the kernel, the HCA or the peer instead of a pointer is
// a SlotKey of one of these: epoll data and timers (reactor), io_uring
// user_data (Uring), cm_id contexts and wr_ids of the server's connections,
// the client's request ids and wr_ids, the fiber scheduler's FiberIds.
//
// Keys are (index, generation) pairs. Erasing a slot bumps its generation, so
// any key still in flight (an epoll batch, a due-timer list, a flushed work
// completion, a late reply) goes stale and find() rejects it, even after the
// index is reused. Generations are kGenerationBits (16) wide, chosen once here:
// the narrowest id that carries one is the client's 32-bit wire req_id (16
// bits of index + 16 of generation, pack32()); a WrId has room for 24. They
// start at 1 and skip 0 when they wrap, so a zero key never names a live slot.
//
// An entry whose callback is running is "pinned" (begin_call/end_call). Erasing
// it then only marks it doomed: the value is destroyed and the index recycled
// in end_call(), so a callback may destroy its own registration safely.
//
// A table may be bounded (max_slots): try_insert() then says no instead of
// growing, and indices stay below the bound (free indices are reused first),
// so per-slot side arrays of that size can be indexed by them.
//
// Storage is a deque so references stay valid while callbacks insert entries.
#pragma once

#include <cassert>
#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

namespace rkv::reactor {

struct SlotKey {
  static constexpr unsigned kGenerationBits = 16;
  static constexpr std::uint32_t kGenerationMask = (1u << kGenerationBits) - 1;

  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // 1 .. kGenerationMask for a live slot

  // The generation after g (wraps, skipping 0).
  [[nodiscard]] static constexpr std::uint32_t next_generation(std::uint32_t g) noexcept {
    const std::uint32_t n = (g + 1) & kGenerationMask;
    return n == 0 ? 1 : n;
  }

  [[nodiscard]] constexpr std::uint64_t pack() const noexcept {
    return (static_cast<std::uint64_t>(generation) << 32) | index;
  }
  [[nodiscard]] static constexpr SlotKey unpack(std::uint64_t v) noexcept {
    return SlotKey{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)};
  }
  // 32-bit form for keys of tables of at most 2^16 slots (the client's req_id).
  [[nodiscard]] constexpr std::uint32_t pack32() const noexcept {
    return (generation << 16) | (index & 0xFFFFu);
  }
  [[nodiscard]] static constexpr SlotKey unpack32(std::uint32_t v) noexcept {
    return SlotKey{v & 0xFFFFu, v >> 16};
  }
  friend constexpr bool operator==(SlotKey, SlotKey) noexcept = default;
};

static_assert(SlotKey::next_generation(SlotKey::kGenerationMask) == 1);
static_assert(SlotKey::unpack32(SlotKey{7, 3}.pack32()) == SlotKey{7, 3});

enum class SlotState : std::uint8_t {
  kFree,     // no value; index is on the free list
  kLive,     // holds a value
  kCalling,  // holds a value whose callback is on the stack
  kDoomed,   // erased while calling; destroyed when the call returns
};

[[nodiscard]] constexpr std::string_view to_string(SlotState s) noexcept {
  switch (s) {
    case SlotState::kFree: return "free";
    case SlotState::kLive: return "live";
    case SlotState::kCalling: return "calling";
    case SlotState::kDoomed: return "doomed";
  }
  return "?";
}

template <class T>
class SlotTable {
 public:
  // Index 0xFFFFFFFF is never handed out, so callers can reserve packed keys
  // with that index (the reactor's timerfd token).
  static constexpr std::uint32_t kMaxSlots = 0xFFFF'FFFEu;

  explicit SlotTable(std::uint32_t max_slots = kMaxSlots) : max_slots_(max_slots) {
    assert(max_slots >= 1 && max_slots <= kMaxSlots);
  }
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable() { clear(); }

  // Setup paths: throws std::length_error when the table is full (and
  // std::bad_alloc, or whatever T's move throws).
  SlotKey insert(T value) {
    const auto index = take_index();
    if (!index) throw std::length_error("slot table full");
    return emplace_at(*index, std::move(value));
  }

  // Data paths: nullopt when the table is full or memory ran out.
  [[nodiscard]] std::optional<SlotKey> try_insert(T value) noexcept {
    try {
      const auto index = take_index();
      if (!index) return std::nullopt;
      return emplace_at(*index, std::move(value));
    } catch (...) {  // bad_alloc, or T's move
      return std::nullopt;
    }
  }

  // The value for a live (or calling) key; nullptr if the key is stale.
  [[nodiscard]] T* find(SlotKey k) noexcept {
    Slot* s = slot_for(k);
    return s != nullptr ? &*s->value : nullptr;
  }
  [[nodiscard]] const T* find(SlotKey k) const noexcept {
    return const_cast<SlotTable*>(this)->find(k);
  }

  [[nodiscard]] SlotState state(SlotKey k) const noexcept {
    const Slot* s = const_cast<SlotTable*>(this)->slot_for(k);
    return s != nullptr ? s->state : SlotState::kFree;
  }

  // Removes the entry; false if the key was already stale.
  bool erase(SlotKey k) noexcept {
    Slot* s = slot_for(k);
    if (s == nullptr) return false;
    s->generation = SlotKey::next_generation(s->generation);
    --live_;
    switch (s->state) {
      case SlotState::kCalling:
        s->state = SlotState::kDoomed;  // end_call() destroys it
        return true;
      case SlotState::kLive: {
        s->state = SlotState::kFree;
        [[maybe_unused]] std::optional<T> dead = std::exchange(s->value, std::nullopt);
        free_.push_back(k.index);
        // `dead` dies last: its destructor may re-enter the table.
        return true;
      }
      case SlotState::kFree:
      case SlotState::kDoomed:
        break;  // slot_for() never returns these
    }
    assert(false && "SlotTable::erase: unreachable state");
    return false;
  }

  // Pins a live entry for the duration of its callback; nullptr if stale.
  [[nodiscard]] T* begin_call(SlotKey k) noexcept {
    Slot* s = slot_for(k);
    if (s == nullptr) return nullptr;
    assert(s->state == SlotState::kLive && "SlotTable: nested call of one entry");
    s->state = SlotState::kCalling;
    return &*s->value;
  }

  // Unpins; returns true if the entry survived its callback.
  bool end_call(std::uint32_t index) noexcept {
    Slot& s = slots_[index];
    switch (s.state) {
      case SlotState::kCalling:
        s.state = SlotState::kLive;
        return true;
      case SlotState::kDoomed: {
        s.state = SlotState::kFree;
        [[maybe_unused]] std::optional<T> dead = std::exchange(s.value, std::nullopt);
        free_.push_back(index);
        return false;
      }
      case SlotState::kFree:
      case SlotState::kLive:
        break;
    }
    assert(false && "SlotTable::end_call without begin_call");
    return false;
  }

  // Key of the entry at `index` if it is live (for iteration by index).
  [[nodiscard]] std::optional<SlotKey> key_at(std::uint32_t index) const noexcept {
    if (index >= slots_.size()) return std::nullopt;
    const Slot& s = slots_[index];
    if (s.state != SlotState::kLive) return std::nullopt;
    return SlotKey{index, s.generation};
  }

  // Drops every entry. Values are destroyed after the table is already empty,
  // so destructors that re-enter (e.g. a captured handle) see no entries.
  void clear() noexcept {
    std::deque<Slot> dead;
    dead.swap(slots_);
    free_.clear();
    live_ = 0;
  }

  [[nodiscard]] std::size_t live() const noexcept { return live_; }
  [[nodiscard]] bool full() const noexcept { return free_.empty() && slots_.size() >= max_slots_; }
  [[nodiscard]] std::uint32_t max_slots() const noexcept { return max_slots_; }
  [[nodiscard]] std::uint32_t slot_count() const noexcept {
    return static_cast<std::uint32_t>(slots_.size());
  }

 private:
  struct Slot {
    std::optional<T> value;
    std::uint32_t generation = 1;
    SlotState state = SlotState::kFree;
  };

  // A free index (reused first), or a new one; nullopt when full.
  std::optional<std::uint32_t> take_index() {
    if (!free_.empty()) {
      const std::uint32_t index = free_.back();
      free_.pop_back();
      return index;
    }
    if (slots_.size() >= max_slots_) return std::nullopt;  // indices stay below the bound
    // Reserve first so erase() can push to free_ without allocating.
    if (free_.capacity() < slots_.size() + 1) free_.reserve(2 * slots_.size() + 8);
    slots_.emplace_back();
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }

  SlotKey emplace_at(std::uint32_t index, T&& value) {
    Slot& s = slots_[index];
    try {
      s.value.emplace(std::move(value));
    } catch (...) {
      free_.push_back(index);  // reserved: does not allocate
      throw;
    }
    s.state = SlotState::kLive;
    ++live_;
    return SlotKey{index, s.generation};
  }

  // Slot for a key whose generation matches and which holds a callable value.
  Slot* slot_for(SlotKey k) noexcept {
    if (k.index >= slots_.size()) return nullptr;
    Slot& s = slots_[k.index];
    if (s.generation != k.generation) return nullptr;
    switch (s.state) {
      case SlotState::kLive:
      case SlotState::kCalling:
        return &s;
      case SlotState::kFree:
      case SlotState::kDoomed:
        return nullptr;
    }
    return nullptr;
  }

  std::deque<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::uint32_t max_slots_;
};

}  // namespace rkv::reactor
