#include "kv/store/store.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>

#include "kv/store/readable_index.hpp"
#include "proto/copy.hpp"
#include "proto/crc32c.hpp"
#include "proto/wire.hpp"

namespace rkv::kv::store {

void Store::attach_index(ReadableIndex& index, BlockSource small_blocks, BlockSize block_size) {
  index_ = &index;
  small_blocks_ = std::move(small_blocks);
  small_size_ = std::move(block_size);
  // Keys stored before: indexed as ask-by-message (their values are not in
  // blocks laid out for readers) until their next SET.
  map_.for_each([&](Node& n) {
    n.second.bucket = ReadableIndex::kNoBucket;
    const std::uint32_t b = index_->claim(n.first);
    n.second.bucket = b;
    if (b != ReadableIndex::kNoBucket) index_->withdraw(b, n.first);
  });
}

void Store::detach() noexcept {
  index_ = nullptr;
  small_blocks_ = nullptr;
  large_blocks_ = nullptr;
  small_size_ = nullptr;
  large_size_ = nullptr;
  map_.for_each([](Node& n) { n.second.bucket = ReadableIndex::kNoBucket; });
}

LargeRef Store::small_block(std::string_view key, std::string_view value) const noexcept {
  if (!small_blocks_) return {};
  std::shared_ptr<LargeValue> b;
  try {
    b = small_blocks_(value.size() + key.size());
  } catch (...) {
    return {};
  }
  if (!b || b->capacity < value.size() + key.size()) return {};
  proto::copy_bytes(b->bytes.data(), value.data(), value.size());
  b->bytes = b->bytes.first(value.size());  // the key follows; reindex() copies it
  return b;
}

void Store::reindex(Node* it, bool is_new, std::optional<std::uint32_t> value_crc) noexcept {
  const std::string_view key = it->first;
  Value& v = it->second;
  if (is_new) v.bucket = index_->claim(key);
  if (v.bucket == ReadableIndex::kNoBucket) return;  // overflow: clients ask by message
  const LargeValue* b = v.block();
  if (b == nullptr) {
    // In ordinary memory: readable only when it travels in the entry.
    const std::string_view value = v.view();
    if (!inlines(key, value.size())) {
      index_->withdraw(v.bucket, key);  // never leave an entry naming an older value
      return;
    }
    std::array<std::byte, proto::kInlineMax> data;
    proto::copy_bytes(data.data(), value.data(), value.size());
    proto::copy_bytes(data.data() + value.size(), key.data(), key.size());
    const std::size_t len = value.size() + key.size();
    index_->publish(v.bucket, key, 0, 0, static_cast<std::uint32_t>(value.size()), proto::crc32c(data.data(), len),
                    std::span<const std::byte>(data.data(), len), indexed_expiry(v));
    return;
  }
  const std::size_t n = b->bytes.size();
  if (b->capacity < n + key.size() || n > std::numeric_limits<std::uint32_t>::max()) {
    index_->withdraw(v.bucket, key);  // never leave an entry naming an older value
    return;
  }
  // The block is new (no reader was given it yet): lay the key after the value.
  proto::copy_bytes(b->bytes.data() + n, key.data(), key.size());
  const std::uint32_t crc = value_crc ? proto::crc32c_extend(*value_crc, key.data(), key.size())
                                      : proto::crc32c(b->bytes.data(), n + key.size());
  index_->publish(v.bucket, key, b->addr, b->rkey, static_cast<std::uint32_t>(n), crc,
                  std::span<const std::byte>(b->bytes.data(), n + key.size()), indexed_expiry(v));
}

inline void Store::landed(Node* it, bool is_new, std::optional<std::uint32_t> value_crc,
                          ExpireAt expire_at) noexcept {
  // Most writes change nothing here (no TTL before, none after). Before the
  // entry is published: it carries the expiry.
  if (expire_at != kKeepExpiry && expire_at != it->second.expire_at) set_expiry(*it, expire_at);
  if (index_ != nullptr) reindex(it, is_new, value_crc);
  if (pooled()) pool_in(*it);
  touch(it->second);
}

bool Store::recharge(std::size_t old_charge, std::size_t new_charge) noexcept {
  if (new_charge > old_charge) return budget_->try_charge(new_charge - old_charge);
  budget_->release(old_charge - new_charge);
  return true;
}

template <class Attempt>
auto Store::retry_with_room(std::size_t capacity, std::string_view key, Attempt&& attempt) -> decltype(attempt()) {
  decltype(attempt()) done{};
  for (unsigned evicted = 0; !done && evicted < kMaxEvictionsPerWrite && make_room(capacity, key); ++evicted) {
    done = attempt();
  }
  return done;
}

bool Store::set_evicting(std::string_view key, std::string_view value, ExpireAt expire_at) {
  // With the index on a small value wants a block of its size class first.
  const std::size_t cls = wants_block(key, value.size()) ? small_class(value.size() + key.size()) : 0;
  return retry_with_room(cls, key, [&] { return set_once(key, value, expire_at); });
}

bool Store::set_once(std::string_view key, std::string_view value, ExpireAt expire_at) {
  LargeRef block = wants_block(key, value.size()) ? small_block(key, value) : LargeRef{};
  const std::size_t charge = entry_charge(key.size(), block ? 0 : value.size());
  const std::uint64_t h = map_.hash(key);
  if (Node* it = map_.find(key, h)) {
    const std::size_t old = it->second.size();
    const std::size_t old_charge = entry_charge(it->first, it->second);
    if (!recharge(old_charge, charge)) return false;  // the block (if any) goes back to its arena
    if (pooled()) pool_out(*it);
    try {
      if (block) {
        it->second.assign(std::move(block), false);
      } else {
        it->second.assign(value);  // may throw: update bytes_ only after it
      }
    } catch (...) {
      if (charge > old_charge) budget_->release(charge - old_charge);  // back to where it was
      else budget_->charge(old_charge - charge);
      if (pooled()) pool_in(*it);  // the old value stays
      throw;
    }
    bytes_ = bytes_ - old + value.size();
    landed(it, false, std::nullopt, expire_at);
    return true;
  }
  if (!budget_->try_charge(charge)) return false;
  try {
    Node* it = block ? map_.insert_new(key, h, std::move(block), false) : map_.insert_new(key, h, value);
    bytes_ += key.size() + value.size();
    landed(it, true, std::nullopt, expire_at);
  } catch (...) {
    budget_->release(charge);
    throw;
  }
  return true;
}

bool Store::set_large(std::string_view key, LargeRef value, std::optional<std::uint32_t> value_crc,
                      ExpireAt expire_at) {
  // Only the key's entry can not fit: any key frees one.
  return set_large_once(key, value, value_crc, expire_at) ||
         retry_with_room(0, key, [&] { return set_large_once(key, value, value_crc, expire_at); });
}

bool Store::set_large_once(std::string_view key, LargeRef& value, std::optional<std::uint32_t> value_crc,
                           ExpireAt expire_at) {
  const std::size_t n = value->bytes.size();
  const std::size_t charge = entry_charge(key.size(), 0);
  const std::uint64_t h = map_.hash(key);
  if (Node* it = map_.find(key, h)) {
    const std::size_t old = it->second.size();
    if (!recharge(entry_charge(it->first, it->second), charge)) return false;
    if (pooled()) pool_out(*it);
    it->second.assign(std::move(value), true);  // the old value goes when its last pin does
    bytes_ = bytes_ - old + n;
    landed(it, false, value_crc, expire_at);
    return true;
  }
  if (!budget_->try_charge(charge)) return false;
  try {
    Node* it = map_.insert_new(key, h, std::move(value), true);
    bytes_ += key.size() + n;
    landed(it, true, value_crc, expire_at);
  } catch (...) {
    budget_->release(charge);
    throw;
  }
  return true;
}

bool Store::large_fits(std::string_view key) const noexcept {
  const std::size_t charge = entry_charge(key.size(), 0);
  if (const Node* it = map_.find(key); it != nullptr && entry_charge(it->first, it->second) >= charge) return true;
  return budget_->available() >= charge;
}

std::shared_ptr<LargeValue> Store::value_block(std::string_view key, std::size_t len) noexcept {
  if (!large_blocks_) return {};
  const std::size_t cls = large_class(len + (index_ != nullptr ? key.size() : 0));
  if (auto b = value_block_once(key, len)) return b;
  // Either the key's entry or the block did not fit: a block of its class frees both kinds.
  return retry_with_room(cls, key, [&] { return value_block_once(key, len); });
}

std::shared_ptr<LargeValue> Store::value_block_once(std::string_view key, std::size_t len) const noexcept {
  if (!large_fits(key)) return {};
  const std::size_t tail = index_ != nullptr ? key.size() : 0;  // the key follows the value (reindex)
  std::shared_ptr<LargeValue> b;
  try {
    b = large_blocks_(len + tail);
  } catch (...) {
    return {};
  }
  if (!b || b->capacity < len + tail) return {};
  b->bytes = b->bytes.first(len);
  return b;
}

Store::Kept Store::put_large(std::string_view key, std::string_view value, ExpireAt expire_at) {
  auto block = value_block(key, value.size());
  if (!block) return Kept::no_memory;
  proto::copy_bytes(block->bytes.data(), value.data(), value.size());
  return set_large(key, std::move(block), std::nullopt, expire_at) ? Kept::large : Kept::no_memory;
}

Store::Lookup Store::get(std::string_view key) {
  const Node* it = find_live(key);
  if (it == nullptr) return {};
  touch(it->second);
  return {true, it->second.view(), it->second.large(), it->second.expire_at};
}

Store::Lookup Store::peek(std::string_view key) const {
  const Node* it = map_.find(key);
  if (it == nullptr) return {};
  return {true, it->second.view(), it->second.large(), it->second.expire_at};
}

bool Store::touch_key(std::string_view key) {
  const Node* it = find_live(key);
  if (it == nullptr) return false;
  touch(it->second);
  ++touched_keys_;
  return true;
}

Store::Probe Store::probe(std::string_view key, bool write) const noexcept {
  const Probe p{key.data(), key.size(), map_.hash(key), write};
  map_.prefetch_slot(p.hash);
  return p;
}

void Store::probe_alone(std::string_view key, bool write) const noexcept {
  if (write && index_ != nullptr) index_->prefetch_home(key);
}

void Store::probe_node(const Probe& p) const noexcept {
  if (const Node* n = map_.candidate(p.hash)) __builtin_prefetch(n);
}

void Store::probe_value(const Probe& p) const noexcept {
  const Node* it = map_.find(p.key(), p.hash);
  if (it == nullptr) return;
  const Value& v = it->second;
  if (p.write && index_ != nullptr && v.bucket != ReadableIndex::kNoBucket) index_->prefetch(v.bucket);
  // A write replaces the value: a block's record (its release) or the
  // string it copies into. A read copies the value's bytes out.
  const LargeValue* b = v.block();
  __builtin_prefetch(p.write && b != nullptr ? static_cast<const void*>(b) : v.view().data());
}

bool Store::erase(std::string_view key) {
  Node* it = find_live(key);
  if (it == nullptr) return false;
  erase(it);
  return true;
}

void Store::erase(Node* it) noexcept {
  if (index_ != nullptr) {
    if (it->second.bucket == ReadableIndex::kNoBucket) {
      index_->forget_overflow_key();
    } else {
      index_->release(it->second.bucket);  // readers get NOT FOUND
    }
  }
  bytes_ -= it->first.size() + it->second.size();
  budget_->release(entry_charge(it->first, it->second));
  if (pooled()) pool_out(*it);
  heap_out(*it);
  map_.erase(it);
}

std::size_t Store::step_end(SweepCursor& cursor, std::size_t slots) const noexcept {
  if (!cursor.started || cursor.layout != map_.layout()) {
    // A rebuild since the last step moved keys between slots: from the
    // start, and to the end in this call (starting over in steps could go
    // on for ever while sets keep growing the table).
    if (cursor.started) slots = std::numeric_limits<std::size_t>::max();
    cursor = {0, true, map_.layout()};
  }
  const std::size_t count = map_.slot_count();
  return cursor.slot + std::min(slots, count - std::min(cursor.slot, count));
}

bool Store::visit(SweepCursor& cursor, std::size_t slots, const Visitor& fn) const {
  const std::size_t end = step_end(cursor, slots);
  for (; cursor.slot < end; ++cursor.slot) {
    if (const Node* n = map_.at(cursor.slot)) {
      fn(std::string_view(n->first), Lookup{true, n->second.view(), n->second.large(), n->second.expire_at});
    }
  }
  return cursor.slot >= map_.slot_count();
}

bool Store::sweep(SweepCursor& cursor, std::size_t slots, const KeyFilter& doomed) {
  const std::size_t end = step_end(cursor, slots);
  for (; cursor.slot < end; ++cursor.slot) {
    Node* n = map_.at(cursor.slot);
    if (n == nullptr || !doomed(n->first)) continue;
    if (on_evict_) on_evict_(n->first);
    erase(n);  // moves no other key: the walk goes on from the next slot
    ++dropped_;
  }
  return cursor.slot >= map_.slot_count();
}

}  // namespace rkv::kv::store
