#pragma once
// FifoVector<T>: a queue kept in a vector read from a head index, for what a
// connection posts and takes back in order (receive buffers on one QP, SENDs
// in flight, sealed send buffers waiting for a flush). Taking the oldest costs
// no shifting; the taken prefix is dropped only when room is made, once it is
// at least half the vector (so each element moves O(1) times), and room is
// made ahead of the push (make_room), so push never allocates. With room
// made once for twice the most it will ever hold, make_room never allocates
// again: whenever the vector is full, at least half of it is the taken
// prefix, which it drops.
//
// Thread: the owner's (the reactor's); not thread-safe.

#include <algorithm>
#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

namespace rkv::kv::conn {

template <class T>
class FifoVector {
  static_assert(std::is_trivially_copyable_v<T>, "push and pop must not throw");

 public:
  // Room for `n` more without allocating; false if growing failed.
  [[nodiscard]] bool make_room(std::size_t n = 1) noexcept {
    if (items_.size() + n <= items_.capacity()) return true;
    if (head_ > 0 && head_ >= items_.size() / 2) {
      items_.erase(items_.begin(), items_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
      if (items_.size() + n <= items_.capacity()) return true;
    }
    try {
      items_.reserve(std::max({std::size_t{16}, 2 * items_.size(), items_.size() + n}));
    } catch (const std::bad_alloc&) {
      return false;
    }
    return true;
  }
  void push(const T& v) noexcept { items_.push_back(v); }  // after make_room()
  // The i-th oldest (i < size()).
  [[nodiscard]] const T& at(std::size_t i) const noexcept { return items_[head_ + i]; }
  // The oldest, to update in place (!empty()); valid until the next make_room.
  [[nodiscard]] T& front() noexcept { return items_[head_]; }
  // Takes the oldest (!empty()).
  T pop_front() noexcept {
    const T v = items_[head_];
    if (++head_ == items_.size()) clear();
    return v;
  }
  // Removes `v` (the oldest usually, any other is found and erased); false if
  // it is not here.
  [[nodiscard]] bool remove(const T& v) noexcept {
    const std::size_t at = find(v);
    if (at == size()) return false;
    if (at == 0) {
      pop_front();
    } else {
      items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(head_ + at));
    }
    return true;
  }
  // Position of `v` from the oldest, or size() if it is not here.
  [[nodiscard]] std::size_t find(const T& v) const noexcept {
    const auto it = std::find(items_.begin() + static_cast<std::ptrdiff_t>(head_), items_.end(), v);
    return static_cast<std::size_t>(it - items_.begin()) - head_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size() - head_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return items_.capacity(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  void clear() noexcept {
    items_.clear();
    head_ = 0;
  }
  template <class F>
  void for_each(F&& f) const {
    for (std::size_t i = head_; i < items_.size(); ++i) f(items_[i]);
  }

 private:
  std::vector<T> items_;
  std::size_t head_ = 0;  // items_[head_..] are the ones here
};

}  // namespace rkv::kv::conn
