#include "kv/store.hpp"

namespace rkv::kv {

void Store::set(std::string_view key, std::string_view value) {
  if (auto it = map_.find(key); it != map_.end()) {
    const std::size_t old = it->second.size();
    it->second.assign(value);  // may throw: update bytes_ only after it
    bytes_ = bytes_ - old + value.size();
    return;
  }
  map_.emplace(std::string(key), Value(value));
  bytes_ += key.size() + value.size();
}

void Store::set_large(std::string_view key, LargeRef value) {
  const std::size_t n = value->bytes.size();
  if (auto it = map_.find(key); it != map_.end()) {
    const std::size_t old = it->second.size();
    it->second.assign(std::move(value));  // the old value goes when its last pin does
    bytes_ = bytes_ - old + n;
    return;
  }
  map_.emplace(std::string(key), Value(std::move(value)));
  bytes_ += key.size() + n;
}

Store::Lookup Store::get(std::string_view key) const {
  auto it = map_.find(key);
  if (it == map_.end()) return {};
  return {true, it->second.view(), it->second.large()};
}

bool Store::erase(std::string_view key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  bytes_ -= it->first.size() + it->second.size();
  map_.erase(it);
  return true;
}

}  // namespace rkv::kv
