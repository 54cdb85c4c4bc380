#pragma once
// Arena: the server's registered memory for large values (rendezvous path).
//
// Size classes are powers of two from min_block up. A class grows by whole
// chunks of max(block, chunk_bytes) bytes, each one mmap + ONE registration
// (local_write: RDMA READ target for a SET; remote_read: a client may READ a
// GET's value from it). Blocks are handed out as kv::store::LargeValue behind a
// shared_ptr whose deleter gives the block back, so the Store's reference and
// every transfer's pin count alike, and a block is reused only after the last
// of them is gone. Chunks are never returned to the system while the arena
// lives.
//
// Registration off the critical path: allocate() grows a class only when it
// is empty (counted), and marks a class that it emptied; top_up(), called by
// the server after it posted its replies, grows the marked classes by one
// chunk so the next allocation finds a free block. In steady state no
// operation registers anything.
//
// Memory limit: with a store::MemoryBudget every chunk is charged to it
// before it is mapped (a chunk that does not fit is cut down to what the
// budget has left, in whole blocks; no block fits: allocate() fails, and the
// SET answers no_memory), and given back when the arena's state goes.
//
// Grantable blocks (allocate_grantable, for the planned one-operation SET by
// grant, docs/protocol.md): a block a client may be given remote write to
// through a type-2 memory window. Rxe checks a window's range against its MR,
// not the window (verbs/mw.hpp), so each such block is a registration of
// its own, local_write|remote_read|mw_bind (its own rkey opens no remote
// write), in chunks of their own (max(block, grant_chunk_bytes), mapped and
// charged like any chunk). A block is registered the first time it is handed
// out and keeps its registration: given back, it goes to its class's grant
// free list and the next grant reuses it, so in steady state no grant
// registers anything either (top_up registers the next one of a class that
// allocate_grantable emptied). At most max_grant_blocks such registrations
// exist (each is an MR of the device: rxe allows 524,287 in all); beyond
// them allocate_grantable fails and a SET goes the way it does without one.
//
// The arena's state lives until the last block is gone (blocks may outlive
// the Arena object, e.g. in a Store destroyed after the Server): counted
// without atomics, and each block's record (LargeValue + control block) is
// recycled by the state instead of malloc'd per allocation.
// Reactor thread only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "kv/conn/registrar.hpp"
#include "kv/store/store.hpp"

namespace rkv::kv::server {

using store::LargeValue;
using conn::Registrar;

struct ArenaConfig {
  std::size_t min_block = 4096;
  std::size_t chunk_bytes = std::size_t{16} << 20;  // growth step (a class with bigger blocks: one block)
  std::size_t max_bytes = std::size_t{2} << 30;     // total chunk memory; beyond it allocate() fails
  std::size_t grant_chunk_bytes = std::size_t{1} << 20;  // growth step of grantable blocks
  std::size_t max_grant_blocks = 65536;                  // blocks registered one by one (one MR each)
};

struct ArenaStats {
  std::size_t reserved_bytes = 0;  // registered chunk memory
  std::size_t used_bytes = 0;      // in blocks handed out (block sizes)
  std::size_t blocks_in_use = 0;
  std::size_t chunks = 0;
  std::size_t grant_blocks = 0;  // grantable blocks registered (each one MR), handed out or free
};

// A grantable block: what allocate_grantable hands out.
struct GrantBlock {
  std::shared_ptr<LargeValue> block;  // bytes: n bytes at the block's start; capacity: the block
  // The block's own registration (what a window over it opens): lives while
  // `block` does. Null with `block`.
  const conn::Registration* registration = nullptr;
};

class Arena {
 public:
  // The registrar must outlive every allocate()/top_up() call (not the
  // blocks). budget: charged per chunk (null: only config.max_bytes bounds it).
  Arena(Registrar& registrar, ArenaConfig config, std::shared_ptr<store::MemoryBudget> budget = nullptr);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&&) noexcept = default;
  Arena& operator=(Arena&&) noexcept = default;
  ~Arena() = default;

  // A block for a value of n bytes (LargeValue::bytes has size n), or null
  // when the limit is reached or memory/registration fails (logged). n >= 1.
  [[nodiscard]] std::shared_ptr<LargeValue> allocate(std::size_t n) noexcept;
  // A grantable block for a value of up to n bytes, or an empty GrantBlock
  // when a limit is reached or memory/registration fails (logged). n >= 1.
  [[nodiscard]] GrantBlock allocate_grantable(std::size_t n) noexcept;
  // Grows the classes allocate() emptied (one chunk each) and registers the
  // next grantable block of those allocate_grantable emptied. Never throws.
  void top_up() noexcept;

  [[nodiscard]] ArenaStats stats() const noexcept;
  // ibv_reg_mr calls made for this arena (one per chunk, one per grantable block).
  [[nodiscard]] std::uint64_t registrations() const noexcept { return registrar_->registrations(); }
  // Block size used for a value of n bytes (0 if n is 0).
  [[nodiscard]] std::size_t block_size(std::size_t n) const noexcept;

 public:
  struct State;  // defined in arena.cpp (public for its allocator)

 private:
  // Class index of a value of n bytes, its class created if new; none for
  // n == 0, too large, or no memory.
  [[nodiscard]] std::optional<std::size_t> class_of(std::size_t n) noexcept;
  // Deletes the state, or leaves that to the last block's record (blocks may
  // outlive the Arena).
  struct Orphan {
    void operator()(State* s) const noexcept;
  };
  std::unique_ptr<State, Orphan> state_;
  Registrar* registrar_;
};

}  // namespace rkv::kv::server
