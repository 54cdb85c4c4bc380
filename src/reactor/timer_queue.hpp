// TimerQueue: deadline-ordered timers, no fds and no clock reads of its own.
//
// The reactor owns the timerfd and arms it for next_deadline(); this class is
// the pure bookkeeping: an ordered set keyed by (deadline, creation sequence),
// so equal deadlines fire in creation order, plus a SlotTable holding the
// callbacks, so a Timer handle is a generation-checked key, never a pointer.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "reactor/slot_table.hpp"

namespace rkv::reactor {

// std::chrono clock over CLOCK_MONOTONIC: the same clock the timerfd uses, so
// absolute deadlines can be handed to timerfd_settime() as they are.
struct MonotonicClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<MonotonicClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
  }
};

class TimerQueue {
 public:
  using Clock = MonotonicClock;

  TimerQueue() = default;
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // period == 0 means one-shot; otherwise the timer repeats every `period`.
  SlotKey add(Clock::time_point deadline, Clock::duration period, std::function<void()> cb);

  // Cancels the timer; false if it already fired (one-shot) or was cancelled.
  // Safe from inside any timer callback, including the timer's own.
  bool cancel(SlotKey key) noexcept;

  // True if the timer will still fire (a periodic timer inside its own
  // callback counts; a one-shot one does not).
  [[nodiscard]] bool pending(SlotKey key) const noexcept;

  [[nodiscard]] std::optional<Clock::time_point> next_deadline() const noexcept;

  // Fires every timer due at `now`, in (deadline, creation) order, and returns
  // how many callbacks ran. Timers added by those callbacks wait for the next
  // call even if already due, so an after(0) chain cannot starve the loop.
  // Callbacks must not throw (noexcept: an escaping exception terminates).
  std::size_t run_due(Clock::time_point now) noexcept;

  [[nodiscard]] std::size_t size() const noexcept { return entries_.live(); }

  // Drops every timer (reactor shutdown).
  void clear() noexcept;

 private:
  struct Entry {
    Clock::time_point deadline;
    Clock::duration period;
    std::uint64_t seq;  // creation order, the tie-breaker for equal deadlines
    std::function<void()> cb;
  };
  struct Order {
    Clock::time_point deadline;
    std::uint64_t seq;
    SlotKey key;
    friend bool operator<(const Order& a, const Order& b) noexcept {
      if (a.deadline != b.deadline) return a.deadline < b.deadline;
      return a.seq < b.seq;
    }
  };

  SlotTable<Entry> entries_;
  std::set<Order> order_;
  std::vector<SlotKey> due_;  // scratch for run_due, kept to avoid reallocating
  std::uint64_t next_seq_ = 0;
  bool running_ = false;
};

}  // namespace rkv::reactor
