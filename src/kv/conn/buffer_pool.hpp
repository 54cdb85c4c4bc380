#pragma once
// BufferPool: fixed-size message buffers in chunks, each chunk one
// allocation and one memory registration. Buffers are named by index
// (chunk << shift | position), which is what a WrId slot carries; a chunk's
// index range is a power of two, so finding a buffer is a shift and a mask.
//
// Two kinds:
// - fixed (a client's Endpoint): one chunk made at construction; whoever
//   registers it (verbs::MemoryRegion over bytes()) hands the lkey back with
//   set_lkey().
// - elastic (kvd's, shared by every connection): no chunk until take() needs
//   one; each chunk is registered through the Registrar with the pool's
//   access, and released again once all its buffers are back while another
//   chunk's worth stays free elsewhere (so a busy server does not register
//   and deregister at every connect).
//
// Thread: the owner's (the reactor's); not thread-safe.

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "kv/conn/fifo_vector.hpp"
#include "kv/conn/registrar.hpp"

namespace rkv::kv::conn {

class BufferPool {
 public:
  // Fixed: `count` buffers, unregistered. Throws std::bad_alloc.
  BufferPool(std::uint32_t count, std::size_t buffer_size);
  // Elastic: up to `max_chunks` chunks of `chunk_count` buffers (a power of
  // two), registered with `access` through `registrar` (which outlives the pool).
  BufferPool(std::uint32_t chunk_count, std::size_t buffer_size, Registrar& registrar, verbs::Access access,
             std::uint32_t max_chunks);

  BufferPool(BufferPool&&) noexcept = default;
  BufferPool& operator=(BufferPool&&) noexcept = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() = default;

  // The index space: every index below it names a buffer of a chunk made so far.
  [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t buffer_size() const noexcept { return size_; }
  // A fixed pool's memory (its one chunk), to register.
  [[nodiscard]] std::span<std::byte> bytes() const noexcept;
  [[nodiscard]] std::span<std::byte> buffer(std::uint32_t index) const noexcept {
    assert(index < count_ && chunks_[index >> shift_].memory);
    return {chunks_[index >> shift_].memory.get() + std::size_t{index & mask_} * size_, size_};
  }

  [[nodiscard]] std::uint32_t lkey(std::uint32_t index) const noexcept { return chunks_[index >> shift_].lkey; }
  void set_lkey(std::uint32_t lkey) noexcept;  // a fixed pool's

  // Free-list use: take() returns false when every buffer is in use and no
  // chunk can be added (the limit, or the allocation or registration failed).
  [[nodiscard]] bool take(std::uint32_t& index) noexcept;
  void give_back(std::uint32_t index) noexcept;
  [[nodiscard]] std::size_t free_count() const noexcept { return free_.size(); }
  // Whether take() would succeed without adding a chunk, or may add one.
  [[nodiscard]] bool may_take() const noexcept { return !free_.empty() || live_chunks_ < max_chunks_; }
  // Bytes of the chunks that exist now (registered, for an elastic pool).
  [[nodiscard]] std::size_t chunk_bytes() const noexcept { return live_chunks_ * chunk_count_ * size_; }
  [[nodiscard]] std::size_t in_use() const noexcept { return live_chunks_ * chunk_count_ - free_.size(); }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  struct Chunk {
    std::unique_ptr<std::byte, Free> memory;  // null: released (its indices are unused)
    std::unique_ptr<Registration> registration;
    std::uint32_t lkey = 0;
    std::uint32_t free = 0;  // its buffers on the free list
  };
  static std::unique_ptr<std::byte, Free> allocate(std::size_t bytes);
  bool add_chunk() noexcept;
  void release_chunk(std::uint32_t chunk) noexcept;

  std::uint32_t chunk_count_;  // buffers per chunk
  std::uint32_t shift_ = 0;     // index >> shift_: its chunk (1 << shift_ >= chunk_count_)
  std::uint32_t mask_ = 0;      // index & mask_: its place in the chunk
  std::uint32_t count_ = 0;     // the index space
  std::size_t size_;
  Registrar* registrar_ = nullptr;  // null: fixed
  verbs::Access access_ = verbs::Access::none;
  std::uint32_t max_chunks_ = 1;
  std::uint32_t live_chunks_ = 0;
  std::vector<Chunk> chunks_;
  std::vector<std::uint32_t> free_;
};

// Buffer indices in the order they were posted (receives on one QP, SENDs in
// flight): completions come back in that order, so taking the oldest is the
// usual removal and costs no shifting; any other is found and erased.
using PostedIds = FifoVector<std::uint32_t>;

}  // namespace rkv::kv::conn
