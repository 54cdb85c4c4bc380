#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum the wire
// formats use where data can be read torn or come back from disk damaged:
// the one-sided index (entries and value blocks) and the durability log.
//
// crc32c(data) is the standard CRC32C (initial ~0, final xor ~0), so
// crc32c("123456789") == 0xE3069283. extend() continues a running CRC over
// more bytes: crc32c(a + b) == crc32c_extend(crc32c(a), b).
// Uses the SSE4.2 crc32 instruction when the CPU has it and it beats the
// table there (checked and timed once at run time: emulated CPUs run it
// slower; RKV_CRC32C=sse4.2|table decides instead), a slicing-by-8 table
// otherwise; both give the same result.
// Pure function, any thread.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace rkv::proto {

[[nodiscard]] std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) noexcept;

[[nodiscard]] inline std::uint32_t crc32c(const void* data, std::size_t n) noexcept {
  return crc32c_extend(0, data, n);
}
[[nodiscard]] inline std::uint32_t crc32c(std::span<const std::byte> data) noexcept {
  return crc32c(data.data(), data.size());
}
[[nodiscard]] inline std::uint32_t crc32c(std::string_view data) noexcept {
  return crc32c(data.data(), data.size());
}

// Which implementation this process uses: "sse4.2" or "table" (decided at
// the first call; RKV_CRC32C=sse4.2|table overrides the timing, see crc32c.cpp).
[[nodiscard]] std::string_view crc32c_implementation() noexcept;

// The portable (table) implementation, exposed so tests can compare the two.
[[nodiscard]] std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data,
                                                   std::size_t n) noexcept;

}  // namespace rkv::proto
