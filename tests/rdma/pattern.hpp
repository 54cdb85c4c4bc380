#pragma once
// Test values: a xorshift64 byte stream from a seed (rdv_e2e, onesided_e2e,
// cache_e2e). Written eight bytes per step through a raw pointer: the test
// programs are built at -O0, where a byte-wise loop through std::string was
// about a tenth of cache_e2e's race test's CPU in the guest.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rkv::test {

// Fills out[0, n) with the stream of `seed`.
inline void fill_pattern(char* out, std::size_t n, std::uint64_t seed) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
  for (std::size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out + i, &x, std::min<std::size_t>(8, n - i));
  }
}

// n bytes of the stream of `seed`.
inline std::string pattern(std::size_t n, std::uint64_t seed) {
  std::string s(n, '\0');
  fill_pattern(s.data(), n, seed);
  return s;
}

}  // namespace rkv::test
