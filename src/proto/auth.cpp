#include "proto/auth.hpp"

#include <bit>
#include <cstring>

#include "proto/endian.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

namespace {

constexpr std::array<std::uint32_t, 64> kK{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

void compress(std::array<std::uint32_t, 8>& h, const std::uint8_t* block) noexcept {
  std::array<std::uint32_t, 64> w{};
  for (int i = 0; i < 16; ++i) {
    w[i] = (std::uint32_t{block[4 * i]} << 24) | (std::uint32_t{block[4 * i + 1]} << 16) |
           (std::uint32_t{block[4 * i + 2]} << 8) | std::uint32_t{block[4 * i + 3]};
  }
  for (int i = 16; i < 64; ++i) {
    const std::uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const std::uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, hh] = h;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t s1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const std::uint32_t ch = (e & f) ^ (~e & g);
    const std::uint32_t t1 = hh + s1 + ch + kK[i] + w[i];
    const std::uint32_t s0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const std::uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t t2 = s0 + maj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a; h[1] += b; h[2] += c; h[3] += d;
  h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

constexpr std::string_view kAuthContext{"rkv-auth-v1\0", 12};

}  // namespace

namespace {
// Streaming SHA-256: update() any number of times, then finish().
class Sha256 {
 public:
  void update(std::span<const std::byte> data) noexcept {
    for (const std::byte b : data) {
      buf_[fill_++] = static_cast<std::uint8_t>(b);
      if (fill_ == 64) {
        compress(h_, buf_.data());
        fill_ = 0;
      }
    }
    bits_ += static_cast<std::uint64_t>(data.size()) * 8;
  }
  std::array<std::byte, 32> finish() noexcept {
    const std::uint64_t bits = bits_;
    const std::array<std::byte, 1> one{std::byte{0x80}};
    update(one);
    const std::array<std::byte, 1> zero{};
    while (fill_ != 56) update(zero);
    std::array<std::byte, 8> len{};
    for (int i = 0; i < 8; ++i) len[7 - i] = static_cast<std::byte>(bits >> (8 * i));
    update(len);
    std::array<std::byte, 32> out{};
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::byte>(h_[i] >> (24 - 8 * j));
    }
    return out;
  }

 private:
  std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<std::uint8_t, 64> buf_{};
  std::size_t fill_ = 0;
  std::uint64_t bits_ = 0;
};
}  // namespace

std::array<std::byte, 32> sha256(std::span<const std::byte> data) noexcept {
  Sha256 s;
  s.update(data);
  return s.finish();
}

AuthDigest auth_digest(std::string_view token) noexcept {
  Sha256 s;
  s.update(std::as_bytes(std::span(kAuthContext.data(), kAuthContext.size())));
  s.update(std::as_bytes(std::span(token.data(), token.size())));
  const auto full = s.finish();
  AuthDigest d{};
  std::memcpy(d.data(), full.data(), d.size());
  return d;
}

bool auth_present(const AuthDigest& d) noexcept {
  std::uint8_t any = 0;
  for (const std::byte b : d) any |= static_cast<std::uint8_t>(b);
  return any != 0;
}

bool auth_equal(const AuthDigest& a, const AuthDigest& b) noexcept {
  // Every byte is looked at, whatever differs; the compiler may not end early
  // (volatile accumulator).
  volatile std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = static_cast<std::uint8_t>(diff | (static_cast<std::uint8_t>(a[i]) ^ static_cast<std::uint8_t>(b[i])));
  }
  return diff == 0;
}

std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::auth_required: return "the server requires an authentication token and none was sent";
    case RejectReason::auth_failed: return "the server refused the authentication token";
  }
  return "unknown reject reason";
}

std::array<std::byte, kRejectSize> encode_reject(RejectReason r) noexcept {
  std::array<std::byte, kRejectSize> out{};
  const std::span<std::byte> o{out};
  store_le(o, 0, kMagic);
  store_le(o, 2, kVersion);
  store_le(o, 3, static_cast<std::uint8_t>(r));
  return out;
}

std::optional<RejectReason> decode_reject(std::span<const std::byte> data) noexcept {
  if (data.size() < kRejectSize) return std::nullopt;
  if (load_le<std::uint16_t>(data, 0) != kMagic || load_le<std::uint8_t>(data, 2) != kVersion) return std::nullopt;
  const auto r = static_cast<RejectReason>(load_le<std::uint8_t>(data, 3));
  switch (r) {
    case RejectReason::auth_required:
    case RejectReason::auth_failed: return r;
  }
  return std::nullopt;
}

}  // namespace rkv::proto
