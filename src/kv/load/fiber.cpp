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
  // out of suspend(), one that never started returns at once.
  for (std::uint32_t s = 0; s < slots_.size(); ++s) {
    while (slots_[s].state != FiberState::free) resume(s);
  }
  error_ = nullptr;  // nobody left to rethrow to
}

FiberId Scheduler::spawn(std::function<void()> fn) {
  std::uint32_t s = 0;
  if (!free_slots_.empty()) {
    s = free_slots_.back();
  } else {
    slots_.emplace_back();
    s = static_cast<std::uint32_t>(slots_.size() - 1);
  }
  const void* bottom = nullptr;
  std::size_t size = 0;
  ctx::fiber f;
  try {
    f = ctx::fiber(std::allocator_arg, RecordingStack{ctx::protected_fixedsize_stack(options_.stack_size), &bottom, &size},
                   [this, s](ctx::fiber&& main) { return run_fiber(s, std::move(main)); });
  } catch (...) {
    if (free_slots_.empty() || free_slots_.back() != s) free_slots_.push_back(s);  // a fresh slot stays free
    throw;
  }
  if (!free_slots_.empty() && free_slots_.back() == s) free_slots_.pop_back();
  Slot& slot = slots_[s];
  slot.state = FiberState::ready;
  slot.ctx = std::move(f);
  slot.fn = std::move(fn);
  slot.stack_bottom = bottom;
  slot.stack_size = size;
  ready_.push_back(s);
  ++live_;
  ++spawned_;
  return {s, slot.generation};
}

ctx::fiber Scheduler::run_fiber(std::uint32_t s, ctx::fiber&& main) {
  finish_switch(nullptr, &main_bottom_, &main_size_);  // first arrival on this stack
  main_ = std::move(main);
  if (!cancelling_) {
    try {
      std::function<void()> fn = std::move(slots_[s].fn);
      slots_[s].fn = nullptr;
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

void Scheduler::resume(std::uint32_t s) {
  current_ = s;
  slots_[s].state = FiberState::running;
  ctx::fiber f = std::move(slots_[s].ctx);
  void* fake_stack = nullptr;
  start_switch(&fake_stack, slots_[s].stack_bottom, slots_[s].stack_size);
  f = std::move(f).resume();
  finish_switch(fake_stack, nullptr, nullptr);
  current_.reset();
  Slot& slot = slots_[s];  // re-read: a spawn inside the fiber may have grown slots_
  if (f) {  // parked: suspend() or yield() set the state
    slot.ctx = std::move(f);
    return;
  }
  // Finished: the fiber's stack is gone.
  slot.state = FiberState::free;
  slot.fn = nullptr;
  slot.stack_bottom = nullptr;
  slot.stack_size = 0;
  if (++slot.generation == 0) slot.generation = 1;
  free_slots_.push_back(s);
  --live_;
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
    const std::uint32_t s = ready_.front();
    ready_.pop_front();
    resume(s);
    ++resumed;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  for (const std::uint32_t s : yielded_) ready_.push_back(s);
  yielded_.clear();
  return resumed;
}

void Scheduler::suspend() {
  assert(in_fiber());
  if (cancelling_) throw FiberCancelled{};
  slots_[*current_].state = FiberState::suspended;
  to_main();
}

void Scheduler::yield() {
  assert(in_fiber());
  if (cancelling_) throw FiberCancelled{};
  slots_[*current_].state = FiberState::ready;
  yielded_.push_back(*current_);
  to_main();
}

bool Scheduler::wake(FiberId id) noexcept {
  if (id.slot >= slots_.size()) return false;
  Slot& slot = slots_[id.slot];
  if (slot.generation != id.generation || slot.state != FiberState::suspended) return false;
  slot.state = FiberState::ready;
  try {
    ready_.push_back(id.slot);
  } catch (...) {  // out of memory: leave it parked rather than lose it
    slot.state = FiberState::suspended;
    return false;
  }
  return true;
}

FiberId Scheduler::current() const noexcept {
  assert(in_fiber());
  const std::uint32_t s = current_.value_or(0);
  return {s, s < slots_.size() ? slots_[s].generation : 0};
}

FiberState Scheduler::state(FiberId id) const noexcept {
  if (id.slot >= slots_.size() || slots_[id.slot].generation != id.generation) return FiberState::free;
  return slots_[id.slot].state;
}

}  // namespace rkv::kv::load
