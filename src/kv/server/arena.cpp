// Arena: see arena.hpp.
#include "kv/server/arena.hpp"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <bit>
#include <exception>
#include <optional>
#include <string_view>
#include <vector>

namespace rkv::kv::server {

using conn::Registrar;
using conn::Registration;
using store::LargeValue;

// Named, not anonymous: Arena::State (external linkage) holds
// these, which GCC refuses (-Wsubobject-linkage) once the file is part of a
// unity build.
namespace arena_detail {
struct Block {
  std::byte* data;
  std::uint64_t addr;
  std::uint32_t lkey;
  std::uint32_t rkey;
  const Registration* own;  // a grantable block's registration of its own; null in a chunk's
};

struct Mapping {
  void* base = MAP_FAILED;
  std::size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  Mapping(Mapping&& o) noexcept : base(o.base), size(o.size) { o.base = MAP_FAILED; }
  Mapping& operator=(Mapping&&) = delete;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, size);
  }
};

struct Chunk {
  Mapping mem;                        // declared first: unmapped after deregistration
  std::unique_ptr<Registration> reg;  // deregistered first; null in a chunk of grantable blocks
  std::vector<std::unique_ptr<Registration>> block_regs;  // a grantable chunk's, one per block registered
};
}  // namespace arena_detail
using arena_detail::Block;
using arena_detail::Mapping;
using arena_detail::Chunk;

struct Arena::State {
  ArenaConfig config;
  struct Class {
    std::size_t block = 0;
    std::size_t total = 0;  // blocks in all its chunks: the free list's capacity
    std::vector<Block> free;
    bool dry = false;  // allocate() emptied it: top_up() grows it
    // Grantable blocks: registered and free; mapped, not yet registered
    // (with the index of their chunk); all mapped (grant_free's capacity).
    std::vector<Block> grant_free;
    struct Fresh {
      std::byte* data;
      std::size_t chunk;
    };
    std::vector<Fresh> grant_fresh;
    std::size_t grant_total = 0;
    bool grant_dry = false;  // allocate_grantable() emptied grant_free: top_up() registers one
  };
  std::vector<Class> classes;
  std::vector<Chunk> chunks;
  ArenaStats stats;

  std::shared_ptr<store::MemoryBudget> budget;  // null: none
  bool limit_logged = false;  // the last growth failed for the limit (logged once until one succeeds)
  bool grant_limit_logged = false;  // max_grant_blocks reached (logged once until a block registers)

  // Memory of the records allocate() hands out (one per block: the block's
  // LargeValue and shared_ptr control block), recycled here instead of a
  // malloc and a free per SET. Lifetime: the state goes when the Arena is
  // gone and the last record's memory came back (nodes_out == 0).
  static constexpr std::size_t kSpareNodes = 1024;
  std::vector<void*> spare_nodes;
  std::size_t node_size = 0;  // of the one record type allocated through NodeAllocator
  std::size_t nodes_out = 0;
  bool arena_gone = false;

