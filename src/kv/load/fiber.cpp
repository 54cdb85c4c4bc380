// Scheduler: see fiber.hpp.
#include "kv/load/fiber.hpp"

#include <boost/context/protected_fixedsize_stack.hpp>
#include <cassert>
#include <memory>
#include <utility>

#if defined(RKV_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace rkv::kv::load {

namespace {

namespace ctx = boost::context;

// ASan switch annotations (no-ops without ASan). start_switch() right before
// a context switch names the stack being switched to; finish_switch() right
// after arriving completes it and reports the stack that was left.
// `fake_stack_save == nullptr` at start_switch() means the current fiber is
// ending: ASan frees its fake stack.
inline void start_switch([[maybe_unused]] void** fake_stack_save, [[maybe_unused]] const void* bottom,
                         [[maybe_unused]] std::size_t size) noexcept {
#if defined(RKV_FIBER_ASAN)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#endif
}

inline void finish_switch([[maybe_unused]] void* fake_stack_save, [[maybe_unused]] const void** bottom_old,
                          [[maybe_unused]] std::size_t* size_old) noexcept {
#if defined(RKV_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#endif
}

// protected_fixedsize_stack that reports the bounds of what it mapped.
struct RecordingStack {
  ctx::protected_fixedsize_stack inner;
  const void** bottom;
  std::size_t* size;

  ctx::stack_context allocate() {
    ctx::stack_context sc = inner.allocate();
    *bottom = static_cast<const char*>(sc.sp) - sc.size;
    *size = sc.size;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept {
#if defined(RKV_FIBER_ASAN)
    // The fiber's frames left their redzones poisoned in ASan's shadow. The
    // pages go back to the kernel here, and a later mmap (a landing buffer)
    // may get them again: reads there were reported as stack-buffer-underflow.
    __asan_unpoison_memory_region(static_cast<char*>(sc.sp) - sc.size, sc.size);
#endif
    inner.deallocate(sc);
  }
};

}  // namespace

Scheduler::Scheduler(SchedulerOptions options) : options_(options) {}

Scheduler::~Scheduler() {
  assert(!in_fiber() && "a Scheduler cannot be destroyed from one of its fibers");
  cancelling_ = true;
  // Every unfinished fiber runs once more: a parked one gets FiberCancelled
  // out of suspend(), one that never started returns at once. Fibers spawned
  // meanwhile (by unwinding code) are reached too: the bound is re-read.
  for (std::uint32_t i = 0; i < fibers_.slot_count(); ++i) {
    while (const std::optional<Key> key = fibers_.key_at(i)) resume(*key);
  }
  error_ = nullptr;  // nobody left to rethrow to
}

Scheduler::Fiber& Scheduler::fiber(Key key) noexcept {
  Fiber* f = fibers_.find(key);
  assert(f != nullptr && "Scheduler: a fiber used after it finished");
  return *f;
}

FiberId Scheduler::spawn(std::function<void()> fn) {
  const void* bottom = nullptr;
  std::size_t size = 0;
  Fiber f;
  f.fn = std::move(fn);
  const Key key = fibers_.insert(std::move(f));  // throws when out of memory
  try {
    ready_.push_back(key);
    Fiber& entry = fiber(key);
    entry.ctx = ctx::fiber(std::allocator_arg,
                           RecordingStack{ctx::protected_fixedsize_stack(options_.stack_size), &bottom, &size},
                           [this, key](ctx::fiber&& main) { return run_fiber(key, std::move(main)); });
    entry.stack_bottom = bottom;
    entry.stack_size = size;
  } catch (...) {
    if (!ready_.empty() && ready_.back() == key) ready_.pop_back();
    fibers_.erase(key);  // never started: no stack, or none left
    throw;
  }
  ++spawned_;
  return FiberId::of(key);
}

ctx::fiber Scheduler::run_fiber(Key key, ctx::fiber&& main) {
  finish_switch(nullptr, &main_bottom_, &main_size_);  // first arrival on this stack
  main_ = std::move(main);
  if (!cancelling_) {
    try {
      Fiber& self = fiber(key);
      std::function<void()> fn = std::move(self.fn);
      self.fn = nullptr;
      fn();
    } catch (const FiberCancelled&) {
      // unwound by ~Scheduler
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }
  start_switch(nullptr, main_bottom_, main_size_);  // this stack is going away
  return std::move(main_);
}

void Scheduler::resume(Key key) {
  // Stays valid while the fiber runs: spawns insert into the table's deque
  // without moving entries, and only this function erases one.
  Fiber& self = fiber(key);
  current_ = key;
  self.state = FiberState::running;
  ctx::fiber f = std::move(self.ctx);
  void* fake_stack = nullptr;
  start_switch(&fake_stack, self.stack_bottom, self.stack_size);
  f = std::move(f).resume();
  finish_switch(fake_stack, nullptr, nullptr);
  current_.reset();
  if (f) {  // parked: suspend() or yield() set the state
    self.ctx = std::move(f);
    return;
  }
  // Finished: the fiber's stack is gone; its id goes stale.
  fibers_.erase(key);
}

void Scheduler::to_main() {
  void* fake_stack = nullptr;
  start_switch(&fake_stack, main_bottom_, main_size_);
  main_ = std::move(main_).resume();
  finish_switch(fake_stack, &main_bottom_, &main_size_);
  if (cancelling_) throw FiberCancelled{};
}

std::size_t Scheduler::run_ready() {
  assert(!in_fiber() && "run_ready() is for the main context");
  if (in_fiber()) return 0;
  std::size_t resumed = 0;
  while (!ready_.empty()) {
    const Key key = ready_.front();
    ready_.pop_front();
    resume(key);  // a ready fiber cannot end before it runs: the key is live
    ++resumed;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  for (const Key key : yielded_) ready_.push_back(key);
  yielded_.clear();
  return resumed;
}

void Scheduler::suspend() {
  assert(in_fiber());
  if (cancelling_) throw FiberCancelled{};
  fiber(*current_).state = FiberState::suspended;
  to_main();
}

void Scheduler::yield() {
  assert(in_fiber());
  if (cancelling_) throw FiberCancelled{};
  yielded_.push_back(*current_);  // first: if it throws, the fiber simply goes on
  fiber(*current_).state = FiberState::ready;
  to_main();
}

bool Scheduler::wake(FiberId id) noexcept {
  Fiber* f = fibers_.find(id.key());
  if (f == nullptr || f->state != FiberState::suspended) return false;
  try {
    ready_.push_back(id.key());
  } catch (...) {  // out of memory: leave it parked rather than lose it
    return false;
  }
  f->state = FiberState::ready;
  return true;
}

FiberId Scheduler::current() const noexcept {
  assert(in_fiber());
  return current_ ? FiberId::of(*current_) : FiberId{};
}

FiberState Scheduler::state(FiberId id) const noexcept {
  const Fiber* f = fibers_.find(id.key());
  return f != nullptr ? f->state : FiberState::free;
}

}  // namespace rkv::kv::load
