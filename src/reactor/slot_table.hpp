// SlotTable<T>: generation-checked slot storage for reactor callbacks.
//
// Keys are (index, generation) pairs that pack into 64 bits, so they can ride
// in epoll_data.u64 instead of a pointer. Erasing a slot bumps its generation,
// so any key still in flight (an epoll batch, a due-timer list) goes stale and
// find() rejects it, even after the index is reused.
//
// An entry whose callback is running is "pinned" (begin_call/end_call). Erasing
// it then only marks it doomed: the value is destroyed and the index recycled
// in end_call(), so a callback may destroy its own registration safely.
//
// Storage is a deque so references stay valid while callbacks insert entries.
#pragma once

#include <cassert>
#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace rkv::reactor {

struct SlotKey {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;

  [[nodiscard]] constexpr std::uint64_t pack() const noexcept {
    return (static_cast<std::uint64_t>(generation) << 32) | index;
  }
  [[nodiscard]] static constexpr SlotKey unpack(std::uint64_t v) noexcept {
    return SlotKey{static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(v >> 32)};
  }
  friend constexpr bool operator==(SlotKey, SlotKey) noexcept = default;
};

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

  SlotTable() = default;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable() { clear(); }

  SlotKey insert(T value) {
    std::uint32_t index = 0;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      assert(slots_.size() < kMaxSlots);
      // Reserve first so erase() can push to free_ without allocating.
      if (free_.capacity() < slots_.size() + 1) free_.reserve(2 * slots_.size() + 8);
      slots_.emplace_back();
      index = static_cast<std::uint32_t>(slots_.size() - 1);
    }
    Slot& s = slots_[index];
    s.value.emplace(std::move(value));
    s.state = SlotState::kLive;
    ++live_;
    return SlotKey{index, s.generation};
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
    ++s->generation;
    --live_;
    switch (s->state) {
      case SlotState::kCalling:
        s->state = SlotState::kDoomed;  // end_call() destroys it
        return true;
      case SlotState::kLive: {
        s->state = SlotState::kFree;
        std::optional<T> dead = std::exchange(s->value, std::nullopt);
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
        std::optional<T> dead = std::exchange(s.value, std::nullopt);
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
  [[nodiscard]] std::uint32_t slot_count() const noexcept {
    return static_cast<std::uint32_t>(slots_.size());
  }

 private:
  struct Slot {
    std::optional<T> value;
    std::uint32_t generation = 0;
    SlotState state = SlotState::kFree;
  };

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
};

}  // namespace rkv::reactor
