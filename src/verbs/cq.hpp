#pragma once
// CompletionQueue: an ibv_cq bound to a CompletionChannel.
//
// arm_and_poll() is the ONLY function that arms the CQ (ibv_req_notify_cq);
// the constructor and drain() arm through it. An armed CQ raises at most one
// event on its channel, for the next completion, and is then unarmed until
// armed again; armed() tells which (an event taken by take_event() unarms).
//
// Two ways to run it:
//
// Events only: call drain() whenever the channel fd is readable:
//   (a) take every pending channel event (ibv_get_cq_event until EAGAIN),
//   (b) ack them in batches (a running count; the rest is acked before the
//       CQ is destroyed, which would otherwise block forever),
//   (c) poll in batches of kPollBatch until the CQ is empty,
//   (d) re-arm (ibv_req_notify_cq, any completion),
//   (e) poll again until empty.
// Step (e) closes the race where a completion lands after the last poll of
// (c) but before (d): such a completion raises no event (the CQ was not
// armed), so without (e) it would sit unseen until some later completion.
// A completion that lands after (d) raises an event; if (e) already consumed
// it the next drain() merely finds nothing, which is harmless.
//
// Spin, then block (reactor.hpp; Linux NAPI works the same way): when the
// channel fd is readable, take_event() (one read: an armed CQ raises one
// event) and poll(); while the loop spins, poll() every turn without arming;
// right before the loop sleeps, arm_and_poll() ((d) and (e)) if !armed(). A
// spinning CQ therefore raises no events at all, and a sleeping loop always
// has its CQs armed.
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

struct DrainStats {
  unsigned events = 0;         // channel events consumed in (a)
  std::size_t before_arm = 0;  // completions handled in (c)
  std::size_t after_arm = 0;   // completions handled in (e): the race window was hit
  // 0, or the errno of the failing verbs call. drain() stopped there and the
  // CQ may be unarmed: treat it as broken (tear the connection(s) down).
  int error = 0;
  [[nodiscard]] std::size_t completions() const noexcept { return before_arm + after_arm; }
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

  // See the header comment. `on_completion(const Completion&)` must be
  // noexcept: an exception thrown half-way would leave the CQ unarmed with
  // completions queued, a silent stall. It may post new work.
  template <class F>
  DrainStats drain(F&& on_completion);

  // Up to `max` completions, no events, no arming. Returns the number
  // handled or a negative errno.
  template <class F>
  int poll(int max, F&& on_completion);

  // Spin, then block: takes the one event an armed CQ raised (the channel fd
  // was readable) and acks it (batched). 1 taken, 0 none pending, or a
  // negative errno. The CQ is unarmed afterwards.
  int take_event() noexcept;
  // Arms the CQ, then polls until empty ((d) and (e) of drain()); nothing if
  // it is already armed. The only arming point.
  template <class F>
  DrainStats arm_and_poll(F&& on_completion);
  [[nodiscard]] bool armed() const noexcept;

  // Raw poll into `out` (at most out.size()). Returns count or negative errno.
  int poll(std::span<Completion> out) noexcept;

  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

 private:
  friend class QueuePair;
  static constexpr unsigned kAckBatch = 64;

  int take_events() noexcept;  // (a)+(b): count, or negative errno
  int arm() noexcept;          // (d): 0 or errno; only arm_and_poll() calls it

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
DrainStats CompletionQueue::drain(F&& on_completion) {
  static_assert(std::is_nothrow_invocable_v<F&, const Completion&>,
                "CompletionQueue::drain callback must be noexcept");
  DrainStats stats;
  const int events = take_events();                                         // (a) (b)
  if (events < 0) {
    stats.error = -events;
    return stats;
  }
  stats.events = static_cast<unsigned>(events);
  if (int rc = poll_until_empty(on_completion, stats.before_arm); rc < 0) {  // (c)
    stats.error = -rc;
    return stats;
  }
  const DrainStats armed = arm_and_poll(on_completion);                     // (d) (e)
  stats.after_arm = armed.after_arm;
  stats.error = armed.error;
  return stats;
}

template <class F>
DrainStats CompletionQueue::arm_and_poll(F&& on_completion) {
  static_assert(std::is_nothrow_invocable_v<F&, const Completion&>,
                "CompletionQueue::arm_and_poll callback must be noexcept");
  DrainStats stats;
  if (armed()) return stats;
  if (int rc = arm(); rc != 0) {
    stats.error = rc;
    return stats;
  }
  if (int rc = poll_until_empty(on_completion, stats.after_arm); rc < 0) stats.error = -rc;
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
