#pragma once
// Helpers shared by the tests of src/proto (test_proto*.cpp): encode and
// decode whole buffers, forge and patch raw headers, and the invariants
// every decoded message must satisfy.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "proto/auth.hpp"
#include "proto/connect_params.hpp"
#include "proto/copy.hpp"
#include "proto/call_ops.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"
#include "proto/endian.hpp"
#include "proto/index_format.hpp"
#include "proto/validate.hpp"
#include "proto/wire.hpp"

namespace rkv::proto::test {

using Bytes = std::vector<std::byte>;

inline Bytes to_bytes(std::string_view s) {
  const auto b = as_bytes(s);
  return {b.begin(), b.end()};
}

inline std::string text_of(std::span<const std::byte> b) { return std::string(as_string_view(b)); }

inline Bytes encode_all(const std::vector<MessageSpec>& specs, const Limits& limits = {}) {
  std::size_t total = 0;
  for (const auto& s : specs) total += encoded_size(s);
  Bytes buf(total);
  Encoder enc(buf, 0, limits);
  for (const auto& s : specs) {
    const EncodeStatus st = enc.append(s);
    EXPECT_EQ(st, EncodeStatus::ok) << to_string(st);
  }
  EXPECT_EQ(enc.size(), total);
  return buf;
}

inline Bytes encode_one(const MessageSpec& spec) { return encode_all({spec}); }

struct Walk {
  std::vector<MessageView> messages;
  DecodeResult last;  // EndOfBuffer or DecodeError
};

inline Walk decode_all(std::span<const std::byte> buf, const Limits& limits = {}) {
  Walk w;
  Decoder dec(buf, limits);
  // Every message is at least a header long, so this bounds the loop.
  for (std::size_t i = 0; i <= buf.size() / kHeaderSize + 1; ++i) {
    DecodeResult r = dec.next();
    if (auto* m = std::get_if<MessageView>(&r)) {
      w.messages.push_back(*m);
      continue;
    }
    w.last = r;
    return w;
  }
  ADD_FAILURE() << "decoder did not terminate";
  return w;
}

inline MessageView decode_single(std::span<const std::byte> buf, const Limits& limits = {}) {
  Walk w = decode_all(buf, limits);
  EXPECT_EQ(w.messages.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<EndOfBuffer>(w.last));
  return w.messages.empty() ? MessageView{} : w.messages.front();
}

// Owns the encoded bytes so the view stays valid (moving a vector keeps its heap block).
struct Decoded {
  Bytes buf;
  MessageView m;
};

inline Decoded roundtrip(const MessageSpec& spec) {
  Decoded d{encode_one(spec), {}};
  d.m = decode_single(d.buf);
  return d;
}

// Reason of the first decode error, or nullopt if the buffer is clean.
inline std::optional<DecodeError> first_error(std::span<const std::byte> buf, const Limits& limits = {}) {
  Walk w = decode_all(buf, limits);
  if (auto* e = std::get_if<DecodeError>(&w.last)) return *e;
  return std::nullopt;
}

inline void expect_reason(std::span<const std::byte> buf, Reason want, const Limits& limits = {}) {
  const auto err = first_error(buf, limits);
  ASSERT_TRUE(err.has_value()) << "expected " << to_string(want);
  EXPECT_EQ(err->reason, want) << "got " << to_string(err->reason) << ", expected "
                               << to_string(want);
}

// Rewrites the header of the message at `at` through its raw fields.
inline void patch(Bytes& buf, std::size_t at, const std::function<void(RawHeader&)>& fn) {
  const std::span<std::byte> s(buf);
  RawHeader h = read_raw_header(s.subspan(at).first<kHeaderSize>());
  fn(h);
  write_raw_header(s.subspan(at).first<kHeaderSize>(), h);
}

inline Bytes patched(const MessageSpec& spec, const std::function<void(RawHeader&)>& fn) {
  Bytes buf = encode_one(spec);
  patch(buf, 0, fn);
  return buf;
}

// A raw message from forged fields plus payload bytes.
inline Bytes forge(const RawHeader& h, std::span<const std::byte> payload = {}) {
  Bytes buf(kHeaderSize + payload.size());
  write_raw_header(std::span<std::byte>(buf).first<kHeaderSize>(), h);
  std::ranges::copy(payload, buf.begin() + kHeaderSize);
  return buf;
}

inline RawHeader raw_of(Opcode op, std::uint16_t key_len = 0, std::uint64_t value_len = 0,
                 std::uint16_t flags = 0) {
  RawHeader h;
  h.opcode = static_cast<std::uint8_t>(op);
  h.key_len = key_len;
  h.value_len = value_len;
  h.flags = flags;
  return h;
}

inline bool within(std::span<const std::byte> buf, const void* p, std::size_t n) {
  if (n == 0) return true;  // empty views carry no bytes
  const auto b = reinterpret_cast<std::uintptr_t>(buf.data());
  const auto x = reinterpret_cast<std::uintptr_t>(p);
  return x >= b && x - b <= buf.size() && n <= buf.size() - (x - b);
}

// Invariants every decoded message must satisfy, whatever the input.
inline void check_view(std::span<const std::byte> buf, const MessageView& m) {
  ASSERT_LE(m.offset, buf.size());
  ASSERT_LE(m.size, buf.size() - m.offset);
  ASSERT_GE(m.size, kHeaderSize);
  ASSERT_TRUE(within(buf, m.key.data(), m.key.size()));
  ASSERT_TRUE(within(buf, m.value.data(), m.value.size()));
  ASSERT_EQ(m.key.size(), m.header.key_len);
  ASSERT_EQ(m.rdv.has_value(), m.header.rdv());
  ASSERT_EQ(m.grant.has_value(), m.header.grant());
  ASSERT_FALSE(m.rdv && m.grant);
  if (!m.rdv && !m.grant) {
    ASSERT_EQ(m.value.size(), m.header.value_len);
  }
  ASSERT_EQ(m.size, kHeaderSize + m.key.size() + (m.header.has_ttl() ? kTtlSize : 0) +
                        (m.header.has_epoch() ? kEpochSize : 0) +
                        (m.grant ? kGrantDescSize : m.rdv ? kRdvDescSize : m.value.size()));
}

inline constexpr RdvDesc kDesc{0x1122334455667788ull, 0xA1B2C3D4u};

}  // namespace rkv::proto::test
