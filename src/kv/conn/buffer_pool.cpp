#include "kv/conn/buffer_pool.hpp"

#include <cassert>
#include <cstdlib>
#include <new>

namespace rkv::kv::conn {

namespace {
constexpr std::size_t kAlign = 64;  // cache line; the HCA does not care, the CPU does
}

void BufferPool::Free::operator()(std::byte* p) const noexcept { std::free(p); }

BufferPool::BufferPool(std::uint32_t count, std::size_t buffer_size) : count_(count), size_(buffer_size) {
  if (count == 0 || buffer_size == 0 || buffer_size % kAlign != 0) throw std::bad_alloc();
  void* p = std::aligned_alloc(kAlign, buffer_size * count);
  if (p == nullptr) throw std::bad_alloc();
  memory_.reset(static_cast<std::byte*>(p));
  free_.reserve(count);
  for (std::uint32_t i = count; i > 0; --i) free_.push_back(i - 1);  // take() hands out 0 first
}

std::span<std::byte> BufferPool::buffer(std::uint32_t index) const noexcept {
  assert(index < count_);
  return {memory_.get() + std::size_t{index} * size_, size_};
}

bool BufferPool::take(std::uint32_t& index) noexcept {
  if (free_.empty()) return false;
  index = free_.back();
  free_.pop_back();
  return true;
}

void BufferPool::give_back(std::uint32_t index) noexcept {
  assert(index < count_ && free_.size() < count_);
  free_.push_back(index);
}

}  // namespace rkv::kv::conn
