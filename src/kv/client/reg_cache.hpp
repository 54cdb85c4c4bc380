#pragma once
// RegCache: the client's pin-down cache (as in MPI and UCX) for the buffers
// whose bytes the server RDMA READs (large SET values).
//
// Entries are keyed by address range: a request whose [addr, addr+len) lies
// inside a cached registration with the same access reuses it (a hit: no
// ibv_reg_mr); a miss registers exactly the request's range. Entries in use
// by an in-flight operation (a Lease) are never evicted; idle entries are
// evicted least recently used first while the cached bytes exceed the budget.
//
// Caveat of every pin-down cache: a registration pins the physical pages it
// saw. If the caller frees/unmaps a cached buffer and later gets new memory at
// the same address, a hit would expose the OLD pages. Callers that cannot
// promise stability drop the range with forget() after the operation (the C
// API does); C++ callers that reuse buffers keep them cached (see client.hpp).
// Reactor thread only.

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <span>

#include "kv/conn/registrar.hpp"

namespace rkv::kv::client {

using conn::Registrar;
using conn::Registration;

struct RegCacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  // each one a registration
  std::uint64_t evictions = 0;
  std::size_t entries = 0;
  std::size_t bytes = 0;  // registered bytes cached (in use or idle)
};

class RegCache {
  struct Entry {
    std::uintptr_t begin = 0;
    std::size_t len = 0;
    verbs::Access access = verbs::Access::none;
    std::unique_ptr<Registration> reg;
    std::uint32_t users = 0;
    bool doomed = false;  // forgotten while in use: dropped at the last release
  };
  using Iter = std::list<Entry>::iterator;

 public:
  // A use of a cached registration; keeps it from eviction until destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : cache_(o.cache_), it_(o.it_) { o.cache_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset() noexcept;
    [[nodiscard]] explicit operator bool() const noexcept { return cache_ != nullptr; }
    [[nodiscard]] std::uint32_t lkey() const noexcept { return it_->reg->lkey(); }
    [[nodiscard]] std::uint32_t rkey() const noexcept { return it_->reg->rkey(); }
    // Remote address of `p` (which lies inside the leased range).
    [[nodiscard]] std::uint64_t addr_of(const std::byte* p) const noexcept {
      return it_->reg->addr() + (reinterpret_cast<std::uintptr_t>(p) - it_->begin);
    }

   private:
    friend class RegCache;
    Lease(RegCache* c, Iter it) noexcept : cache_(c), it_(it) {}
    RegCache* cache_ = nullptr;
    Iter it_{};
  };

  RegCache(Registrar& registrar, std::size_t budget_bytes) noexcept
      : registrar_(&registrar), budget_(budget_bytes) {}
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;
  RegCache(RegCache&&) = delete;
  RegCache& operator=(RegCache&&) = delete;
  ~RegCache() = default;  // every Lease must be gone first

  // A registration covering `bytes` with exactly `access`. Throws what the
  // registrar throws on a miss.
  [[nodiscard]] Lease acquire(std::span<const std::byte> bytes, verbs::Access access);
  // Drops every entry overlapping `bytes` (idle ones now, in-use ones at their release).
  void forget(std::span<const std::byte> bytes) noexcept;
  void clear() noexcept { forget({reinterpret_cast<const std::byte*>(0), ~std::size_t{0} >> 1}); }

  [[nodiscard]] RegCacheStats stats() const noexcept;

 private:
  void release(Iter it) noexcept;
  void erase(Iter it) noexcept;
  void evict() noexcept;

  Registrar* registrar_;
  std::size_t budget_;
  std::list<Entry> lru_;                      // front: most recently used
  std::multimap<std::uintptr_t, Iter> by_begin_;
  RegCacheStats stats_;
};

}  // namespace rkv::kv::client
