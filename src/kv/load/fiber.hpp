#pragma once
// Scheduler: stackful coroutines (Boost.Context fibers) on one thread.
//
// Model: the thread's own stack is the "main context"; the scheduler resumes
// ready fibers from there (run_ready()) and a fiber gives control back by
// switching context (suspend()/yield()), never by blocking. A parked fiber is
// made ready again by wake(id), typically from a completion callback that the
// reactor runs on the same thread: the callback records the result and wakes
// the fiber; the fiber runs at the next run_ready(), never inside the
// callback. Fibers are entries of a reactor::SlotTable and a FiberId is
// their SlotKey (index + generation): waking a finished fiber, even one whose
// slot was reused, is a no-op that returns false.
//
// kvload's loop is: run_ready(); reactor.run_once(...); repeat (see drive()
// in kv/load/drive.hpp). So fibers run between reactor iterations, with the
// reactor idle: they may submit client operations, create timers, even close
// a Client.
//
// Stacks: mmap'ed with a guard page below (protected_fixedsize_stack), so an
// overflow faults instead of corrupting memory. Only touched pages cost RAM.
// Under AddressSanitizer every switch is announced with
// __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber, so ASan
// tracks which stack is live (no false stack-buffer reports).
//
// Destruction: ~Scheduler resumes every unfinished fiber once more with
// cancellation on; suspend()/yield() then throw FiberCancelled, which unwinds
// the fiber's stack (destructors run) and is caught at the fiber's entry. Do
// not swallow it (catch (...) without rethrow): the destructor would loop.
//
// Thread: the thread that created it; not thread-safe.

#include <boost/context/fiber.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "reactor/slot_table.hpp"

namespace rkv::kv::load {

enum class FiberState : std::uint8_t {
  free,       // no such fiber: never spawned, finished, or a stale id
  ready,      // queued to run at the next run_ready()
  running,    // the current fiber
  suspended,  // parked in suspend() until wake()
};

[[nodiscard]] constexpr std::string_view to_string(FiberState s) noexcept {
  switch (s) {
    case FiberState::free: return "free";
    case FiberState::ready: return "ready";
    case FiberState::running: return "running";
    case FiberState::suspended: return "suspended";
  }
  return "invalid";
}

// A fiber's key in the Scheduler's SlotTable, under the names fibers use.
struct FiberId {
  std::uint32_t slot = 0;        // SlotKey::index
  std::uint32_t generation = 0;  // SlotKey::generation: starts at 1, so 0 never names a live fiber

  [[nodiscard]] constexpr reactor::SlotKey key() const noexcept { return {slot, generation}; }
  [[nodiscard]] static constexpr FiberId of(reactor::SlotKey k) noexcept { return {k.index, k.generation}; }
  // 64-bit token (KeyOrder waiters): SlotKey::pack(), so 0 is never a live fiber either.
  [[nodiscard]] constexpr std::uint64_t packed() const noexcept { return key().pack(); }
  [[nodiscard]] static constexpr FiberId unpack(std::uint64_t v) noexcept { return of(reactor::SlotKey::unpack(v)); }
  friend constexpr bool operator==(const FiberId&, const FiberId&) = default;
};

// Thrown from suspend()/yield() while the scheduler is being destroyed.
// Deliberately not a std::exception, so `catch (const std::exception&)`
// leaves it alone.
struct FiberCancelled {};

#if defined(__SANITIZE_ADDRESS__)
#define RKV_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RKV_FIBER_ASAN 1
#endif
#endif

#if defined(RKV_FIBER_ASAN)
inline constexpr std::size_t kDefaultStackSize = 512 * 1024;  // ASan frames are large
#else
inline constexpr std::size_t kDefaultStackSize = 128 * 1024;
#endif

struct SchedulerOptions {
  std::size_t stack_size = kDefaultStackSize;  // per fiber, guard page included
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options = {});
  ~Scheduler();  // cancels and unwinds every unfinished fiber

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  Scheduler(Scheduler&&) = delete;
  Scheduler& operator=(Scheduler&&) = delete;

  // A new fiber, ready at once (it first runs at the next run_ready()).
  // From the main context or a fiber. Throws std::bad_alloc (or
  // std::system_error if the stack cannot be mapped); nothing is spawned then.
  FiberId spawn(std::function<void()> fn);

  // Main context only: resumes ready fibers until none is ready (fibers that
  // yield() run again at the next call). Returns how many resumes happened.
  // An exception escaping a fiber ends that fiber and is rethrown here.
  std::size_t run_ready();

  // Fiber only: park until wake(current()). Throws FiberCancelled during
  // destruction.
  void suspend();
  // Fiber only: stay ready, let the others run (resumed at the next run_ready()).
  void yield();
  // Suspended -> ready. False (and nothing happens) if `id` is stale or the
  // fiber is not suspended. From anywhere on the scheduler's thread.
  bool wake(FiberId id) noexcept;

  [[nodiscard]] bool in_fiber() const noexcept { return current_.has_value(); }
  // The running fiber; precondition: in_fiber().
  [[nodiscard]] FiberId current() const noexcept;
  // free for a stale id.
  [[nodiscard]] FiberState state(FiberId id) const noexcept;
  [[nodiscard]] std::size_t live() const noexcept { return fibers_.live(); }  // spawned, not finished
  [[nodiscard]] std::size_t ready_count() const noexcept { return ready_.size() + yielded_.size(); }
  [[nodiscard]] std::size_t spawned() const noexcept { return spawned_; }  // ever

 private:
  using Key = reactor::SlotKey;
  // A spawned, unfinished fiber (an entry of fibers_; erased when it ends).
  struct Fiber {
    FiberState state = FiberState::ready;  // never free
    boost::context::fiber ctx;  // the fiber's continuation while it is not running
    std::function<void()> fn;   // until it starts
    const void* stack_bottom = nullptr;  // for the ASan switch annotations
    std::size_t stack_size = 0;
  };

  // The fiber of a key known to be live.
  [[nodiscard]] Fiber& fiber(Key key) noexcept;
  void resume(Key key);  // main -> fiber, until it parks or ends
  void to_main();        // fiber -> main; throws FiberCancelled when cancelling
  boost::context::fiber run_fiber(Key key, boost::context::fiber&& main);

  SchedulerOptions options_;
  // A spawn may insert while a fiber runs: the table's deque keeps the
  // running fiber's entry where it is.
  reactor::SlotTable<Fiber> fibers_;
  std::deque<Key> ready_;
  std::vector<Key> yielded_;  // run again at the next run_ready()
  std::optional<Key> current_;
  boost::context::fiber main_;  // the main context's continuation while a fiber runs
  std::exception_ptr error_;    // escaped a fiber; rethrown by run_ready()
  std::size_t spawned_ = 0;
  bool cancelling_ = false;
  // ASan: the main stack's bounds, learned at the first switch into a fiber.
  const void* main_bottom_ = nullptr;
  std::size_t main_size_ = 0;
};

}  // namespace rkv::kv::load
