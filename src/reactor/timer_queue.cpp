#include "reactor/timer_queue.hpp"

#include <cassert>
#include <utility>

namespace rkv::reactor {

SlotKey TimerQueue::add(Clock::time_point deadline, Clock::duration period,
                        std::function<void()> cb) {
  assert(period.count() >= 0);
  const std::uint64_t seq = next_seq_++;
  const SlotKey key = entries_.insert(Entry{deadline, period, seq, std::move(cb)});
  try {
    order_.insert(Order{deadline, seq, key});
  } catch (...) {
    entries_.erase(key);
    throw;
  }
  return key;
}

bool TimerQueue::cancel(SlotKey key) noexcept {
  const Entry* e = entries_.find(key);
  if (e == nullptr) return false;
  // Absent from order_ while it is firing or sitting in due_; that is fine.
  order_.erase(Order{e->deadline, e->seq, key});
  return entries_.erase(key);
}

bool TimerQueue::pending(SlotKey key) const noexcept {
  const Entry* e = entries_.find(key);
  if (e == nullptr) return false;
  switch (entries_.state(key)) {
    case SlotState::kLive: return true;
    case SlotState::kCalling: return e->period.count() > 0;
    case SlotState::kFree:
    case SlotState::kDoomed: return false;
  }
  return false;
}

std::optional<TimerQueue::Clock::time_point> TimerQueue::next_deadline() const noexcept {
  if (order_.empty()) return std::nullopt;
  return order_.begin()->deadline;
}

std::size_t TimerQueue::run_due(Clock::time_point now) noexcept {
  assert(!running_ && "TimerQueue::run_due is not reentrant");
  running_ = true;
  // Snapshot the due set first: callbacks may add, cancel or re-add timers.
  due_.clear();
  while (!order_.empty() && order_.begin()->deadline <= now) {
    due_.push_back(order_.begin()->key);
    order_.erase(order_.begin());
  }

  std::size_t fired = 0;
  for (std::size_t i = 0; i < due_.size(); ++i) {
    const SlotKey key = due_[i];
    Entry* e = entries_.begin_call(key);
    if (e == nullptr) continue;  // cancelled by an earlier callback in this batch
    e->cb();
    ++fired;
    if (!entries_.end_call(key.index)) continue;  // cancelled itself
    if (e->period.count() == 0) {
      entries_.erase(key);  // one-shot: release captures now, handle goes stale
      continue;
    }
    // Keep the phase; skip ticks missed while the loop was busy (no burst).
    const auto missed = (now - e->deadline) / e->period;
    e->deadline += (missed + 1) * e->period;
    order_.insert(Order{e->deadline, e->seq, key});
  }
  due_.clear();
  running_ = false;
  return fired;
}

void TimerQueue::clear() noexcept {
  order_.clear();
  entries_.clear();
}

}  // namespace rkv::reactor
