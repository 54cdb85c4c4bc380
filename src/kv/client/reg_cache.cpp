// RegCache: see reg_cache.hpp.
#include "kv/client/reg_cache.hpp"

#include <iterator>
#include <vector>

namespace rkv::kv::client {

RegCache::Lease& RegCache::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    cache_ = o.cache_;
    it_ = o.it_;
    o.cache_ = nullptr;
  }
  return *this;
}

void RegCache::Lease::reset() noexcept {
  if (cache_ != nullptr) cache_->release(it_);
  cache_ = nullptr;
}

RegCache::Lease RegCache::acquire(std::span<const std::byte> bytes, verbs::Access access) {
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t end = begin + bytes.size();
  // Candidates start at or before `begin`; the closest few are enough (entries rarely nest).
  auto it = by_begin_.upper_bound(begin);
  for (int tries = 0; tries < 8 && it != by_begin_.begin(); ++tries) {
    --it;
    Entry& e = *it->second;
    if (!e.doomed && e.access == access && e.begin + e.len >= end) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++e.users;
      ++stats_.hits;
      return Lease(this, it->second);
    }
  }
  // Miss: register exactly this range. The registration API needs a mutable
  // span; access decides what the HCA may do (remote_read never writes).
  auto* p = const_cast<std::byte*>(bytes.data());
  auto reg = registrar_->register_memory({p, bytes.size()}, access);
  lru_.push_front(Entry{begin, bytes.size(), access, std::move(reg), 1, false});
  try {
    by_begin_.emplace(begin, lru_.begin());
  } catch (...) {
    lru_.pop_front();
    throw;
  }
  ++stats_.misses;
  stats_.bytes += bytes.size();
  ++stats_.entries;
  Lease lease(this, lru_.begin());
  evict();
  return lease;
}

void RegCache::release(Iter it) noexcept {
  if (--it->users == 0) {
    if (it->doomed) {
      erase(it);
    } else {
      evict();
    }
  }
}

void RegCache::erase(Iter it) noexcept {
  auto [lo, hi] = by_begin_.equal_range(it->begin);
  for (auto m = lo; m != hi; ++m) {
    if (m->second == it) {
      by_begin_.erase(m);
      break;
    }
  }
  stats_.bytes -= it->len;
  --stats_.entries;
  lru_.erase(it);  // deregisters
}

void RegCache::evict() noexcept {
  auto it = lru_.end();
  while (stats_.bytes > budget_ && it != lru_.begin()) {
    --it;
    if (it->users != 0) continue;
    auto victim = it;
    it = std::next(it);  // stays valid: only `victim` is erased
    erase(victim);
    ++stats_.evictions;
  }
}

void RegCache::forget(std::span<const std::byte> bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t end = begin + bytes.size();
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto cur = it++;
    if (cur->begin >= end || cur->begin + cur->len <= begin) continue;
    if (cur->users != 0) {
      cur->doomed = true;
    } else {
      erase(cur);
    }
  }
}

RegCacheStats RegCache::stats() const noexcept { return stats_; }

}  // namespace rkv::kv::client
