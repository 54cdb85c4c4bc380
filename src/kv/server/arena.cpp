// Arena: see arena.hpp.
#include "kv/server/arena.hpp"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <bit>
#include <exception>
#include <string_view>
#include <vector>

namespace rkv::kv::server {

using conn::Registrar;
using conn::Registration;
using store::LargeValue;

namespace {
struct Block {
  std::byte* data;
  std::uint64_t addr;
  std::uint32_t lkey;
  std::uint32_t rkey;
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
  std::unique_ptr<Registration> reg;  // deregistered first
};
}  // namespace

struct Arena::State {
  ArenaConfig config;
  struct Class {
    std::size_t block = 0;
    std::size_t total = 0;  // blocks in all its chunks: the free list's capacity
    std::vector<Block> free;
    bool dry = false;  // allocate() emptied it: top_up() grows it
  };
  std::vector<Class> classes;
  std::vector<Chunk> chunks;
  ArenaStats stats;

  std::shared_ptr<store::MemoryBudget> budget;  // null: none
  bool limit_logged = false;  // the last growth failed for the limit (logged once until one succeeds)

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  State(State&&) = delete;
  State& operator=(State&&) = delete;
  ~State() {
    if (budget) budget->release(stats.reserved_bytes);
  }

  // Refused for a limit: logged once until the next growth succeeds (a full
  // store refuses every SET; one line says why).
  void limit_reached(std::size_t block, std::string_view which, std::size_t limit) noexcept {
    if (limit_logged) return;
    limit_logged = true;
    spdlog::warn("arena: not growing {}-byte blocks: {} of {} bytes reached; SETs that need them get no_memory",
                 block, which, limit);
  }

  // Adds one chunk of class c; false (logged) on failure or over the limit.
  bool grow(std::size_t c, Registrar& registrar) noexcept {
    Class& k = classes[c];
    std::size_t size = std::max(k.block, config.chunk_bytes);
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
      ch.reg = registrar.register_memory({base, size}, verbs::Access::local_write | verbs::Access::remote_read);
      k.free.reserve(k.total + size / k.block);  // every block fits back: the deleter never allocates
      chunks.reserve(chunks.size() + 1);
      for (std::size_t off = 0; off + k.block <= size; off += k.block) {
        k.free.push_back({base + off, ch.reg->addr() + off, ch.reg->lkey(), ch.reg->rkey()});
      }
      chunks.push_back(std::move(ch));
      k.total += size / k.block;
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
};

Arena::Arena(Registrar& registrar, ArenaConfig config, std::shared_ptr<store::MemoryBudget> budget)
    : state_(std::make_shared<State>()), registrar_(&registrar) {
  config.min_block = std::bit_ceil(std::max<std::size_t>(config.min_block, 64));
  state_->config = config;
  state_->budget = std::move(budget);
}

std::size_t Arena::block_size(std::size_t n) const noexcept {
  if (n == 0) return 0;
  if (n > (std::size_t{1} << 62)) return 0;
  return std::max(state_->config.min_block, std::bit_ceil(n));
}

std::shared_ptr<LargeValue> Arena::allocate(std::size_t n) noexcept {
  const std::size_t block = block_size(n);
  if (block == 0) return nullptr;
  State& s = *state_;
  const auto c = static_cast<std::size_t>(std::countr_zero(block) - std::countr_zero(s.config.min_block));
  try {
    while (s.classes.size() <= c) {
      s.classes.push_back({s.config.min_block << s.classes.size(), 0, {}, false});
    }
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  auto& k = s.classes[c];
  if (k.free.empty() && !s.grow(c, *registrar_)) return nullptr;
  // One allocation per block handed out: the LargeValue and what gives the
  // block back when the last reference goes (shared_ptr's control block
  // included: make_shared), instead of a LargeValue plus a control block
  // holding a deleter.
  struct Handed {
    LargeValue value;
    std::shared_ptr<State> state;
    std::size_t cls;
    Block block;
    Handed(const LargeValue& v, std::shared_ptr<State> st, std::size_t c, const Block& b) noexcept
        : value(v), state(std::move(st)), cls(c), block(b) {}
    Handed(const Handed&) = delete;
    Handed& operator=(const Handed&) = delete;
    ~Handed() {
      auto& k = state->classes[cls];
      k.free.push_back(block);  // capacity reserved in grow(): never allocates
      state->stats.used_bytes -= k.block;
      --state->stats.blocks_in_use;
    }
  };
  const Block b = k.free.back();
  std::shared_ptr<Handed> h;
  try {
    h = std::make_shared<Handed>(LargeValue{{b.data, n}, b.addr, b.lkey, b.rkey, k.block}, state_, c, b);
  } catch (const std::bad_alloc&) {
    return nullptr;  // nothing taken yet
  }
  k.free.pop_back();  // from here on ~Handed gives it back
  s.stats.used_bytes += k.block;
  ++s.stats.blocks_in_use;
  if (k.free.empty()) k.dry = true;
  LargeValue* v = &h->value;
  return {std::move(h), v};  // aliasing: the block's LargeValue, owned by its Handed
}

void Arena::top_up() noexcept {
  for (std::size_t c = 0; c < state_->classes.size(); ++c) {
    auto& k = state_->classes[c];
    if (!k.dry) continue;
    k.dry = false;
    if (k.free.empty()) (void)state_->grow(c, *registrar_);
  }
}

ArenaStats Arena::stats() const noexcept { return state_->stats; }

}  // namespace rkv::kv::server
