#include "kv/conn/buffer_pool.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdlib>
#include <new>

namespace rkv::kv::conn {

namespace {
constexpr std::size_t kAlign = 64;  // cache line; the HCA does not care, the CPU does
}

void BufferPool::Free::operator()(std::byte* p) const noexcept { std::free(p); }

std::unique_ptr<std::byte, BufferPool::Free> BufferPool::allocate(std::size_t bytes) {
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return std::unique_ptr<std::byte, Free>(static_cast<std::byte*>(p));
}

BufferPool::BufferPool(std::uint32_t count, std::size_t buffer_size)
    : chunk_count_(count), count_(count), size_(buffer_size) {
  if (count == 0 || buffer_size == 0 || buffer_size % kAlign != 0) throw std::bad_alloc();
  shift_ = static_cast<std::uint32_t>(std::bit_width(count - 1));  // every index is in chunk 0
  mask_ = (std::uint32_t{1} << shift_) - 1;
  chunks_.push_back({allocate(buffer_size * count), nullptr, 0, count});
  live_chunks_ = 1;
  free_.reserve(count);
  for (std::uint32_t i = count; i > 0; --i) free_.push_back(i - 1);  // take() hands out 0 first
}

BufferPool::BufferPool(std::uint32_t chunk_count, std::size_t buffer_size, Registrar& registrar, verbs::Access access,
                       std::uint32_t max_chunks)
    : chunk_count_(chunk_count), size_(buffer_size), registrar_(&registrar), access_(access), max_chunks_(max_chunks) {
  if (!std::has_single_bit(chunk_count) || buffer_size == 0 || buffer_size % kAlign != 0 || max_chunks == 0) {
    throw std::bad_alloc();
  }
  shift_ = static_cast<std::uint32_t>(std::countr_zero(chunk_count));
  mask_ = chunk_count - 1;
}

std::span<std::byte> BufferPool::bytes() const noexcept {
  assert(registrar_ == nullptr);
  return {chunks_.front().memory.get(), size_ * chunk_count_};
}

void BufferPool::set_lkey(std::uint32_t lkey) noexcept {
  assert(registrar_ == nullptr);
  chunks_.front().lkey = lkey;
}

bool BufferPool::add_chunk() noexcept {
  if (registrar_ == nullptr || live_chunks_ >= max_chunks_) return false;
  // A released chunk's indices first, so the index space stays as small as the peak.
  const auto at = static_cast<std::uint32_t>(
      std::find_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return !c.memory; }) - chunks_.begin());
  try {
    free_.reserve(std::size_t{live_chunks_ + 1} * chunk_count_);
    Chunk c;
    c.memory = allocate(size_ * chunk_count_);
    c.registration = registrar_->register_memory({c.memory.get(), size_ * chunk_count_}, access_);
    c.lkey = c.registration->lkey();
    c.free = chunk_count_;
    if (at == chunks_.size()) {
      chunks_.push_back(std::move(c));
      count_ += chunk_count_;
    } else {
      chunks_[at] = std::move(c);
    }
  } catch (const std::exception&) {
    return false;  // the caller sees take() fail and says what it could not do
  }
  ++live_chunks_;
  for (std::uint32_t i = chunk_count_; i > 0; --i) free_.push_back((at << shift_) + i - 1);
  return true;
}

void BufferPool::release_chunk(std::uint32_t chunk) noexcept {
  std::erase_if(free_, [&](std::uint32_t i) { return i >> shift_ == chunk; });
  chunks_[chunk] = Chunk{};  // deregistered, then freed
  --live_chunks_;
}

bool BufferPool::take(std::uint32_t& index) noexcept {
  if (free_.empty() && !add_chunk()) return false;
  index = free_.back();
  free_.pop_back();
  --chunks_[index >> shift_].free;
  return true;
}

void BufferPool::give_back(std::uint32_t index) noexcept {
  assert(index < count() && free_.size() < std::size_t{live_chunks_} * chunk_count_);
  free_.push_back(index);  // reserved: every live chunk's buffers fit
  const std::uint32_t chunk = index >> shift_;
  if (++chunks_[chunk].free == chunk_count_ && registrar_ != nullptr && free_.size() >= 2 * std::size_t{chunk_count_}) {
    release_chunk(chunk);
  }
}

}  // namespace rkv::kv::conn
