// Store, expiry part (docs/architecture.md "Time to live"): keys that carry
// an absolute expiry time, found expired lazily by every lookup and removed
// actively, soonest first, by expire_due().
//
// The keys with an expiry form a binary min-heap by expire_at, each entry
// knowing its own place (heap_pos, as the sampling pools' pool_pos), so a key
// that goes or changes its expiry leaves or moves in O(log n) and the heap
// never holds a stale entry: its size is exactly the keys with a TTL, and
// its top is always the next key due.
//
// An expired key goes through erase(it) as a DEL would: its one-sided index
// entry is cleared first, then its value is dropped (a value pinned by a
// transfer stays whole until its last pin goes). Nothing is logged: the log
// holds the absolute expiry time, and recovery drops what has expired.
//
// Thread: the reactor's (as the Store).
#include <utility>

#include "kv/store/readable_index.hpp"
#include "kv/store/store.hpp"
#include "proto/wall_clock.hpp"

namespace rkv::kv::store {

ExpireAt wall_ms() noexcept { return proto::wall_ms(); }

void Store::expire_entry(Node* it) noexcept {
  erase(it);
  ++expired_;
}

bool Store::expire(std::string_view key, ExpireAt expire_at) {
  Node* const it = find_live(key);
  if (it == nullptr) return false;
  set_expiry(*it, expire_at);
  if (index_ != nullptr && it->second.bucket != ReadableIndex::kNoBucket)
    index_->set_expiry(it->second.bucket, indexed_expiry(it->second));
  return true;
}

std::optional<std::int64_t> Store::ttl(std::string_view key) {
  Node* const it = find_live(key);
  if (it == nullptr) return std::nullopt;
  const ExpireAt at = it->second.expire_at;
  if (at == kNoExpiry) return -1;
  const ExpireAt left = at - now();
  return left > 0 ? left : 0;
}

std::size_t Store::expire_due(std::size_t max) noexcept {
  std::size_t n = 0;
  const ExpireAt t = now();
  while (n < max && !expiry_heap_.empty() && expiry_heap_.front()->second.expire_at <= t) {
    Node* top = expiry_heap_.front();
    expire_entry(top);
    ++n;
  }
  return n;
}

void Store::set_expiry(Node& n, ExpireAt expire_at) noexcept {
  if (expire_at == kKeepExpiry) return;
  Value& v = n.second;
  v.expire_at = expire_at;
  if (expire_at == kNoExpiry) {
    heap_out(n);
    return;
  }
  if (v.heap_pos == kNotPooled) {
    try {
      expiry_heap_.push_back(&n);
    } catch (...) {
      // Out of memory: it still expires, lazily, on its next lookup.
      return;
    }
    v.heap_pos = static_cast<std::uint32_t>(expiry_heap_.size() - 1);
  }
  heap_place(v.heap_pos);
}

void Store::heap_out(Node& n) noexcept {
  const std::uint32_t pos = n.second.heap_pos;
  if (pos == kNotPooled) return;
  n.second.heap_pos = kNotPooled;
  Node* last = expiry_heap_.back();
  expiry_heap_.pop_back();
  if (last == &n) return;
  expiry_heap_[pos] = last;
  last->second.heap_pos = pos;
  heap_place(pos);
}

void Store::heap_place(std::size_t i) noexcept {
  if (i > 0 && expiry_heap_[i]->second.expire_at < expiry_heap_[(i - 1) / 2]->second.expire_at) {
    heap_up(i);
  } else {
    heap_down(i);
  }
}

void Store::heap_up(std::size_t i) noexcept {
  Node* n = expiry_heap_[i];
  while (i > 0) {
    const std::size_t parent = (i - 1) / 2;
    if (expiry_heap_[parent]->second.expire_at <= n->second.expire_at) break;
    expiry_heap_[i] = expiry_heap_[parent];
    expiry_heap_[i]->second.heap_pos = static_cast<std::uint32_t>(i);
    i = parent;
  }
  expiry_heap_[i] = n;
  n->second.heap_pos = static_cast<std::uint32_t>(i);
}

void Store::heap_down(std::size_t i) noexcept {
  const std::size_t size = expiry_heap_.size();
  Node* n = expiry_heap_[i];
  for (;;) {
    std::size_t child = 2 * i + 1;
    if (child >= size) break;
    if (child + 1 < size && expiry_heap_[child + 1]->second.expire_at < expiry_heap_[child]->second.expire_at) {
      ++child;
    }
    if (n->second.expire_at <= expiry_heap_[child]->second.expire_at) break;
    expiry_heap_[i] = expiry_heap_[child];
    expiry_heap_[i]->second.heap_pos = static_cast<std::uint32_t>(i);
    i = child;
  }
  expiry_heap_[i] = n;
  n->second.heap_pos = static_cast<std::uint32_t>(i);
}

}  // namespace rkv::kv::store
