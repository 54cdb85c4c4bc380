#pragma once
// KeyTable: the Store's map from string keys to its entries (store.hpp).
//
// Open addressing over a power-of-two array of slots, each holding a key's
// 64-bit hash and a pointer to its node; linear probing. A lookup compares
// the hashes in the slots (four to a cache line) and reads a node only when
// the whole hash matches, so a hit reads the slots' line and its node, a miss
// the slots alone. std::unordered_map (what the Store had before) walked a
// chain of nodes and, with no hash cached in them, hashed the next node's key
// at each step to see whether the chain had left the bucket
// (docs/performance.md, "A store table with the hash in the slot").
//
// The nodes are allocated one by one and never move: a rebuild moves the
// slots' pointers only. So a pointer to a node, or into its key or value,
// stays valid until that key is erased (the Store's eviction pools, its
// expiry heap and its Lookups rely on it).
//
// An erase leaves a tombstone, so the probe runs past it stay whole; when the
// next slot is empty it and the tombstones right before it become empty
// instead. An insert takes the first tombstone or empty slot of its probe.
// When live keys and tombstones would fill 3/4 of the slots the table is
// rebuilt: at twice the size if the live keys would fill more than half,
// else at the same size (the tombstones dropped), so a table whose keys
// change but not their number keeps its size (its load stays between 1/4
// and 3/4). A rebuild moves keys between slots;
// layout() counts rebuilds, so a walk in steps over the slots
// (Store::sweep, Store::visit) can tell that it must start again.
//
// Seeded: each table's hash starts from its own seed (key_table_seed():
// random per process, different per table), so a writer cannot choose keys
// that share slots (hash flooding: a run of thousands of colliding keys
// would make every lookup in it a walk). Nothing outside a table sees its
// hashes: the one-sided index hashes with the wire's hash64.
//
// Thread: one (the Store's owner, the reactor in kvd).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

namespace rkv::kv::store {

// A seed for a new KeyTable: from a random value the process drew once
// (getrandom), mixed with a count of the seeds handed out. Thread: any.
[[nodiscard]] std::uint64_t key_table_seed() noexcept;

template <class V>
class KeyTable {
 public:
  // first/second, as std::unordered_map's value_type, for the Store's code.
  struct Node {
    const std::string first;
    V second;
  };

  // The key read 8 bytes at a time (the last word overlapping the one
  // before; a key under 8 bytes as two overlapping 4-byte halves or its
  // bytes), each word multiplied in, then mixed down so every key byte
  // reaches the low bits that pick the slot. The length is multiplied into
  // the start, not XORed next to the first word's bytes (where "k1" and
  // "k10" cancelled out). Internal to this process: the one-sided index's
  // hash64 is the wire's, not this. Starts from the table's seed.
  [[nodiscard]] std::uint64_t hash(std::string_view s) const noexcept {
    constexpr std::uint64_t kMul = 0x9FB21C651E98DF25ull;
    const char* p = s.data();
    const std::size_t n = s.size();
    std::uint64_t h = (seed_ ^ n) * kMul;
    auto mix = [&](std::uint64_t w) { h = (h ^ w) * kMul; h ^= h >> 32; };
    if (n >= 8) {
      std::size_t i = 0;
      for (; i + 8 < n; i += 8) mix(load_word<std::uint64_t>(p + i));
      mix(load_word<std::uint64_t>(p + n - 8));
    } else if (n >= 4) {
      mix(std::uint64_t{load_word<std::uint32_t>(p)} << 32 | load_word<std::uint32_t>(p + n - 4));
    } else if (n > 0) {
      const auto b = [&](std::size_t i) { return std::uint64_t{static_cast<unsigned char>(p[i])}; };
      mix(b(0) << 16 | b(n / 2) << 8 | b(n - 1));
    }
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
  }

  KeyTable() noexcept : seed_(key_table_seed()) {}
  KeyTable(const KeyTable&) = delete;
  KeyTable& operator=(const KeyTable&) = delete;
  KeyTable(KeyTable&& o) noexcept : seed_(o.seed_) { take(o); }
  KeyTable& operator=(KeyTable&& o) noexcept {
    if (this != &o) {
      destroy();
      take(o);
    }
    return *this;
  }
  ~KeyTable() { destroy(); }

