// KeyGate: see key_gate.hpp.
#include "kv/load/key_gate.hpp"

namespace rkv::kv::load {

KeyGate::Guard KeyGate::lock(std::string_view key) {
  const std::uint64_t me = scheduler_->current().packed();
  std::string k(key);  // copied first: nothing below throws after acquire() but the wait
  if (!order_.acquire(k, me)) {
    try {
      while (order_.holder(k) != me) scheduler_->suspend();
    } catch (...) {  // cancelled while waiting: leave the line, hand over if we were just given it
      if (const auto next = order_.abandon(k, me)) scheduler_->wake(FiberId::unpack(*next));
      throw;
    }
  }
  return Guard(this, std::move(k));
}

void KeyGate::release(const std::string& key) noexcept {
  if (const auto next = order_.release(key)) scheduler_->wake(FiberId::unpack(*next));
}

}  // namespace rkv::kv::load
