#pragma once
// BufferPool: `count` fixed-size buffers carved from one allocation, so one
// memory registration covers them all. The pool owns the memory; whoever
// registers it (verbs::MemoryRegion over bytes()) hands the lkey back with
// set_lkey(). Buffers are named by index, which is what a WrId slot carries.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace rkv::kv::conn {

class BufferPool {
 public:
  BufferPool(std::uint32_t count, std::size_t buffer_size);

  BufferPool(BufferPool&&) noexcept = default;
  BufferPool& operator=(BufferPool&&) noexcept = default;
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  ~BufferPool() = default;

  [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
  [[nodiscard]] std::size_t buffer_size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {memory_.get(), size_ * count_}; }
  [[nodiscard]] std::span<std::byte> buffer(std::uint32_t index) const noexcept;

  [[nodiscard]] std::uint32_t lkey() const noexcept { return lkey_; }
  void set_lkey(std::uint32_t lkey) noexcept { lkey_ = lkey; }

  // Free-list use (send buffers): take() returns false when all are in use.
  [[nodiscard]] bool take(std::uint32_t& index) noexcept;
  void give_back(std::uint32_t index) noexcept;
  [[nodiscard]] std::size_t free_count() const noexcept { return free_.size(); }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, Free> memory_;
  std::uint32_t count_;
  std::size_t size_;
  std::uint32_t lkey_ = 0;
  std::vector<std::uint32_t> free_;
};

}  // namespace rkv::kv::conn
