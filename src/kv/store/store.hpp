#pragma once
// The server's in-memory map: string keys -> values.
//
// Small values are std::strings. Large values (rendezvous path) live in
// registered memory (kv::server::Arena) and are held by reference count: the Store
// holds one reference, every in-flight transfer that reads the value holds
// another (a "pin"), and the memory returns to its arena when the last one
// goes. An overwrite replaces the Store's reference only, so a transfer still
// reading the old value keeps it whole.
//
// One-sided GET (attach_index): the Store stays the single owner of values
// and becomes the only writer of a kv::store::ReadableIndex. A value whose
// value and key bytes fit an entry (inlines(): INLINE, at most
// proto::kInlineMax) travels in it and stays a std::string; every other value
// then lives in a registered block laid out [value][key] (small ones too,
// from a block source the server gives it; a std::string only when that
// fails). Every set path publishes the key's entry (or withdraws it when the
// value is neither inline nor in a block), so the index never names a value
// the key no longer has.
//
// Memory limit (MemoryBudget, kvd --max-memory): every key charges
// kEntryOverhead + its length, plus the value's length while the value is a
// std::string; values in registered blocks are charged by their arena when it
// grows. A set that would go over the limit returns false and changes nothing,
// unless an eviction policy (kvd --eviction, Eviction below) makes room: then
// it drops cold keys first (eviction.cpp: sampled, per block size) and
// succeeds.
//
// Every get() and set of a key is an access (the recency and frequency the
// policies read); a key read only by one-sided READs is not seen here, until
// its reader's TOUCH hint arrives (touch_key()).
//
// Time to live (expiry.cpp): a key may carry an absolute expiry time (ms
// since the Unix epoch, CLOCK_REALTIME: the same time the durability log
// writes, so it means the same after a restart). An expired key is gone for
// every lookup (get, ttl, expire, erase) from that moment on: the lookup
// removes it (lazy expiry). Keys with a TTL are also in a min-heap by expiry
// time, and expire_due() (the server calls it from a timer) removes the ones
// that are due, a bounded number per call: that is what withdraws an expired
// key's one-sided index entry without anyone asking for it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "kv/store/key_table.hpp"
#include "kv/store/memory_budget.hpp"
#include "kv/store/stats.hpp"
#include "proto/copy.hpp"
#include "proto/index_format.hpp"
#include "proto/wire.hpp"

namespace rkv::kv::store {

// A value in registered memory. bytes is exactly the value (the block behind
// it may be larger); addr/rkey let a peer RDMA READ it, lkey lets the owner
// post it. The owner's shared_ptr deleter gives the block back.
struct LargeValue {
  std::span<std::byte> bytes;
  std::uint64_t addr = 0;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  // Bytes of the block from bytes.data() (>= bytes.size()); 0 = unknown. With
  // an index the key is stored right after the value, inside it.
  std::size_t capacity = 0;
  // The whole block from bytes.data(): capacity bytes (bytes alone when unknown).
  [[nodiscard]] std::span<std::byte> block() const noexcept {
    return {bytes.data(), std::max(capacity, bytes.size())};
  }
  [[nodiscard]] std::string_view view() const noexcept {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
};
using LargeRef = std::shared_ptr<const LargeValue>;

class ReadableIndex;

// Absolute expiry time, ms since the Unix epoch (0: none).
using ExpireAt = std::int64_t;
inline constexpr ExpireAt kNoExpiry = 0;
// A write that keeps the key's expiry as it is (a CALL handler's, like Redis'
// INCR); a SET replaces it (kNoExpiry clears it).
inline constexpr ExpireAt kKeepExpiry = -1;
// The wall clock expiry times are read against (CLOCK_REALTIME_COARSE, ms).
[[nodiscard]] ExpireAt wall_ms() noexcept;

// What a write that does not fit the memory limit does (kvd --eviction).
enum class Eviction : std::uint8_t {
  noeviction,  // it is refused (no_memory): nothing stored is ever dropped
  lru,         // the least recently used of a few sampled keys goes, until it fits
  lfu,         // the least frequently used (a decaying logarithmic counter) goes
};
[[nodiscard]] constexpr std::string_view to_string(Eviction e) noexcept {
  switch (e) {
    case Eviction::noeviction: return "noeviction";
    case Eviction::lru: return "lru";
    case Eviction::lfu: return "lfu";
  }
  return "invalid";
}
[[nodiscard]] std::optional<Eviction> eviction_from(std::string_view name) noexcept;

class Store {
 public:
  // A registered block with room for n bytes (capacity >= n, bytes of size
  // n), or null when there is none (the value is then kept unindexed).
  using BlockSource = std::function<std::shared_ptr<LargeValue>(std::size_t n)>;
  // The capacity of the block a BlockSource gives for n bytes (its size class).
  using BlockSize = std::function<std::size_t(std::size_t n)>;

