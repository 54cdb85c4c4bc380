#pragma once
// LandingBuffer: client memory a large GET value lands in without a copy:
// either the server RDMA WRITEs it there (the buffer was offered in the GET)
// or the client RDMA READs it there (pull path). Layout of one mapping:
//
//   [ 64-byte header: magic, owner ] [ data: capacity bytes ]
//
// Only `data` is registered (local_write | remote_write, while the client
// lends it to the server); the header is never remotely writable. The header
// lets the C API's kv_release() tell a landing buffer from a small malloc'd
// value (which carries a header with another magic).
//
// Value: what a zero-copy GET hands to its caller: small values (eager, under
// 4 KiB) as a string, large ones as the LandingBuffer they landed in.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kv/conn/registrar.hpp"

namespace rkv::kv::client {

using conn::Registrar;
using conn::Registration;

inline constexpr std::size_t kValueHeader = 64;
inline constexpr std::uint64_t kLandingMagic = 0x524B564C414E4431ull;  // "RKVLAND1"
inline constexpr std::uint64_t kMallocMagic = 0x524B564D414C4331ull;   // "RKVMALC1"

class LandingBuffer {
 public:
  // Maps kValueHeader + capacity bytes and registers the data part with
  // local_write|remote_write. Throws std::bad_alloc / the registrar's error.
  static std::unique_ptr<LandingBuffer> create(Registrar& registrar, std::size_t capacity);

  LandingBuffer(const LandingBuffer&) = delete;
  LandingBuffer& operator=(const LandingBuffer&) = delete;
  LandingBuffer(LandingBuffer&&) = delete;
  LandingBuffer& operator=(LandingBuffer&&) = delete;
  ~LandingBuffer();  // deregisters (if still registered), then unmaps

  [[nodiscard]] std::span<std::byte> data() const noexcept { return {data_, capacity_}; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] bool registered() const noexcept { return reg_ != nullptr; }
  [[nodiscard]] std::uint32_t lkey() const noexcept { return reg_->lkey(); }
  [[nodiscard]] std::uint32_t rkey() const noexcept { return reg_->rkey(); }
  [[nodiscard]] std::uint64_t addr() const noexcept { return reg_->addr(); }

  // The value that landed: its length (<= capacity).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  void set_size(std::size_t n) noexcept { size_ = n; }
  [[nodiscard]] std::span<const std::byte> value() const noexcept { return {data_, size_}; }

  // Ends remote access (the caller owns the bytes now): the registration
  // moves out, to be destroyed where it is cheap (after the next SEND).
  [[nodiscard]] std::unique_ptr<Registration> take_registration() noexcept { return std::move(reg_); }

  // The LandingBuffer whose data() starts at p, or null if p is not one.
  [[nodiscard]] static LandingBuffer* from_data(const void* p) noexcept;

 private:
  LandingBuffer(void* base, std::size_t map_size, std::size_t capacity) noexcept;

  void* base_;
  std::size_t map_size_;
  std::byte* data_;
  std::size_t capacity_;
  std::size_t size_ = 0;
  std::unique_ptr<Registration> reg_;
};

class Value {
 public:
  Value() = default;
  explicit Value(std::string small) noexcept : small_(std::move(small)) {}
  explicit Value(std::unique_ptr<LandingBuffer> large) noexcept : large_(std::move(large)) {}

  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    if (large_) return large_->value();
    return std::as_bytes(std::span<const char>(small_.data(), small_.size()));
  }
  [[nodiscard]] std::string_view view() const noexcept {
    const auto b = bytes();
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes().size(); }
  [[nodiscard]] bool is_large() const noexcept { return large_ != nullptr; }
  // The landing buffer (large values), e.g. to hand its memory to a C caller.
  [[nodiscard]] std::unique_ptr<LandingBuffer> release_large() noexcept { return std::move(large_); }

 private:
  std::string small_;
  std::unique_ptr<LandingBuffer> large_;
};

}  // namespace rkv::kv::client
