// CRC32C: known vectors, extend() == one pass, SSE4.2 == table, every length and alignment.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "proto/crc32c.hpp"

using rkv::proto::crc32c;
using rkv::proto::crc32c_extend;
using rkv::proto::crc32c_extend_portable;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(std::string_view{}), 0u);
  EXPECT_EQ(crc32c(std::string_view{"123456789"}), 0xE3069283u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF.
  const std::string zeros(32, '\0');
  const std::string ones(32, '\xFF');
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
}

TEST(Crc32c, ExtendEqualsOnePassAndPortableEqualsFast) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (std::size_t off = 0; off < 9; ++off) {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4096u}) {
      const auto* p = buf.data() + off;
      const std::uint32_t whole = crc32c(p, n);
      EXPECT_EQ(whole, crc32c_extend_portable(0, p, n)) << off << " " << n;
      for (std::size_t cut : {std::size_t{0}, n / 3, n}) {
        EXPECT_EQ(crc32c_extend(crc32c(p, cut), p + cut, n - cut), whole) << off << " " << n;
      }
    }
  }
}

TEST(Crc32c, DetectsOneFlippedBit) {
  std::string s(1000, 'a');
  const auto before = crc32c(s);
  s[500] ^= 0x10;
  EXPECT_NE(crc32c(s), before);
}
