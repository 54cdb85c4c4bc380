#pragma once
// KeyGate: KeyOrder for fibers. lock(key) parks the calling fiber (suspend,
// never blocking) until every earlier lock() of the same key was released;
// the returned Guard releases on destruction and wakes the next fiber in
// line. A fiber cancelled while it waits (~Scheduler) leaves the line.
//
// Thread: the scheduler's thread.

#include <string>
#include <string_view>
#include <utility>

#include "kv/load/fiber.hpp"
#include "kv/load/key_order.hpp"

namespace rkv::kv::load {

class KeyGate {
 public:
  explicit KeyGate(Scheduler& scheduler) : scheduler_(&scheduler) {}

  class Guard {
   public:
    Guard() = default;
    Guard(Guard&& o) noexcept : gate_(std::exchange(o.gate_, nullptr)), key_(std::move(o.key_)) {}
    Guard& operator=(Guard&& o) noexcept {
      if (this != &o) {
        unlock();
        gate_ = std::exchange(o.gate_, nullptr);
        key_ = std::move(o.key_);
      }
      return *this;
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { unlock(); }
    void unlock() noexcept {
      if (gate_ != nullptr) std::exchange(gate_, nullptr)->release(key_);
    }
    [[nodiscard]] bool owns() const noexcept { return gate_ != nullptr; }

   private:
    friend class KeyGate;
    Guard(KeyGate* gate, std::string key) : gate_(gate), key_(std::move(key)) {}
    KeyGate* gate_ = nullptr;
    std::string key_;
  };

  // Fiber only. Returns once the calling fiber holds `key`. Throws
  // FiberCancelled (from suspend) or std::bad_alloc.
  [[nodiscard]] Guard lock(std::string_view key);

  [[nodiscard]] const KeyOrder& order() const noexcept { return order_; }

 private:
  void release(const std::string& key) noexcept;

  Scheduler* scheduler_;
  KeyOrder order_;
};

}  // namespace rkv::kv::load
