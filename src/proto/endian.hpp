#pragma once
// Little-endian load/store of fixed-width integers at a byte offset.
// The wire format is defined byte by byte; we never overlay structs on buffers
// (alignment, padding and host byte order would all leak into the protocol).

#include <bit>
#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace rkv::proto {

// std::byteswap is C++23; the loop compiles to a bswap instruction.
template <std::unsigned_integral T>
constexpr T byteswap(T v) noexcept {
  T out = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out = static_cast<T>((out << 8) | (v & 0xFFu));
    v = static_cast<T>(v >> 8);
  }
  return out;
}

// Precondition: off + sizeof(T) <= src.size() (callers bounds-check first).
template <std::unsigned_integral T>
[[nodiscard]] T load_le(std::span<const std::byte> src, std::size_t off) noexcept {
  assert(off <= src.size() && sizeof(T) <= src.size() - off);
  T v{};
  std::memcpy(&v, src.data() + off, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  return v;
}

// Precondition: off + sizeof(T) <= dst.size().
template <std::unsigned_integral T>
void store_le(std::span<std::byte> dst, std::size_t off, T v) noexcept {
  assert(off <= dst.size() && sizeof(T) <= dst.size() - off);
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  std::memcpy(dst.data() + off, &v, sizeof(T));
}

}  // namespace rkv::proto