  State() { spare_nodes.reserve(kSpareNodes); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  State(State&&) = delete;
  State& operator=(State&&) = delete;
  ~State() {
    if (budget) budget->release(stats.reserved_bytes);
    for (void* p : spare_nodes) ::operator delete(p);
  }

  void* take_node(std::size_t size) {
    void* p = nullptr;
    if (size == node_size && !spare_nodes.empty()) {
      p = spare_nodes.back();
      spare_nodes.pop_back();
    } else {
      p = ::operator new(size);  // may throw: nothing counted yet
      if (node_size == 0) node_size = size;
    }
    ++nodes_out;
    return p;
  }

  // Last use of the state by a record: deletes it when the Arena is gone and
  // this was the last record out.
  static void give_node(State* s, void* p, std::size_t size) noexcept {
    --s->nodes_out;
    if (s->arena_gone || size != s->node_size || s->spare_nodes.size() >= kSpareNodes) {
      ::operator delete(p);
    } else {
      s->spare_nodes.push_back(p);  // capacity reserved: never allocates
    }
    if (s->arena_gone && s->nodes_out == 0) delete s;
  }

  // Refused for a limit: logged once until the next growth succeeds (a full
  // store refuses every SET; one line says why).
  void limit_reached(std::size_t block, std::string_view which, std::size_t limit) noexcept {
    if (limit_logged) return;
    limit_logged = true;
    spdlog::warn("arena: not growing {}-byte blocks: {} of {} bytes reached; SETs that need them get no_memory",
                 block, which, limit);
  }

  // Adds one chunk of class c (of grantable blocks: mapped, registered one
  // by one later); false (logged) on failure or over the limit.
  bool grow(std::size_t c, Registrar& registrar, bool grantable) noexcept {
    Class& k = classes[c];
    std::size_t size = std::max(k.block, grantable ? config.grant_chunk_bytes : config.chunk_bytes);
    if (stats.reserved_bytes + size > config.max_bytes) {
      limit_reached(k.block, "arena limit", config.max_bytes);
      return false;
    }
    if (budget && size > budget->available()) {
      // What is left, in whole pages and whole blocks.
      const std::size_t unit = std::max<std::size_t>(k.block, 4096);
      size = budget->available() / unit * unit;
      if (size < k.block) {
        limit_reached(k.block, "memory limit (--max-memory)", budget->limit());
        return false;
      }
    }
    if (budget && !budget->try_charge(size)) return false;  // fits: checked above
    struct Uncharge {  // until the chunk is in: a failure gives the charge back
      store::MemoryBudget* b;
      std::size_t n;
      ~Uncharge() {
        if (b != nullptr) b->release(n);
      }
    } uncharge{budget.get(), size};
    try {
      Chunk ch;
      ch.mem.base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (ch.mem.base == MAP_FAILED) throw std::bad_alloc();
      ch.mem.size = size;
      auto* base = static_cast<std::byte*>(ch.mem.base);
      const std::size_t blocks = size / k.block;
      chunks.reserve(chunks.size() + 1);
      if (grantable) {
        ch.block_regs.reserve(blocks);  // register_grant_block never allocates
        k.grant_free.reserve(k.grant_total + blocks);  // every block fits back: the deleter never allocates
        k.grant_fresh.reserve(k.grant_fresh.size() + blocks);
        for (std::size_t i = blocks; i-- > 0;) {  // the lowest address registered first
          k.grant_fresh.push_back({base + i * k.block, chunks.size()});
        }
        k.grant_total += blocks;
      } else {
        ch.reg = registrar.register_memory({base, size}, verbs::Access::local_write | verbs::Access::remote_read);
        k.free.reserve(k.total + blocks);  // every block fits back: the deleter never allocates
        for (std::size_t off = 0; off + k.block <= size; off += k.block) {
          k.free.push_back({base + off, ch.reg->addr() + off, ch.reg->lkey(), ch.reg->rkey(), nullptr});
        }
        k.total += blocks;
      }
      chunks.push_back(std::move(ch));
      stats.reserved_bytes += size;
      ++stats.chunks;
      uncharge.b = nullptr;  // kept: released when the state goes
      limit_logged = false;
      return true;
    } catch (const std::exception& e) {
      spdlog::warn("arena: growing {}-byte blocks by {} bytes failed: {}", k.block, size, e.what());
      return false;
    }
  }

  // Registers one more grantable block of class c (growing it by a chunk
  // when none is left unregistered); false (logged) on failure or over a limit.
  bool register_grant_block(std::size_t c, Registrar& registrar) noexcept {
    Class& k = classes[c];
    if (stats.grant_blocks >= config.max_grant_blocks) {
      if (!grant_limit_logged) {
        grant_limit_logged = true;
        spdlog::warn("arena: not registering more grantable blocks: {} reached (max_grant_blocks); large SETs "
                     "go without a grant",
                     config.max_grant_blocks);
      }
      return false;
    }
    if (k.grant_fresh.empty() && !grow(c, registrar, true)) return false;
    const Class::Fresh f = k.grant_fresh.back();
    try {
      Chunk& ch = chunks[f.chunk];
      ch.block_regs.push_back(registrar.register_memory(
          {f.data, k.block}, verbs::Access::local_write | verbs::Access::remote_read | verbs::Access::mw_bind));
      const Registration* r = ch.block_regs.back().get();
      k.grant_free.push_back({f.data, r->addr(), r->lkey(), r->rkey(), r});  // capacity reserved in grow()
      k.grant_fresh.pop_back();
      ++stats.grant_blocks;
      grant_limit_logged = false;
      return true;
    } catch (const std::exception& e) {
      spdlog::warn("arena: registering a grantable {}-byte block failed: {}", k.block, e.what());
      return false;
    }
  }
};

void Arena::Orphan::operator()(State* s) const noexcept {
  if (s->nodes_out == 0) {
    delete s;
  } else {
    s->arena_gone = true;  // the last record to come back deletes it
  }
}

namespace {
// allocate_shared's allocator: the record's memory from the state's spares.
template <class T>
struct NodeAllocator {
  using value_type = T;
  Arena::State* state;
  explicit NodeAllocator(Arena::State* s) noexcept : state(s) {}
  template <class U>
  NodeAllocator(const NodeAllocator<U>& o) noexcept : state(o.state) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return static_cast<T*>(state->take_node(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { Arena::State::give_node(state, p, n * sizeof(T)); }
  template <class U>
  bool operator==(const NodeAllocator<U>& o) const noexcept { return state == o.state; }
};
}  // namespace

Arena::Arena(Registrar& registrar, ArenaConfig config, std::shared_ptr<store::MemoryBudget> budget)
    : state_(new State()), registrar_(&registrar) {
  config.min_block = std::bit_ceil(std::max<std::size_t>(config.min_block, 64));
  state_->config = config;
  state_->budget = std::move(budget);
}

std::size_t Arena::block_size(std::size_t n) const noexcept {
  if (n == 0) return 0;
  if (n > (std::size_t{1} << 62)) return 0;
  return std::max(state_->config.min_block, std::bit_ceil(n));
}

namespace {
// One record per block handed out: the LargeValue and what gives the block
// back when the last reference goes, in the memory of shared_ptr's control
// block (allocate_shared), which the state recycles (NodeAllocator).
struct Handed {
  LargeValue value;
  Arena::State* state;  // outlives the record: see State::give_node
  std::size_t cls;
  Block block;
  Handed(const LargeValue& v, Arena::State* st, std::size_t c, const Block& b) noexcept
      : value(v), state(st), cls(c), block(b) {}
  Handed(const Handed&) = delete;
  Handed& operator=(const Handed&) = delete;
  ~Handed() {
    auto& k = state->classes[cls];
    (block.own != nullptr ? k.grant_free : k.free).push_back(block);  // capacity reserved in grow(): never allocates
    state->stats.used_bytes -= k.block;
    --state->stats.blocks_in_use;
  }
};

// The last block of `from` (class c's free or grant_free, not empty) as a
// value of n bytes; null (nothing taken) when the record cannot be allocated.
std::shared_ptr<LargeValue> hand_out(Arena::State& s, std::size_t c, std::vector<Block>& from, std::size_t n) noexcept {
  auto& k = s.classes[c];
  const Block b = from.back();
  std::shared_ptr<Handed> h;
  try {
    h = std::allocate_shared<Handed>(NodeAllocator<Handed>(&s),
                                     LargeValue{{b.data, n}, b.addr, b.lkey, b.rkey, k.block}, &s, c, b);
  } catch (const std::bad_alloc&) {
    return nullptr;  // nothing taken yet
  }
  from.pop_back();  // from here on ~Handed gives it back
  s.stats.used_bytes += k.block;
  ++s.stats.blocks_in_use;
  LargeValue* v = &h->value;
  return {std::move(h), v};  // aliasing: the block's LargeValue, owned by its Handed
}
}  // namespace

std::optional<std::size_t> Arena::class_of(std::size_t n) noexcept {
  const std::size_t block = block_size(n);
  if (block == 0) return std::nullopt;
  State& s = *state_;
  const auto c = static_cast<std::size_t>(std::countr_zero(block) - std::countr_zero(s.config.min_block));
  try {
    while (s.classes.size() <= c) {
      s.classes.push_back({s.config.min_block << s.classes.size(), 0, {}, false, {}, {}, 0, false});
    }
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
  return c;
}

std::shared_ptr<LargeValue> Arena::allocate(std::size_t n) noexcept {
  const std::optional<std::size_t> c = class_of(n);
  if (!c) return nullptr;
  State& s = *state_;
  auto& k = s.classes[*c];
  if (k.free.empty() && !s.grow(*c, *registrar_, false)) return nullptr;
  auto v = hand_out(s, *c, k.free, n);
  if (k.free.empty()) k.dry = true;
  return v;
}

GrantBlock Arena::allocate_grantable(std::size_t n) noexcept {
  const std::optional<std::size_t> c = class_of(n);
  if (!c) return {};
  State& s = *state_;
  auto& k = s.classes[*c];
  if (k.grant_free.empty() && !s.register_grant_block(*c, *registrar_)) return {};
  const conn::Registration* r = k.grant_free.back().own;
  auto v = hand_out(s, *c, k.grant_free, n);
  if (k.grant_free.empty()) k.grant_dry = true;
  if (!v) return {};
  return {std::move(v), r};
}

void Arena::top_up() noexcept {
  for (std::size_t c = 0; c < state_->classes.size(); ++c) {
    auto& k = state_->classes[c];
    if (k.dry) {
      k.dry = false;
      if (k.free.empty()) (void)state_->grow(c, *registrar_, false);
    }
    if (k.grant_dry) {
      k.grant_dry = false;
      if (k.grant_free.empty()) (void)state_->register_grant_block(c, *registrar_);
    }
  }
}

ArenaStats Arena::stats() const noexcept { return state_->stats; }

}  // namespace rkv::kv::server
