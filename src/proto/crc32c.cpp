#include "proto/crc32c.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace rkv::proto {
namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;

using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() noexcept {
  Tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s) {
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

// Both implementations work on the raw (pre-inverted) register.
std::uint32_t raw_portable(std::uint32_t c, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, 8);  // little-endian hosts only (x86_64, aarch64 LE)
    w ^= c;
    c = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
        kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFFu];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t raw_sse42(std::uint32_t c, const unsigned char* p,
                                                           std::size_t n) noexcept {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c64);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// The instruction when the CPU has it and it is the faster of the two here:
// timed once per process over 16 KiB (best of 3 each, ~10 us natively).
// Under emulation (a QEMU TCG guest, where the RDMA tests and benchmarks
// run) the emulated crc32 instruction is ~4x slower than the table (1 MiB:
// 7.1 ms against 1.7 ms, docs/performance.md), while on real x86-64 it is
// several times faster.
volatile std::uint32_t calibration_sink = 0;

bool sse42_is_faster() noexcept {
  static unsigned char buf[16 << 10];
  for (std::size_t i = 0; i < sizeof buf; ++i) buf[i] = static_cast<unsigned char>(i * 131u);
  using Clock = std::chrono::steady_clock;
  auto best = [](auto&& fn) {
    Clock::duration b = Clock::duration::max();
    for (int r = 0; r < 3; ++r) {
      const auto t0 = Clock::now();
      calibration_sink = fn();  // volatile: the computation is kept
      b = std::min(b, Clock::now() - t0);
    }
    return b;
  };
  const auto hw = best([] { return raw_sse42(~0u, buf, sizeof buf); });
  const auto table = best([] { return raw_portable(~0u, buf, sizeof buf); });
  return hw <= table;
}

// RKV_CRC32C=sse4.2 or =table overrides the timing (for measuring one path on
// purpose, e.g. bench/cpu counting under valgrind, whose emulated crc32 is
// slow, the instructions of the path the machine picks natively); any other
// value is ignored. sse4.2 still needs the CPU to have it.
bool have_sse42() noexcept {
  static const bool yes = [] {
    if (!__builtin_cpu_supports("sse4.2")) return false;
    if (const char* e = std::getenv("RKV_CRC32C")) {
      if (std::strcmp(e, "sse4.2") == 0) return true;
      if (std::strcmp(e, "table") == 0) return false;
    }
    return sse42_is_faster();
  }();
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n) noexcept {
  return ~raw_portable(~crc, static_cast<const unsigned char*>(data), n);
}

std::string_view crc32c_implementation() noexcept {
#if defined(__x86_64__)
  if (have_sse42()) return "sse4.2";
#endif
  return "table";
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) noexcept {
#if defined(__x86_64__)
  if (have_sse42()) return ~raw_sse42(~crc, static_cast<const unsigned char*>(data), n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace rkv::proto