  // The node of `key` (h: hash(key)), or null.
  [[nodiscard]] Node* find(std::string_view key, std::uint64_t h) const noexcept {
    if (slots_ == nullptr) return nullptr;
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.node != nullptr) {
        if (s.hash == h && equal(s.node->first, key)) return s.node;
      } else if (s.hash == kEmpty) {
        return nullptr;
      }
    }
  }
  [[nodiscard]] Node* find(std::string_view key) const noexcept { return find(key, hash(key)); }

  // For prefetching: start loading the slot where a lookup of hash h begins.
  void prefetch_slot(std::uint64_t h) const noexcept {
    if (slots_ != nullptr) __builtin_prefetch(&slots_[h & mask_]);
  }
  // For prefetching: the first node in h's run whose slot holds hash h, or
  // null. Its key is not compared (that would load the node), so it is
  // only a likely match.
  [[nodiscard]] const Node* candidate(std::uint64_t h) const noexcept {
    if (slots_ == nullptr) return nullptr;
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.node != nullptr) {
        if (s.hash == h) return s.node;
      } else if (s.hash == kEmpty) {
        return nullptr;
      }
    }
  }

  // Adds `key` (not in the table: the caller looked, h is hash(key)) with
  // the value V(args...). Throws std::bad_alloc (or what V's constructor
  // throws) with nothing changed.
  template <class... Args>
  Node* insert_new(std::string_view key, std::uint64_t h, Args&&... args) {
    if (slots_ == nullptr || (size_ + tombs_ + 1) * 4 > (mask_ + 1) * 3) {
      const std::size_t cap = slots_ == nullptr ? kMinSlots : mask_ + 1;
      rebuild((size_ + 1) * 2 > cap ? cap * 2 : cap);
    }
    Node* n = new Node{std::string(key), V(std::forward<Args>(args)...)};
    std::size_t i = h & mask_;
    while (slots_[i].node != nullptr) i = (i + 1) & mask_;
    if (slots_[i].hash == kTomb) --tombs_;
    slots_[i] = {h, n};
    ++size_;
    return n;
  }

  // Removes and destroys node `n` (one of this table's).
  void erase(Node* n) noexcept {
    std::size_t i = hash(n->first) & mask_;
    while (slots_[i].node != n) i = (i + 1) & mask_;
    delete n;
    --size_;
    if (slots_[(i + 1) & mask_].node != nullptr || slots_[(i + 1) & mask_].hash != kEmpty) {
      slots_[i] = {kTomb, nullptr};
      ++tombs_;
      return;
    }
    // The run ends here: this slot and the tombstones before it are free for good.
    slots_[i] = {kEmpty, nullptr};
    for (i = (i - 1) & mask_; slots_[i].node == nullptr && slots_[i].hash == kTomb; i = (i - 1) & mask_) {
      slots_[i] = {kEmpty, nullptr};
      --tombs_;
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  // Slots now (0 before the first insert); a walk visits at(0 .. slot_count()-1).
  [[nodiscard]] std::size_t slot_count() const noexcept { return slots_ == nullptr ? 0 : mask_ + 1; }
  // The node in slot `i` (< slot_count()), or null.
  [[nodiscard]] Node* at(std::size_t i) const noexcept { return slots_[i].node; }
  // Rebuilds so far: a walk over the slots that sees it change starts again.
  [[nodiscard]] std::uint64_t layout() const noexcept { return layout_; }
  // Tombstones now (for the tests).
  [[nodiscard]] std::size_t tombstones() const noexcept { return tombs_; }

  // fn(Node&) for every node, in slot order. fn must not insert or erase.
  template <class Fn>
  void for_each(Fn&& fn) const {
    for (std::size_t i = 0; i < slot_count(); ++i) {
      if (Node* n = slots_[i].node) fn(*n);
    }
  }

 private:
  // node null: hash kEmpty (never used: a probe stops here) or kTomb (erased: a probe goes on).
  struct Slot {
    std::uint64_t hash = kEmpty;
    Node* node = nullptr;
  };
  static constexpr std::uint64_t kEmpty = 0;
  static constexpr std::uint64_t kTomb = 1;
  static constexpr std::size_t kMinSlots = 16;

  template <class T>
  static T load_word(const char* p) noexcept {
    T w;
    std::memcpy(&w, p, sizeof w);
    return w;
  }
  // Word by word, as hash() reads a key (a find compares only where the
  // whole hash matched, almost always the key itself: memcmp through the PLT
  // cost more than the words).
  static bool equal(const std::string& a, std::string_view b) noexcept {
    const std::size_t n = b.size();
    if (a.size() != n) return false;
    const char* p = a.data();
    const char* q = b.data();
    if (n >= 8) {
      for (std::size_t i = 0; i + 8 < n; i += 8) {
        if (load_word<std::uint64_t>(p + i) != load_word<std::uint64_t>(q + i)) return false;
      }
      return load_word<std::uint64_t>(p + n - 8) == load_word<std::uint64_t>(q + n - 8);
    }
    if (n >= 4) {
      return load_word<std::uint32_t>(p) == load_word<std::uint32_t>(q) &&
             load_word<std::uint32_t>(p + n - 4) == load_word<std::uint32_t>(q + n - 4);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (p[i] != q[i]) return false;
    }
    return true;
  }

  // Moves every node into a new array of `cap` slots (a power of two).
  void rebuild(std::size_t cap) {
    auto fresh = std::make_unique<Slot[]>(cap);  // throws with nothing changed
    const std::size_t mask = cap - 1;
    for (std::size_t i = 0; i < slot_count(); ++i) {
      const Slot& s = slots_[i];
      if (s.node == nullptr) continue;
      std::size_t j = s.hash & mask;
      while (fresh[j].node != nullptr) j = (j + 1) & mask;
      fresh[j] = s;
    }
    slots_ = std::move(fresh);
    mask_ = mask;
    tombs_ = 0;
    ++layout_;
  }
  void destroy() noexcept {
    for_each([](Node& n) { delete &n; });
    slots_.reset();
    size_ = tombs_ = 0;
  }
  void take(KeyTable& o) noexcept {
    seed_ = o.seed_;  // the slots were placed by its hash
    slots_ = std::move(o.slots_);
    mask_ = std::exchange(o.mask_, 0);
    size_ = std::exchange(o.size_, 0);
    tombs_ = std::exchange(o.tombs_, 0);
    layout_ = o.layout_;
    ++o.layout_;
  }

  std::uint64_t seed_;
  std::unique_ptr<Slot[]> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
  std::size_t tombs_ = 0;
  std::uint64_t layout_ = 0;
};

}  // namespace rkv::kv::store