  struct Lookup {
    bool found = false;
    // Valid until the next set() or erase() of the same key (or the Store's
    // destruction). Mutations of *other* keys do not invalidate it (entries
    // are nodes that never move: key_table.hpp), except that with an eviction policy
    // any set may evict this key: then it is valid until the next set.
    std::string_view value;
    // Set iff the value is large; holding it pins the bytes behind `value`
    // (they stay valid and unchanged even across a set() of this key).
    LargeRef large;
    ExpireAt expire_at = kNoExpiry;  // when the key expires (kNoExpiry: never)
  };

  // LFU: where a new key's access counter starts (so it is not the first to go).
  static constexpr std::uint8_t kLfuInit = 5;
  // Estimated bytes of one map entry besides its key and value (node, its
  // slot, allocator overhead): what a key costs against the budget.
  static constexpr std::size_t kEntryOverhead = 128;

  // max_memory: the budget's limit (MemoryBudget::kUnlimited: none).
  explicit Store(std::size_t max_memory = MemoryBudget::kUnlimited, Eviction eviction = Eviction::noeviction)
      : budget_(std::make_shared<MemoryBudget>(max_memory)), eviction_(eviction) {}
  // Not copyable: the sampling pools point into this Store's own entries
  // (a move keeps the entries, and with them the pointers).
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&&) noexcept = default;
  Store& operator=(Store&&) noexcept = default;
  ~Store() = default;

