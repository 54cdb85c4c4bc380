// KeyOrder: see key_order.hpp.
#include "kv/load/key_order.hpp"

#include <algorithm>

namespace rkv::kv::load {

bool KeyOrder::acquire(std::string_view key, Waiter w) {
  const auto it = keys_.find(key);
  if (it == keys_.end()) {
    keys_.emplace(std::string(key), Entry{w, {}});
    return true;
  }
  it->second.queue.push_back(w);
  ++waiting_;
  return false;
}

std::optional<KeyOrder::Waiter> KeyOrder::release(std::string_view key) noexcept {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  Entry& e = it->second;
  if (e.queue.empty()) {
    keys_.erase(it);
    return std::nullopt;
  }
  e.holder = e.queue.front();
  e.queue.pop_front();
  --waiting_;
  return e.holder;
}

std::optional<KeyOrder::Waiter> KeyOrder::abandon(std::string_view key, Waiter w) noexcept {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  Entry& e = it->second;
  if (e.holder == w) return release(key);
  if (const auto q = std::find(e.queue.begin(), e.queue.end(), w); q != e.queue.end()) {
    e.queue.erase(q);
    --waiting_;
  }
  return std::nullopt;
}

std::optional<KeyOrder::Waiter> KeyOrder::holder(std::string_view key) const noexcept {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second.holder;
}

}  // namespace rkv::kv::load
