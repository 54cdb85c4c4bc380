#pragma once
// CompletionQueue: an ibv_cq bound to a CompletionChannel.
//
// arm_and_poll() is the ONLY function that arms the CQ (ibv_req_notify_cq);
// the constructor arms through it. An armed CQ raises at most one event on
// its channel, for the next completion, and is then unarmed until armed
// again; armed() tells which (an event taken by take_event() unarms).
//
// Spin, then block (reactor.hpp; Linux NAPI works the same way): when the
// channel fd is readable, take_event() (one read: an armed CQ raises one
// event) and poll(); while the loop spins, poll() every turn without arming;
// right before the loop sleeps, arm_and_poll() if !armed(): re-arm, then poll
// until empty. That last poll closes the race where a completion lands after
// the last poll but before the arm: such a completion raises no event (the
// CQ was not armed), so without it it would sit unseen until some later
// completion. A completion that lands after the arm raises an event; if the
// poll already consumed it the next pass merely finds nothing, which is
// harmless. A spinning CQ therefore raises no events at all, and a sleeping
// loop always has its CQs armed.
//
// Size the CQ for every WR that can be outstanding on all QPs using it
// (send + recv depth): an overrun puts those QPs in ERROR.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>

#include "verbs/completion.hpp"

namespace rkv::verbs {

namespace detail {
struct CqHandle;
}
class CompletionChannel;

// What arm_and_poll() did.
struct ArmStats {
  std::size_t completions = 0;  // found by the poll after the arm (the race window was hit)
  // 0, or the errno of the failing verbs call: the CQ may be unarmed; treat
  // it as broken (tear the connection(s) down).
  int error = 0;
};

class CompletionQueue {
 public:
  static constexpr int kPollBatch = 32;

  // ibv_create_cq with at least `min_entries` entries, bound to `channel`
  // (which must not already have a CQ), then armed. Throws verbs::Error.
  CompletionQueue(const CompletionChannel& channel, int min_entries);

  CompletionQueue(CompletionQueue&&) noexcept = default;
  CompletionQueue& operator=(CompletionQueue&&) noexcept = default;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;
  // Acks leftover events and destroys the CQ once no QP references it.
  ~CompletionQueue() = default;

  // Up to `max` completions, no events, no arming. Returns the number
  // handled or a negative errno. `on_completion(const Completion&)` must be
  // noexcept (here and in arm_and_poll): an exception thrown half-way would
  // leave the CQ unarmed with completions queued, a silent stall. It may
  // post new work.
  template <class F>
  int poll(int max, F&& on_completion);

  // Spin, then block: takes the one event an armed CQ raised (the channel fd
  // was readable) and acks it (batched). 1 taken, 0 none pending, or a
  // negative errno. The CQ is unarmed afterwards.
  int take_event() noexcept;
  // Arms the CQ, then polls until empty; nothing if it is already armed.
  // The only arming point.
  template <class F>
  ArmStats arm_and_poll(F&& on_completion);
  [[nodiscard]] bool armed() const noexcept;

  // Raw poll into `out` (at most out.size()). Returns count or negative errno.
  int poll(std::span<Completion> out) noexcept;

  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

 private:
  friend class QueuePair;
  static constexpr unsigned kAckBatch = 64;

  int arm() noexcept;  // 0 or errno; only arm_and_poll() calls it

  template <class F>
  int poll_until_empty(F& on_completion, std::size_t& handled) noexcept;

  std::shared_ptr<detail::CqHandle> handle_;
};

template <class F>
int CompletionQueue::poll_until_empty(F& on_completion, std::size_t& handled) noexcept {
  std::array<Completion, kPollBatch> batch;
  for (;;) {
    const int n = poll(batch);
    if (n < 0) return n;
    for (int i = 0; i < n; ++i) on_completion(static_cast<const Completion&>(batch[static_cast<std::size_t>(i)]));
    handled += static_cast<std::size_t>(n);
    if (n < kPollBatch) return 0;  // a short batch means the CQ was empty
  }
}

template <class F>
ArmStats CompletionQueue::arm_and_poll(F&& on_completion) {
  static_assert(std::is_nothrow_invocable_v<F&, const Completion&>,
                "CompletionQueue::arm_and_poll callback must be noexcept");
  ArmStats stats;
  if (armed()) return stats;
  if (int rc = arm(); rc != 0) {
    stats.error = rc;
    return stats;
  }
  if (int rc = poll_until_empty(on_completion, stats.completions); rc < 0) stats.error = -rc;
  return stats;
}

template <class F>
int CompletionQueue::poll(int max, F&& on_completion) {
  static_assert(std::is_nothrow_invocable_v<F&, const Completion&>,
                "CompletionQueue::poll callback must be noexcept");
  std::array<Completion, kPollBatch> batch;
  int total = 0;
  while (total < max) {
    const int want = std::min(max - total, kPollBatch);
    const int n = poll(std::span<Completion>(batch.data(), static_cast<std::size_t>(want)));
    if (n < 0) return n;
    for (int i = 0; i < n; ++i) on_completion(static_cast<const Completion&>(batch[static_cast<std::size_t>(i)]));
    total += n;
    if (n < want) break;
  }
  return total;
}

}  // namespace rkv::verbs