  // Inserts or overwrites. Overwriting reuses the existing key (no key copy).
  // False (nothing changed) if it would go over the memory limit; an
  // allocation failure throws std::bad_alloc (nothing changed either).
  // expire_at: the key's new expiry (kNoExpiry: none; kKeepExpiry: as it was).
  [[nodiscard]] bool set(std::string_view key, std::string_view value, ExpireAt expire_at = kNoExpiry) {
    return set_once(key, value, expire_at) || set_evicting(key, value, expire_at);
  }
  // Inserts or overwrites with a large value (no copy: the Store takes a
  // reference). False (nothing changed) if the key's entry would go over the
  // memory limit (the block itself was charged by its arena). value_crc:
  // crc32c of the value bytes when the caller has it (a rendezvous SET's
  // writer sends it, docs/protocol.md); the index then extends it over the
  // key instead of reading the value through again.
  [[nodiscard]] bool set_large(std::string_view key, LargeRef value,
                               std::optional<std::uint32_t> value_crc = std::nullopt,
                               ExpireAt expire_at = kNoExpiry);
  // How a value is kept (put()).
  enum class Kept : std::uint8_t { no_memory, small, large };
  // Stores a copy of `value` the way the Store keeps a value of its size: one
  // too large to travel eagerly (proto::eager_fits) in a value_block() (a
  // large value, served by the rendezvous path) when a block source is
  // attached, any other by set(). no_memory: over the memory limit or no
  // block (nothing changed); an allocation failure throws std::bad_alloc.
  [[nodiscard]] Kept put(std::string_view key, std::string_view value, ExpireAt expire_at = kNoExpiry) {
    if (proto::eager_fits(key.size(), value.size()) || !large_blocks_) {
      return set(key, value, expire_at) ? Kept::small : Kept::no_memory;
    }
    return put_large(key, value, expire_at);
  }
  // Whether set_large(key, ...) would fit the memory limit now (value_block
  // asks before a block is taken for a value that could not be kept).
  [[nodiscard]] bool large_fits(std::string_view key) const noexcept;
  // A block for a large value of `len` bytes under `key`, sized and laid
  // out as the Store keeps one ([value][key] with the index on; bytes is the
  // value's `len` bytes, for the caller to fill: a READ, a copy), for
  // set_large(key, ...). Null when no block source is attached, the key's
  // entry would not fit the memory limit, or the source has no block.
  [[nodiscard]] std::shared_ptr<LargeValue> value_block(std::string_view key, std::size_t len) noexcept;
  // Never allocates (heterogeneous lookup: the view is hashed directly). An
  // access of the key (recency, frequency), like every set. An expired key
  // is removed and not found.
  [[nodiscard]] Lookup get(std::string_view key);
  // The same without counting an access and without expiring (the server's
  // own bookkeeping: logging a value it just stored, moving recovered
  // values, writing a snapshot): what the map holds, expired or not.
  [[nodiscard]] Lookup peek(std::string_view key) const;
  // A one-sided reader's hint that it read `key` (TOUCH): an access, as a
  // get() is. False when there is no such key (or it expired).
  bool touch_key(std::string_view key);
  // Sets the key's expiry (kNoExpiry: it persists). False: no such key.
  bool expire(std::string_view key, ExpireAt expire_at);
  // The key's remaining time to live in ms (>= 0), -1 when it has no
  // expiry, nullopt when there is no such key.
  [[nodiscard]] std::optional<std::int64_t> ttl(std::string_view key);
  // Removes up to `max` keys whose expiry time has passed (soonest first).
  // Returns how many it removed; == max means more may be due.
  std::size_t expire_due(std::size_t max) noexcept;
  // Keys that carry an expiry now.
  [[nodiscard]] std::size_t expiring() const noexcept { return expiry_heap_.size(); }
  // The clock expiry reads (wall_ms unless a test sets another).
  using Clock = ExpireAt (*)() noexcept;
  void set_clock(Clock clock) noexcept { now_ = clock; }
  [[nodiscard]] Clock clock() const noexcept { return now_; }
  [[nodiscard]] ExpireAt now() const noexcept { return now_(); }
  // Removes the key (DEL). True if it existed. With an index its entry is
  // cleared (readers get NOT FOUND) and its bucket freed. The value goes
  // as on an overwrite: only the Store's reference is dropped, so a large
  // value pinned by a transfer (an RDMA WRITE or a pulled GET) stays whole
  // until its last pin goes.
  bool erase(std::string_view key);
  // Requests are about to run set()/get()/erase() of some keys: start
  // loading the memory they will touch, so their cache misses overlap
  // instead of being paid one after another. Each of a key's loads needs the
  // one before (slot, then node, then value or index entry), so a batch
  // takes three passes, each over all its keys:
  //   probe(key, write)  hashes the key and starts loading its table slot;
  //   probe_node(p)      reads the slot and starts loading the node;
  //   probe_value(p)     reads the node and starts loading its value (a
  //                      read) or its index entry (a write).
  // A lone request has nothing to overlap its lookup with; a lone write
  // with the index on starts loading the key's home index bucket
  // (probe_alone), found from the key alone, whose miss then overlaps the
  // lookup's. No effect on the contents.
  //
  // A Probe is trivial (no initializers): an array of them costs nothing to declare.
  struct Probe {
    const char* key_data;
    std::size_t key_size;
    std::uint64_t hash;
    bool write;
    [[nodiscard]] std::string_view key() const noexcept { return {key_data, key_size}; }
  };
  [[nodiscard]] Probe probe(std::string_view key, bool write) const noexcept;
  void probe_node(const Probe& p) const noexcept;
  void probe_value(const Probe& p) const noexcept;
  void probe_alone(std::string_view key, bool write) const noexcept;

