// Store, eviction part (kvd --eviction lru|lfu; docs/architecture.md "Memory
// limit"): which key goes when a write does not fit the memory limit.
//
// Approximated as Redis does (sampling), per block size as memcached does
// (slab classes): a freed arena block is reused only by its own size class,
// and arena chunks are never given back to the budget, so dropping a key
// helps a write only if it frees memory of the kind the write lacks. Every
// key is in one sampling pool, by its value's block capacity (0: a value
// kept as a std::string, charged to the budget directly). To make room for a
// write that needs a block of capacity C, kSamples keys are drawn from pool C
// (when it is empty: from the strings' pool, whose values give budget back,
// else from the largest pool) and the coldest goes through erase(), as a DEL
// would: its index entry is cleared first, so one-sided readers find NOT
// FOUND or a changed entry, never another key's bytes (they check the key
// and CRC of what they READ, docs/protocol.md). A value pinned by a transfer
// stays whole until its last pin goes; its block is reused only then.
//
// Coldness: lru, the Store's access clock at the key's last access (every
// get() and set is an access); lfu, Redis' logarithmic counter (new keys
// start at kLfuInit so they are not the first to go; an access increments it
// with probability 1 / ((counter - kLfuInit) * kLfuLogFactor + 1)), decayed
// by one per kLfuDecay accesses of the whole Store since the key's last
// access. Both cost a few instructions per access and no system call.
//
// Thread: the reactor's (as the Store).
#include <algorithm>
#include <limits>

#include "kv/store/store.hpp"

namespace rkv::kv::store {

namespace {
constexpr unsigned kSamples = 5;                 // Redis' maxmemory-samples default
static_assert(Store::kLfuInit == 5, "Redis' LFU_INIT_VAL");
constexpr unsigned kLfuLogFactor = 10;           // Redis' lfu-log-factor default
constexpr std::uint64_t kLfuDecay = 1u << 16;    // accesses per decay step
}  // namespace

std::optional<Eviction> eviction_from(std::string_view name) noexcept {
  for (const Eviction e : {Eviction::noeviction, Eviction::lru, Eviction::lfu}) {
    if (name == to_string(e)) return e;
  }
  return std::nullopt;
}

namespace {
// v's LFU counter as of access `now`: one less per kLfuDecay accesses of the
// whole Store since v's last one (a new key, never touched, is not decayed).
unsigned decayed_freq(std::uint8_t freq, std::uint64_t touched, std::uint64_t now) noexcept {
  const std::uint64_t idle = touched == 0 ? 0 : (now - touched) / kLfuDecay;
  return idle >= freq ? 0u : static_cast<unsigned>(freq - idle);
}
}  // namespace

std::uint64_t Store::random() const noexcept {  // xorshift64: cheap, and the same run every time
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return rng_;
}

void Store::touched(const Value& v) const noexcept {
  if (eviction_ == Eviction::lfu) {
    v.freq = static_cast<std::uint8_t>(decayed_freq(v.freq, v.touched, clock_));
    if (v.freq < std::numeric_limits<std::uint8_t>::max()) {
      const unsigned base = v.freq > kLfuInit ? v.freq - kLfuInit : 0u;
      if (random() % (base * kLfuLogFactor + 1) == 0) ++v.freq;
    }
  }
  v.touched = ++clock_;
}

void Store::pool_in(Node& n) noexcept {
  try {
    auto& pool = pools_[n.second.pool()];
    n.second.pool_pos = static_cast<std::uint32_t>(pool.size());
    pool.push_back(&n);
  } catch (...) {
    n.second.pool_pos = kNotPooled;  // out of memory: this key is never sampled (never evicted)
  }
}

void Store::pool_out(Node& n) noexcept {
  if (n.second.pool_pos == kNotPooled) return;
  const auto it = pools_.find(n.second.pool());
  if (it == pools_.end()) return;
  auto& pool = it->second;
  Node* last = pool.back();
  pool[n.second.pool_pos] = last;
  last->second.pool_pos = n.second.pool_pos;
  pool.pop_back();
  n.second.pool_pos = kNotPooled;
}

bool Store::make_room(std::size_t capacity, std::string_view key) noexcept {
  if (expire_due(1) == 1) return true;  // a key past its expiry goes first, under any policy
  if (eviction_ == Eviction::noeviction) return false;
  const std::vector<Node*>* pool = nullptr;
  if (const auto it = pools_.find(capacity); it != pools_.end() && !it->second.empty()) {
    pool = &it->second;
  } else if (const auto strings = pools_.find(0); strings != pools_.end() && !strings->second.empty()) {
    pool = &strings->second;
  } else {
    for (const auto& [cap, nodes] : pools_) {
      if (pool == nullptr || nodes.size() > pool->size()) pool = &nodes;
    }
  }
  if (pool == nullptr || pool->empty()) return false;
  const std::uint64_t now = clock_;
  auto colder = [this, now](const Node* a, const Node* b) {  // a is colder than b
    if (eviction_ == Eviction::lfu) {
      const unsigned fa = decayed_freq(a->second.freq, a->second.touched, now);
      const unsigned fb = decayed_freq(b->second.freq, b->second.touched, now);
      if (fa != fb) return fa < fb;
    }
    return a->second.touched < b->second.touched;
  };
  Node* victim = nullptr;
  for (unsigned i = 0; i < kSamples; ++i) {
    Node* n = (*pool)[random() % pool->size()];
    if (n->first == key) continue;  // never the key being written
    if (victim == nullptr || colder(n, victim)) victim = n;
  }
  if (victim == nullptr) return false;  // only the key itself was drawn (a pool of one)
  if (on_evict_) on_evict_(victim->first);
  erase(victim);
  ++evicted_;
  return true;
}

}  // namespace rkv::kv::store