  // Called with each key eviction or sweep() drops, before it goes (the
  // server records a tombstone with its Durability:
  // Durability::record_eviction). Null: none.
  using EvictHook = std::function<void(std::string_view key)>;
  void on_evict(EvictHook hook) { on_evict_ = std::move(hook); }
  // Drops, incrementally, every key `doomed` names (a cluster member's keys
  // of shards it no longer serves: Server::serve_shards). Each call visits
  // up to `slots` slots of the map from `cursor` on and erases the
  // doomed keys there as erase() does, each through the on_evict hook as an
  // evicted key (the server's tombstone); they count as dropped_keys. Returns true when
  // every slot has been visited since `cursor` was reset ({}: a new
  // sweep). A set that grows the table between calls rebuilds it, which
  // moves keys between slots: the next call then sweeps the whole table
  // at once, so none is missed (the caller sees to it that no doomed key is
  // written meanwhile). An erase moves no other key.
  struct SweepCursor {
    std::size_t slot = 0;
    bool started = false;
    std::uint64_t layout = 0;  // the table's (KeyTable::layout) when the walk was at `slot`
  };
  using KeyFilter = std::function<bool(std::string_view key)>;
  bool sweep(SweepCursor& cursor, std::size_t slots, const KeyFilter& doomed);
  [[nodiscard]] std::uint64_t dropped_keys() const noexcept { return dropped_; }
  // Calls fn(key, lookup) for every entry of up to `slots` slots from
  // `cursor` on, walking as sweep() does (a rebuild between calls restarts
  // the walk and finishes it in that call, so a key may be visited twice,
  // none is missed). Expired keys not yet removed are visited too (their
  // expire_at says so). fn must not insert into or erase from the Store.
  // True when every slot has been visited since `cursor` was reset.
  using Visitor = std::function<void(std::string_view key, const Lookup& entry)>;
  bool visit(SweepCursor& cursor, std::size_t slots, const Visitor& fn) const;
  // Large values' blocks come from `large_blocks` (the rendezvous arena)
  // from now on, until detach(). Without it put() keeps every value as set().
  // `block_size` (optional) tells the capacity large_blocks(n) hands out:
  // eviction then drops a key whose block has that size first (a freed block
  // is reused by its own size class only).
  void attach_large_blocks(BlockSource large_blocks, BlockSize block_size = nullptr) {
    large_blocks_ = std::move(large_blocks);
    large_size_ = std::move(block_size);
  }
  // From now on every set publishes into `index`; small values go into
  // blocks from `small_blocks` (of `block_size`, as above), except those
  // that travel in their entry (inlines()). Both are used
  // until detach(). Keys already stored get ask-by-message entries until
  // their next SET.
  void attach_index(ReadableIndex& index, BlockSource small_blocks, BlockSize block_size = nullptr);
  // Stops using the index and both block sources (their owner is going
  // away); values stay.
  void detach() noexcept;
  [[nodiscard]] bool indexed() const noexcept { return index_ != nullptr; }
  // Calls fn(key, lookup) for every entry, in no particular order. fn must
  // not insert into or erase from the Store.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    map_.for_each([&](const Node& n) {
      fn(std::string_view(n.first), Lookup{true, n.second.view(), n.second.large(), n.second.expire_at});
    });
  }

  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }
  // Sum of key and value lengths, for stats (excludes container overhead).
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  // The memory limit every set is checked against; the server's arenas and
  // index charge it too.
  [[nodiscard]] const std::shared_ptr<MemoryBudget>& budget() const noexcept { return budget_; }
  // Its rows of the server's statistics: keys, their bytes, the memory limit and use.
  void append_stats(StatRows& rows) const {
    rows.insert(rows.end(), {{"keys", size(), StatKind::gauge, "keys in the store"},
                             {"data_bytes", bytes(), StatKind::gauge, "key + value bytes in the store"},
                             {"max_memory_bytes", budget_->unlimited() ? 0 : budget_->limit(), StatKind::gauge,
                              "memory limit of the store, bytes (kvd --max-memory; 0: none)"},
                             {"memory_used_bytes", budget_->used(), StatKind::gauge,
                              "bytes charged against the limit: index, arena chunks, keys and unindexed values"},
                             {"evicted_keys", evicted_, StatKind::counter,
                              "keys dropped to make room for a write (kvd --eviction lru|lfu)"},
                             {"expired_keys", expired_, StatKind::counter, "keys removed because their time to live ran out"},
                             {"expiring_keys", expiring(), StatKind::gauge, "keys that carry a time to live now"},
                             {"touched_keys", touched_keys_, StatKind::counter,
                              "one-sided reads the clients reported (TOUCH hints that found their key)"},
                             {"dropped_keys", dropped_, StatKind::counter,
                              "keys a cluster member dropped because their shard moved to another primary"}});
  }

 private:
  class Value {
   public:
    explicit Value(std::string_view v) : data_(std::string()) { proto::copy_to_string(std::get<std::string>(data_), v); }
    // large: set by set_large (served by the rendezvous path); a small value
    // in a block (index attached) is not large.
    Value(LargeRef v, bool large) : data_(std::move(v)), large_(large) {}
    void assign(std::string_view v) {
      if (auto* s = std::get_if<std::string>(&data_)) {
        proto::copy_to_string(*s, v);
      } else {
        std::string copy;
        proto::copy_to_string(copy, v);
        data_ = std::move(copy);
      }
      large_ = false;
    }
    void assign(LargeRef v, bool large) noexcept {
      data_ = std::move(v);
      large_ = large;
    }
    [[nodiscard]] std::string_view view() const noexcept {
      if (const auto* s = std::get_if<std::string>(&data_)) return *s;
      return std::get<LargeRef>(data_)->view();
    }
    [[nodiscard]] LargeRef large() const noexcept {
      if (const auto* l = std::get_if<LargeRef>(&data_); l != nullptr && large_) return *l;
      return {};
    }
    [[nodiscard]] const LargeValue* block() const noexcept {
      if (const auto* l = std::get_if<LargeRef>(&data_)) return l->get();
      return nullptr;
    }
    [[nodiscard]] std::size_t size() const noexcept { return view().size(); }
    // The sampling pool it is in (eviction.cpp): its block's capacity, 0 for a std::string.
    [[nodiscard]] std::size_t pool() const noexcept {
      const LargeValue* b = block();
      return b != nullptr ? b->capacity : 0;
    }
    std::uint32_t bucket = 0xFFFFFFFFu;  // ReadableIndex::kNoBucket
    // Eviction bookkeeping (eviction.cpp), mutable: a get() is an access.
    mutable std::uint64_t touched = 0;      // the Store's access clock at its last access
    mutable std::uint8_t freq = kLfuInit;   // LFU: logarithmic access counter (new keys start here)
    std::uint32_t pool_pos = 0xFFFFFFFFu;   // its place in its pool (kNotPooled: none)
    std::uint32_t heap_pos = 0xFFFFFFFFu;   // its place in expiry_heap_ (kNotPooled: no expiry)
    ExpireAt expire_at = kNoExpiry;

   private:
    std::variant<std::string, LargeRef> data_;
    bool large_ = false;
  };
  // Open addressing with each key's hash in its slot; nodes never move (key_table.hpp).
  using Map = KeyTable<Value>;

  // What one entry charges the budget (value_len: 0 for a value in a block).
  [[nodiscard]] static std::size_t entry_charge(std::size_t key_len, std::size_t value_len) noexcept {
    return kEntryOverhead + key_len + value_len;
  }
  [[nodiscard]] static std::size_t entry_charge(std::string_view key, const Value& v) noexcept {
    return entry_charge(key.size(), v.block() != nullptr ? 0 : v.size());
  }
  // Charges (new > old) or releases (new < old) the difference; false if the
  // charge does not fit.
  [[nodiscard]] bool recharge(std::size_t old_charge, std::size_t new_charge) noexcept;

  // put() of a value too large to travel eagerly: into a value_block().
  [[nodiscard]] Kept put_large(std::string_view key, std::string_view value, ExpireAt expire_at);
  using Node = Map::Node;
  // --- eviction (eviction.cpp) ---
  static constexpr std::uint32_t kNotPooled = 0xFFFFFFFFu;
  // Writes that did not fit retry after dropping a key, at most this often.
  static constexpr unsigned kMaxEvictionsPerWrite = 64;
  // A write to `key` did not fit: drop a key past its expiry if one is due,
  // else one key the policy picks, preferring
  // a value in a block of `capacity` bytes (0: any, strings first), never
  // `key` itself. False when the policy is noeviction or there is nothing to drop.
  bool make_room(std::size_t capacity, std::string_view key) noexcept;
  // After a write to `key` failed once: makes room (make_room(capacity,
  // key)) and runs `attempt` again, at most kMaxEvictionsPerWrite times.
  // The one retry loop of set, set_large and value_block (store.cpp).
  template <class Attempt>
  auto retry_with_room(std::size_t capacity, std::string_view key, Attempt&& attempt) -> decltype(attempt());
  // Removes the entry `it` (erase(), make_room()).
  void erase(Node* it) noexcept;
  // An access of v (get, set): what lru and lfu read; nothing with noeviction.
  void touch(const Value& v) const noexcept {
    if (pooled()) touched(v);
  }
  void touched(const Value& v) const noexcept;
  [[nodiscard]] std::uint64_t random() const noexcept;  // the sampling's and lfu's dice
  void pool_in(Node& n) noexcept;   // n's value changed or is new: into its pool
  void pool_out(Node& n) noexcept;  // before its value changes or it goes
  [[nodiscard]] bool pooled() const noexcept { return eviction_ != Eviction::noeviction; }
  // The set() that does not evict, and the retries that make room first.
  [[nodiscard]] bool set_once(std::string_view key, std::string_view value, ExpireAt expire_at);
  [[nodiscard]] bool set_evicting(std::string_view key, std::string_view value, ExpireAt expire_at);
  [[nodiscard]] bool set_large_once(std::string_view key, LargeRef& value, std::optional<std::uint32_t> value_crc,
                                    ExpireAt expire_at);
  [[nodiscard]] std::shared_ptr<LargeValue> value_block_once(std::string_view key, std::size_t len) const noexcept;
  // The block size class a value of n bytes lands in (0: unknown).
  [[nodiscard]] std::size_t small_class(std::size_t n) const noexcept { return small_size_ ? small_size_(n) : 0; }
  [[nodiscard]] std::size_t large_class(std::size_t n) const noexcept { return large_size_ ? large_size_(n) : 0; }

  // Whether a value of value_len bytes under `key` travels in its index
  // entry (INLINE, proto::kInlineMax): with the index on such a value is
  // kept in ordinary memory as without it, and no block is taken for it
  // (readers read it in the entry; the message GET reads the string).
  [[nodiscard]] static bool inlines(std::string_view key, std::size_t value_len) noexcept {
    return key.size() + value_len <= proto::kInlineMax;
  }
  // Whether a small value of value_len bytes under `key` goes into a block:
  // with the index on, unless it travels in its entry.
  [[nodiscard]] bool wants_block(std::string_view key, std::size_t value_len) const noexcept {
    return index_ != nullptr && !inlines(key, value_len);
  }
  // Index attached: the small value in a block [value][key], or null.
  LargeRef small_block(std::string_view key, std::string_view value) const noexcept;
  // A value was just put in entry `it`: indexed (with one), pooled (with a
  // policy), its expiry set and counted as an access. Every set path ends here.
  void landed(Node* it, bool is_new, std::optional<std::uint32_t> value_crc, ExpireAt expire_at) noexcept;
  // --- expiry (expiry.cpp) ---
  // The live entry of `key`, or null when there is none or it expired (then
  // it is removed). Inline: every lookup by key starts here.
  [[nodiscard]] Node* find_live(std::string_view key) {
    Node* it = map_.find(key);
    if (it != nullptr && it->second.expire_at != kNoExpiry && it->second.expire_at <= now()) {
      expire_entry(it);
      return nullptr;
    }
    return it;
  }
  // Sets n's expiry and its place in the heap (kKeepExpiry: unchanged).
  void set_expiry(Node& n, ExpireAt expire_at) noexcept;
  void heap_out(Node& n) noexcept;  // before it goes
  void heap_up(std::size_t i) noexcept;
  void heap_down(std::size_t i) noexcept;
  void heap_place(std::size_t i) noexcept;  // entry i moved or changed: up or down to where it belongs
  // Removes the expired entry `it`, counted.
  void expire_entry(Node* it) noexcept;
  // Index attached: publish or withdraw the entry of it (a new key claims first).
  void reindex(Node* it, bool is_new, std::optional<std::uint32_t> value_crc = std::nullopt) noexcept;
  // The expiry an index entry carries for `v` (proto::IndexEntry::expire_at: 0 for none).
  [[nodiscard]] static std::uint64_t indexed_expiry(const Value& v) noexcept {
    return v.expire_at > 0 ? static_cast<std::uint64_t>(v.expire_at) : 0;
  }

  std::shared_ptr<MemoryBudget> budget_;  // before map_: still there while the map's blocks go
  Map map_;
  std::size_t bytes_ = 0;
  ReadableIndex* index_ = nullptr;
  BlockSource small_blocks_;
  BlockSource large_blocks_;
  BlockSize small_size_;
  BlockSize large_size_;
  Eviction eviction_;
  mutable std::uint64_t clock_ = 0;  // accesses so far (the recency clock)
  mutable std::uint64_t rng_ = 0x9E3779B97F4A7C15ull;
  // Sampling pools (eviction.cpp): entries by their block capacity (0: std::string values).
  std::unordered_map<std::size_t, std::vector<Node*>> pools_;
  std::uint64_t evicted_ = 0;
  EvictHook on_evict_;
  // Entries with an expiry, a binary min-heap by expire_at (each knows its heap_pos).
  std::vector<Node*> expiry_heap_;
  Clock now_ = &wall_ms;
  std::uint64_t expired_ = 0;
  // sweep() and visit(): where the next step ends (slots past the cursor),
  // restarting the walk after a rebuild.
  [[nodiscard]] std::size_t step_end(SweepCursor& cursor, std::size_t slots) const noexcept;
  std::uint64_t dropped_ = 0;  // by sweep()
  std::uint64_t touched_keys_ = 0;
};

}  // namespace rkv::kv::store
