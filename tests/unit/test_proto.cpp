// Unit tests for src/proto: encoding, decoding, strictness, fuzzing,
// connection parameters.

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

namespace rkv::proto {
namespace {

using Bytes = std::vector<std::byte>;

Bytes to_bytes(std::string_view s) {
  const auto b = as_bytes(s);
  return {b.begin(), b.end()};
}

std::string text_of(std::span<const std::byte> b) { return std::string(as_string_view(b)); }

Bytes encode_all(const std::vector<MessageSpec>& specs, const Limits& limits = {}) {
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

Bytes encode_one(const MessageSpec& spec) { return encode_all({spec}); }

struct Walk {
  std::vector<MessageView> messages;
  DecodeResult last;  // EndOfBuffer or DecodeError
};

Walk decode_all(std::span<const std::byte> buf, const Limits& limits = {}) {
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

MessageView decode_single(std::span<const std::byte> buf, const Limits& limits = {}) {
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

Decoded roundtrip(const MessageSpec& spec) {
  Decoded d{encode_one(spec), {}};
  d.m = decode_single(d.buf);
  return d;
}

// Reason of the first decode error, or nullopt if the buffer is clean.
std::optional<DecodeError> first_error(std::span<const std::byte> buf, const Limits& limits = {}) {
  Walk w = decode_all(buf, limits);
  if (auto* e = std::get_if<DecodeError>(&w.last)) return *e;
  return std::nullopt;
}

void expect_reason(std::span<const std::byte> buf, Reason want, const Limits& limits = {}) {
  const auto err = first_error(buf, limits);
  ASSERT_TRUE(err.has_value()) << "expected " << to_string(want);
  EXPECT_EQ(err->reason, want) << "got " << to_string(err->reason) << ", expected "
                               << to_string(want);
}

// Rewrites the header of the message at `at` through its raw fields.
void patch(Bytes& buf, std::size_t at, const std::function<void(RawHeader&)>& fn) {
  const std::span<std::byte> s(buf);
  RawHeader h = read_raw_header(s.subspan(at).first<kHeaderSize>());
  fn(h);
  write_raw_header(s.subspan(at).first<kHeaderSize>(), h);
}

Bytes patched(const MessageSpec& spec, const std::function<void(RawHeader&)>& fn) {
  Bytes buf = encode_one(spec);
  patch(buf, 0, fn);
  return buf;
}

// A raw message from forged fields plus payload bytes.
Bytes forge(const RawHeader& h, std::span<const std::byte> payload = {}) {
  Bytes buf(kHeaderSize + payload.size());
  write_raw_header(std::span<std::byte>(buf).first<kHeaderSize>(), h);
  std::ranges::copy(payload, buf.begin() + kHeaderSize);
  return buf;
}

RawHeader raw_of(Opcode op, std::uint16_t key_len = 0, std::uint64_t value_len = 0,
                 std::uint16_t flags = 0) {
  RawHeader h;
  h.opcode = static_cast<std::uint8_t>(op);
  h.key_len = key_len;
  h.value_len = value_len;
  h.flags = flags;
  return h;
}

bool within(std::span<const std::byte> buf, const void* p, std::size_t n) {
  if (n == 0) return true;  // empty views carry no bytes
  const auto b = reinterpret_cast<std::uintptr_t>(buf.data());
  const auto x = reinterpret_cast<std::uintptr_t>(p);
  return x >= b && x - b <= buf.size() && n <= buf.size() - (x - b);
}

// Invariants every decoded message must satisfy, whatever the input.
void check_view(std::span<const std::byte> buf, const MessageView& m) {
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

constexpr RdvDesc kDesc{0x1122334455667788ull, 0xA1B2C3D4u};

// ---------------------------------------------------------------- constants

TEST(ProtoWire, Constants) {
  static_assert(kHeaderSize == 24 && kRdvDescSize == 16 && kMaxKey == 1024);
  static_assert(eager_fits(1, 4094) && !eager_fits(1, 4095));
  static_assert(eager_fits(0, 4095) && !eager_fits(4096, 0) && !eager_fits(5000, 0));
  static_assert(!eager_fits(1, std::numeric_limits<std::uint64_t>::max()));
  static_assert(is_request(Opcode::set) && is_reply(Opcode::stats_reply));
  static_assert(reply_opcode(Opcode::get) == Opcode::get_reply);
  static_assert(reply_opcode(Opcode::set_reply) == Opcode::set_reply);
  static_assert(byteswap(std::uint32_t{0x01020304}) == 0x04030201u);
}

TEST(ProtoWire, ToStringCoversEveryValue) {
  std::set<std::string_view> seen;
  for (unsigned v = 0; v < 256; ++v) {
    if (auto op = opcode_from_wire(static_cast<std::uint8_t>(v))) {
      EXPECT_TRUE(seen.insert(to_string(*op)).second);
    }
  }
  EXPECT_EQ(seen.size(), 17u);  // SET GET STATS RELEASE DEL CALL EXPIRE TTL TOUCH and eight replies
  seen.clear();
  for (unsigned v = 0; v < 0x10000; ++v) {
    if (auto s = status_from_wire(static_cast<std::uint16_t>(v))) {
      EXPECT_TRUE(seen.insert(to_string(*s)).second);
    }
  }
  EXPECT_EQ(seen.size(), 12u);  // ok .. io_error, no_handler, handler_failed, refused, not_owner, moved
  seen.clear();
  for (unsigned v = 0; v <= static_cast<unsigned>(Reason::bad_grant_trailer); ++v) {
    EXPECT_TRUE(seen.insert(to_string(static_cast<Reason>(v))).second);
  }
  EXPECT_EQ(to_string(Status::ok), "ok");
  EXPECT_EQ(to_string(Opcode::get_reply), "GET_REPLY");
}

TEST(ProtoWire, EndianHelpers) {
  Bytes b(8);
  store_le(std::span<std::byte>(b), 0, std::uint64_t{0x0807060504030201ull});
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(b[i], std::byte(i + 1));
  EXPECT_EQ(load_le<std::uint32_t>(b, 4), 0x08070605u);
  EXPECT_EQ(load_le<std::uint16_t>(b, 1), 0x0302u);
}

// Golden bytes pin the layout so client and server cannot drift apart.
TEST(ProtoWire, GoldenSetRequestBytes) {
  const Bytes value = to_bytes("v");
  const Bytes buf = encode_one(msg::set_request(0x01020304, "k", value));
  const Bytes want = {
      std::byte{0x56}, std::byte{0x4B},  // magic
      std::byte{0x01},                   // version
      std::byte{0x01},                   // SET
      std::byte{0}, std::byte{0},        // flags
      std::byte{0}, std::byte{0},        // status
      std::byte{0}, std::byte{0},        // credits
      std::byte{1}, std::byte{0},        // key_len
      std::byte{4}, std::byte{3}, std::byte{2}, std::byte{1},  // req_id
      std::byte{1}, std::byte{0}, std::byte{0}, std::byte{0},  // value_len
      std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0},
      std::byte{'k'}, std::byte{'v'}};
  EXPECT_EQ(buf, want);
}

TEST(ProtoWire, GoldenRdvDescriptorBytes) {
  const Bytes buf = encode_one(msg::get_reply_pull(7, 3, kDesc, 0x10000));
  ASSERT_EQ(buf.size(), kHeaderSize + kRdvDescSize);
  const std::span<const std::byte> d = std::span<const std::byte>(buf).subspan(kHeaderSize);
  EXPECT_EQ(d[0], std::byte{0x88});
  EXPECT_EQ(d[7], std::byte{0x11});
  EXPECT_EQ(d[8], std::byte{0xD4});
  EXPECT_EQ(d[11], std::byte{0xA1});
  EXPECT_EQ(load_le<std::uint32_t>(d, rdv_off::value_crc), 0u);
  EXPECT_EQ(buf[hdr_off::flags], std::byte{kFlagFound | kFlagRdv | kFlagPull});
  EXPECT_EQ(buf[hdr_off::credits], std::byte{3});
}

// ---------------------------------------------------------------- round trips

TEST(ProtoRoundTrip, SetEager) {
  const Bytes value = to_bytes("hello world");
  const Bytes buf = encode_one(msg::set_request(42, "key1", value));
  EXPECT_EQ(buf.size(), kHeaderSize + 4 + value.size());
  const MessageView m = decode_single(buf);
  EXPECT_EQ(m.opcode(), Opcode::set);
  EXPECT_EQ(m.header.req_id, 42u);
  EXPECT_EQ(m.header.status, Status::ok);
  EXPECT_EQ(m.header.credits, 0);
  EXPECT_EQ(m.header.flags, 0);
  EXPECT_EQ(m.key, "key1");
  EXPECT_EQ(text_of(m.value), "hello world");
  EXPECT_FALSE(m.rdv);
  EXPECT_EQ(m.offset, 0u);
  EXPECT_EQ(m.size, buf.size());
}

TEST(ProtoRoundTrip, SetEmptyValue) {
  Decoded d = roundtrip(msg::set_request(1, "k", {}));
  const MessageView& m = d.m;
  EXPECT_EQ(m.key, "k");
  EXPECT_TRUE(m.value.empty());
  EXPECT_EQ(m.header.value_len, 0u);
}

TEST(ProtoRoundTrip, SetRdv) {
  const Bytes buf = encode_one(msg::set_request_rdv(9, "big", kDesc, 1u << 20));
  EXPECT_EQ(buf.size(), kHeaderSize + 3 + kRdvDescSize);
  const MessageView m = decode_single(buf);
  EXPECT_EQ(m.opcode(), Opcode::set);
  EXPECT_TRUE(m.header.rdv());
  ASSERT_TRUE(m.rdv);
  EXPECT_EQ(*m.rdv, kDesc);
  EXPECT_EQ(m.header.value_len, 1u << 20);
  EXPECT_TRUE(m.value.empty());
  EXPECT_EQ(m.key, "big");
}

TEST(ProtoRoundTrip, GetPlainAndRdv) {
  Decoded d = roundtrip(msg::get_request(5, "abc"));
  const MessageView& m = d.m;
  EXPECT_EQ(m.opcode(), Opcode::get);
  EXPECT_EQ(m.key, "abc");
  EXPECT_FALSE(m.rdv);
  EXPECT_EQ(m.header.value_len, 0u);

  d = roundtrip(msg::get_request_rdv(6, "abc", kDesc, 8192));
  ASSERT_TRUE(m.rdv);
  EXPECT_EQ(*m.rdv, kDesc);
  EXPECT_EQ(m.header.value_len, 8192u);
  EXPECT_EQ(m.header.req_id, 6u);
}

TEST(ProtoRoundTrip, Stats) {
  Decoded d = roundtrip(msg::stats_request(77));
  const MessageView& m = d.m;
  EXPECT_EQ(m.opcode(), Opcode::stats);
  EXPECT_EQ(m.size, kHeaderSize);
  EXPECT_TRUE(m.key.empty());

  const std::string text = "keys 10\nbytes 1234\n";
  d = roundtrip(msg::stats_reply(77, 2, text));
  EXPECT_EQ(m.opcode(), Opcode::stats_reply);
  EXPECT_EQ(m.header.credits, 2);
  EXPECT_EQ(m.value_text(), text);
}

TEST(ProtoRoundTrip, SetReply) {
  Decoded d = roundtrip(msg::set_reply(3, 1));
  const MessageView& m = d.m;
  EXPECT_EQ(m.opcode(), Opcode::set_reply);
  EXPECT_EQ(m.header.status, Status::ok);
  EXPECT_EQ(m.header.credits, 1);
  EXPECT_EQ(m.size, kHeaderSize);

  d = roundtrip(msg::set_reply(3, 0, Status::no_memory));
  EXPECT_EQ(m.header.status, Status::no_memory);
}

TEST(ProtoRoundTrip, GetReplies) {
  const Bytes value = to_bytes("the value");
  Decoded d = roundtrip(msg::get_reply_found(11, 4, value));
  const MessageView& m = d.m;
  EXPECT_EQ(m.opcode(), Opcode::get_reply);
  EXPECT_TRUE(m.found());
  EXPECT_EQ(text_of(m.value), "the value");
  EXPECT_EQ(m.header.credits, 4);

  d = roundtrip(msg::get_reply_found(12, 0, {}));
  EXPECT_TRUE(m.found());
  EXPECT_TRUE(m.value.empty());

  d = roundtrip(msg::get_reply_missing(13, 1));
  EXPECT_FALSE(m.found());
  EXPECT_EQ(m.header.status, Status::ok);
  EXPECT_EQ(m.size, kHeaderSize);

  d = roundtrip(msg::get_reply_pull(14, 1, kDesc, 100000));
  EXPECT_TRUE(m.found());
  EXPECT_TRUE(m.header.pull());
  ASSERT_TRUE(m.rdv);
  EXPECT_EQ(*m.rdv, kDesc);
  EXPECT_EQ(m.header.value_len, 100000u);
}

TEST(ProtoRoundTrip, ErrorReplies) {
  for (Opcode req : {Opcode::set, Opcode::get, Opcode::stats}) {
    for (Status st : {Status::too_large, Status::bad_request, Status::no_memory,
                      Status::internal, Status::remote_access}) {
      Decoded d = roundtrip(msg::error_reply(req, 99, 5, st));
      const MessageView& m = d.m;
      EXPECT_EQ(m.opcode(), reply_opcode(req));
      EXPECT_EQ(m.header.status, st);
      EXPECT_EQ(m.header.credits, 5);
      EXPECT_EQ(m.header.flags, 0);
      EXPECT_EQ(m.size, kHeaderSize);
    }
  }
}

TEST(ProtoRoundTrip, BinaryKeyAndValue) {
  Bytes value(300);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = std::byte(i);
  const std::string key("\0a\xff", 3);
  Decoded d = roundtrip(msg::set_request(1, key, value));
  const MessageView& m = d.m;
  EXPECT_EQ(m.key, key);
  EXPECT_TRUE(std::ranges::equal(m.value, value));
}

// ---------------------------------------------------------------- packing

std::vector<MessageSpec> sample_messages(const Bytes& v1, const Bytes& v2) {
  return {msg::set_request(1, "alpha", v1),
          msg::get_request(2, "beta"),
          msg::set_request_rdv(3, "gamma", kDesc, 65536),
          msg::stats_request(4),
          msg::get_request_rdv(5, "delta", kDesc, 4096),
          msg::set_reply(1, 1),
          msg::get_reply_found(2, 1, v2),
          msg::get_reply_missing(6, 0),
          msg::get_reply_pull(5, 1, kDesc, 3000),
          msg::stats_reply(4, 1, "uptime 5\n"),
          msg::error_reply(Opcode::set, 7, 1, Status::too_large)};
}

TEST(ProtoPacking, DecodesInOrder) {
  const Bytes v1 = to_bytes("first value");
  const Bytes v2 = to_bytes("second");
  const auto specs = sample_messages(v1, v2);
  const Bytes buf = encode_all(specs);

  Decoder dec(buf);
  std::size_t expect_offset = 0;
  for (const auto& spec : specs) {
    DecodeResult r = dec.next();
    auto* m = std::get_if<MessageView>(&r);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->opcode(), spec.opcode);
    EXPECT_EQ(m->header.req_id, spec.req_id);
    EXPECT_EQ(m->key, spec.key);
    EXPECT_EQ(m->offset, expect_offset);
    EXPECT_EQ(m->size, encoded_size(spec));
    EXPECT_EQ(m->rdv.has_value(), spec.rdv.has_value());
    EXPECT_TRUE(std::ranges::equal(m->value, spec.value));
    expect_offset += m->size;
  }
  EXPECT_TRUE(dec.at_end());
  EXPECT_TRUE(std::holds_alternative<EndOfBuffer>(dec.next()));
  EXPECT_TRUE(std::holds_alternative<EndOfBuffer>(dec.next()));  // repeats
  EXPECT_EQ(dec.offset(), buf.size());
}

TEST(ProtoPacking, EmptyBufferIsCleanEnd) {
  Decoder dec(std::span<const std::byte>{});
  EXPECT_TRUE(dec.at_end());
  EXPECT_TRUE(std::holds_alternative<EndOfBuffer>(dec.next()));
}

TEST(ProtoPacking, ErrorStopsDecodingAndRepeats) {
  const Bytes v1 = to_bytes("x");
  Bytes buf = encode_all({msg::set_request(1, "a", v1), msg::get_request(2, "b"),
                          msg::get_request(3, "c")});
  const std::size_t second = encode_all({msg::set_request(1, "a", v1)}).size();
  patch(buf, second, [](RawHeader& h) { h.magic = 0xDEAD; });

  Decoder dec(buf);
  EXPECT_TRUE(std::holds_alternative<MessageView>(dec.next()));
  const DecodeResult r = dec.next();
  ASSERT_TRUE(std::holds_alternative<DecodeError>(r));
  const DecodeError want{Reason::bad_magic, second};
  EXPECT_EQ(std::get<DecodeError>(r), want);
  EXPECT_TRUE(dec.failed());
  EXPECT_FALSE(dec.at_end());
  // The third message is intact but must not be decoded: the stream is untrusted.
  EXPECT_EQ(std::get<DecodeError>(dec.next()), want);
  EXPECT_EQ(dec.offset(), second);
}

// ---------------------------------------------------------------- encoder

TEST(ProtoEncoder, NoSpaceWritesNothing) {
  Bytes buf(kHeaderSize + 3, std::byte{0xEE});
  const Bytes value = to_bytes("vv");
  EncodeResult r = encode(buf, 0, msg::set_request(1, "kk", value));
  EXPECT_EQ(r.status, EncodeStatus::no_space);
  EXPECT_EQ(r.offset, 0u);
  EXPECT_TRUE(std::ranges::all_of(buf, [](std::byte b) { return b == std::byte{0xEE}; }));

  r = encode(buf, buf.size() + 10, msg::stats_request(1));  // offset past the end
  EXPECT_EQ(r.status, EncodeStatus::no_space);

  r = encode(buf, 3, msg::stats_request(1));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.offset, 3 + kHeaderSize);
}

TEST(ProtoEncoder, EncoderAppendsUntilFull) {
  Bytes buf(3 * kHeaderSize + 10);
  Encoder enc(buf);
  EXPECT_EQ(enc.append(msg::stats_request(1)), EncodeStatus::ok);
  EXPECT_EQ(enc.append(msg::set_reply(1, 1)), EncodeStatus::ok);
  EXPECT_TRUE(enc.fits(msg::get_reply_missing(2, 0)));
  EXPECT_EQ(enc.append(msg::get_reply_missing(2, 0)), EncodeStatus::ok);
  EXPECT_FALSE(enc.fits(msg::stats_request(3)));
  EXPECT_EQ(enc.append(msg::stats_request(3)), EncodeStatus::no_space);
  EXPECT_EQ(enc.size(), 3 * kHeaderSize);
  EXPECT_EQ(enc.remaining(), 10u);
  EXPECT_EQ(decode_all(enc.bytes()).messages.size(), 3u);
  enc.reset();
  EXPECT_EQ(enc.size(), 0u);
}

TEST(ProtoEncoder, RefusesInvalidMessages) {
  Bytes buf(1 << 16);
  const Bytes v = to_bytes("v");
  const std::string long_key(kMaxKey + 1, 'k');
  const std::string huge_key(70000, 'k');
  struct Case {
    MessageSpec spec;
    Reason reason;
  };
  MessageSpec rdv_and_value = msg::set_request_rdv(1, "k", kDesc, 10);
  rdv_and_value.value = v;
  MessageSpec keyed_stats = msg::stats_request(1);
  keyed_stats.key = "k";
  MessageSpec found_set = msg::set_request(1, "k", v);
  found_set.found = true;
  MessageSpec request_credits = msg::get_request(1, "k");
  request_credits.credits = 1;
  const std::vector<Case> cases = {
      {msg::set_request(1, "", v), Reason::bad_key_len},
      {msg::get_request(1, long_key), Reason::bad_key_len},
      {msg::get_request(1, huge_key), Reason::bad_key_len},
      {keyed_stats, Reason::key_not_allowed},
      {rdv_and_value, Reason::value_not_allowed},
      {found_set, Reason::found_not_allowed},
      {request_credits, Reason::credits_in_request},
      {msg::get_request_rdv(1, "k", kDesc, kDefaultMaxValue + 1), Reason::value_too_large},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(check_message(c.spec), c.reason) << to_string(c.reason);
    const EncodeResult r = encode(buf, 0, c.spec);
    EXPECT_EQ(r.status, EncodeStatus::invalid) << to_string(c.reason);
    EXPECT_EQ(r.offset, 0u);
  }
  Encoder enc(buf);
  EXPECT_EQ(enc.append(cases.front().spec), EncodeStatus::invalid);
  EXPECT_EQ(enc.size(), 0u);
}

// A message this process built (Origin::built: the server's replies) is
// written byte for byte as the checked path writes it; one that breaks a
// rule is still refused where assertions are on (the test builds), and only
// a build without them (release) writes it unchecked.
TEST(ProtoEncoder, BuiltMessagesAreTheSameBytesAndCheckedWhereAssertionsAreOn) {
  const Bytes v = to_bytes("value");
  const std::string stats = "keys=3\n";
  const std::vector<MessageSpec> replies = {
      msg::set_reply(7, 3),
      msg::get_reply_found(8, 1, v),
      msg::get_reply_pull(9, 0, kDesc, 5000),
      msg::get_reply_missing(10, 2),
      msg::stats_reply(11, 0, stats),
      msg::del_reply(12, 4, true),
      msg::call_reply(13, 0, v),
      msg::expire_reply(14, 0, false),
      msg::ttl_reply(15, 0, std::uint64_t{250}),
      msg::touch_reply(16, 1),
      msg::error_reply(Opcode::get, 17, 0, Status::too_large),
  };
  for (const MessageSpec& m : replies) {
    Bytes checked(256), built(256);
    const EncodeResult a = encode(checked, 3, m);
    const EncodeResult b = encode(built, 3, m, {}, nullptr, Origin::built);
    ASSERT_TRUE(a.ok()) << to_string(m.opcode);
    ASSERT_EQ(b.status, EncodeStatus::ok) << to_string(m.opcode);
    EXPECT_EQ(a.offset, b.offset);
    EXPECT_EQ(checked, built) << to_string(m.opcode);
  }
  MessageSpec bad = msg::set_reply(1, 0);
  bad.value = v;  // a SET_REPLY carries no value
  ASSERT_EQ(check_message(bad), Reason::value_not_allowed);
  Bytes buf(256);
#ifdef NDEBUG
  constexpr EncodeStatus kBuiltBad = EncodeStatus::ok;  // release: built messages are not checked
#else
  constexpr EncodeStatus kBuiltBad = EncodeStatus::invalid;
#endif
  EXPECT_EQ(encode(buf, 0, bad, {}, nullptr, Origin::built).status, kBuiltBad);
  EXPECT_EQ(encode(buf, 0, bad).status, EncodeStatus::invalid) << "a message from outside is always checked";
}

// ---------------------------------------------------------------- boundaries

TEST(ProtoBoundary, EagerLimit) {
  const Bytes v4094(4094, std::byte{1});
  const Bytes v4095(4095, std::byte{1});
  // key + value = 4095: the largest eager SET; with a TTL and an epoch (a
  // replication record), the largest eager message.
  const Bytes ok = encode_one(msg::set_request(1, "k", v4094));
  EXPECT_EQ(ok.size(), kMaxEagerSetSize - kTtlSize - kEpochSize);
  EXPECT_EQ(decode_single(ok).value.size(), 4094u);
  auto with_ttl = msg::set_request(1, "k", v4094);
  with_ttl.ttl = 500;
  with_ttl.epoch = 7;
  const Bytes ok_ttl = encode_one(with_ttl);
  EXPECT_EQ(ok_ttl.size(), kMaxEagerSetSize);
  EXPECT_EQ(decode_single(ok_ttl).ttl, 500u);
  EXPECT_EQ(decode_single(ok_ttl).epoch, 7u);
  EXPECT_EQ(decode_single(ok_ttl).value.size(), 4094u);

  const std::string key1024(kMaxKey, 'x');
  const Bytes v3071(4095 - kMaxKey, std::byte{2});
  EXPECT_EQ(decode_single(encode_one(msg::set_request(1, key1024, v3071))).key, key1024);

  // key + value = 4096: the encoder refuses, forged bytes are rejected.
  EXPECT_EQ(check_message(msg::set_request(1, "k", v4095)), Reason::eager_too_large);
  Bytes bad = forge(raw_of(Opcode::set, 1, 4095), to_bytes("k" + std::string(4095, 'v')));
  expect_reason(bad, Reason::eager_too_large);

  // The eager limit is a SET rule: a large eager reply is fine if it was received.
  const Bytes big(10000, std::byte{3});
  EXPECT_EQ(decode_single(encode_one(msg::get_reply_found(1, 1, big))).value.size(), 10000u);
  // RDV is not bound by the eager limit.
  EXPECT_TRUE(check_message(msg::set_request_rdv(1, "k", kDesc, 4095)) == std::nullopt);
}

TEST(ProtoBoundary, KeyLength) {
  const std::string key1024(kMaxKey, 'a');
  EXPECT_EQ(decode_single(encode_one(msg::get_request(1, key1024))).key.size(), 1024u);

  const std::string key1025(kMaxKey + 1, 'a');
  EXPECT_EQ(check_message(msg::get_request(1, key1025)), Reason::bad_key_len);
  expect_reason(forge(raw_of(Opcode::get, 1025), to_bytes(key1025)), Reason::bad_key_len);

  // A tighter receiver limit, and a looser one that cannot exceed kMaxKey.
  const Bytes k10 = encode_one(msg::get_request(1, std::string(10, 'a')));
  expect_reason(k10, Reason::bad_key_len, Limits{.max_key = 9});
  EXPECT_FALSE(first_error(k10, Limits{.max_key = 10}));
  expect_reason(forge(raw_of(Opcode::get, 1025), to_bytes(key1025)), Reason::bad_key_len,
                Limits{.max_key = 100000});
}

TEST(ProtoBoundary, OversizedLengths) {
  constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();
  const Limits unlimited{.max_value = kMax64};
  const Bytes k = to_bytes("k");

  // Eager SET: the eager rule fires first, even with no value limit.
  expect_reason(forge(raw_of(Opcode::set, 1, kMax64), k), Reason::eager_too_large);
  expect_reason(forge(raw_of(Opcode::set, 1, kMax64 - 1), k), Reason::eager_too_large, unlimited);
  // Eager reply: the value limit, then (with no limit) the buffer bound, no overflow.
  const RawHeader reply = raw_of(Opcode::get_reply, 0, kMax64, kFlagFound);
  expect_reason(forge(reply), Reason::value_too_large);
  expect_reason(forge(reply), Reason::truncated_payload, unlimited);
  for (std::uint64_t len : {kMax64 - kHeaderSize, kMax64 - kHeaderSize + 1, kMax64 - 1,
                            std::uint64_t{1} << 63}) {
    RawHeader h = raw_of(Opcode::stats_reply, 0, len);
    expect_reason(forge(h, to_bytes("abc")), Reason::truncated_payload, unlimited);
  }
  // RDV lengths only face the value limit, never the buffer.
  Bytes rdv = encode_one(msg::set_request_rdv(1, "k", kDesc, 1));
  patch(rdv, 0, [](RawHeader& h) { h.value_len = kMax64; });
  expect_reason(rdv, Reason::value_too_large);
  EXPECT_EQ(decode_single(rdv, unlimited).header.value_len, kMax64);
  patch(rdv, 0, [](RawHeader& h) { h.value_len = kDefaultMaxValue; });
  EXPECT_EQ(decode_single(rdv).header.value_len, kDefaultMaxValue);
  patch(rdv, 0, [](RawHeader& h) { h.value_len = kDefaultMaxValue + 1; });
  expect_reason(rdv, Reason::value_too_large);

  // key_len 0xFFFF.
  expect_reason(forge(raw_of(Opcode::set, 0xFFFF), k), Reason::bad_key_len);
  expect_reason(forge(raw_of(Opcode::stats, 0xFFFF), k), Reason::key_not_allowed);
  expect_reason(forge(raw_of(Opcode::get, 0xFFFF), k), Reason::bad_key_len,
                Limits{.max_key = 0xFFFF});
}

// ---------------------------------------------------------------- truncation

TEST(ProtoTruncation, EveryPrefix) {
  const Bytes v1 = to_bytes("first value");
  const Bytes v2 = to_bytes("second");
  const auto specs = sample_messages(v1, v2);
  const Bytes buf = encode_all(specs);
  std::vector<std::size_t> ends;  // message end offsets
  std::size_t off = 0;
  for (const auto& s : specs) ends.push_back(off += encoded_size(s));

  for (std::size_t len = 0; len <= buf.size(); ++len) {
    // Copy so any over-read hits the end of its own allocation (ASan).
    const Bytes prefix(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(len));
    const Walk w = decode_all(prefix);
    const auto complete = static_cast<std::size_t>(
        std::ranges::upper_bound(ends, len) - ends.begin());
    ASSERT_EQ(w.messages.size(), complete) << "len " << len;
    for (const auto& m : w.messages) check_view(prefix, m);
    const std::size_t boundary = complete == 0 ? 0 : ends[complete - 1];
    if (boundary == len) {
      EXPECT_TRUE(std::holds_alternative<EndOfBuffer>(w.last)) << "len " << len;
      continue;
    }
    const auto* err = std::get_if<DecodeError>(&w.last);
    ASSERT_NE(err, nullptr) << "len " << len;
    EXPECT_EQ(err->offset, boundary);
    const Reason want =
        len - boundary < kHeaderSize ? Reason::truncated_header : Reason::truncated_payload;
    EXPECT_EQ(err->reason, want) << "len " << len;
  }
}

// ---------------------------------------------------------------- strictness

TEST(ProtoStrict, BadMagic) {
  for (std::uint16_t m : {0x0000, 0x564B, 0x4B57, 0xFFFF}) {
    expect_reason(patched(msg::stats_request(1), [m](RawHeader& h) { h.magic = m; }),
                  Reason::bad_magic);
  }
}

TEST(ProtoStrict, BadVersion) {
  for (std::uint8_t v : {0, 2, 255}) {
    expect_reason(patched(msg::stats_request(1), [v](RawHeader& h) { h.version = v; }),
                  Reason::bad_version);
  }
}

TEST(ProtoStrict, UnknownOpcode) {
  for (unsigned v = 0; v < 256; ++v) {
    if (opcode_from_wire(static_cast<std::uint8_t>(v))) continue;
    expect_reason(patched(msg::stats_request(1),
                          [v](RawHeader& h) { h.opcode = static_cast<std::uint8_t>(v); }),
                  Reason::unknown_opcode);
  }
}

TEST(ProtoStrict, ReservedFlags) {
  for (unsigned bit = 7; bit < 16; ++bit) {
    const auto flag = static_cast<std::uint16_t>(1u << bit);
    expect_reason(patched(msg::get_request(1, "k"), [flag](RawHeader& h) { h.flags |= flag; }),
                  Reason::reserved_flags);
    expect_reason(patched(msg::get_reply_found(1, 0, {}),
                          [flag](RawHeader& h) { h.flags |= flag; }),
                  Reason::reserved_flags);
  }
}

TEST(ProtoStrict, RequestStatusAndCredits) {
  expect_reason(patched(msg::get_request(1, "k"), [](RawHeader& h) { h.status = 1; }),
                Reason::status_in_request);
  expect_reason(patched(msg::stats_request(1), [](RawHeader& h) { h.credits = 3; }),
                Reason::credits_in_request);
}

TEST(ProtoStrict, UnknownStatus) {
  EXPECT_EQ(status_from_wire(6), Status::io_error);  // docs/durability.md
  EXPECT_EQ(status_from_wire(9), Status::refused);  // CALL's statuses
  EXPECT_EQ(status_from_wire(10), Status::not_owner);  // docs/cluster.md "Fencing"
  EXPECT_EQ(status_from_wire(11), Status::moved);  // docs/cluster.md "Replication"
  for (std::uint16_t s : {12, 100, 0xFFFF}) {
    expect_reason(patched(msg::set_reply(1, 1), [s](RawHeader& h) { h.status = s; }),
                  Reason::unknown_status);
  }
}

TEST(ProtoStrict, PayloadOnError) {
  const Bytes v = to_bytes("partial");
  expect_reason(patched(msg::get_reply_found(1, 1, v),
                        [](RawHeader& h) { h.status = static_cast<std::uint16_t>(Status::internal); }),
                Reason::payload_on_error);
  expect_reason(patched(msg::get_reply_missing(1, 1),
                        [](RawHeader& h) {
                          h.status = static_cast<std::uint16_t>(Status::internal);
                          h.flags = kFlagFound;
                        }),
                Reason::payload_on_error);
  MessageSpec spec = msg::stats_reply(1, 1, "text");
  spec.status = Status::internal;
  EXPECT_EQ(check_message(spec), Reason::payload_on_error);
}

TEST(ProtoStrict, FoundNotAllowed) {
  const Bytes v = to_bytes("v");
  for (const MessageSpec& spec : {msg::set_request(1, "k", v), msg::get_request(1, "k"),
                                  msg::stats_request(1), msg::set_reply(1, 0),
                                  msg::stats_reply(1, 0, "s")}) {
    expect_reason(patched(spec, [](RawHeader& h) { h.flags |= kFlagFound; }),
                  Reason::found_not_allowed);
  }
}

TEST(ProtoStrict, RdvNotAllowed) {
  // Append a valid-looking descriptor so only the flag rule can fire.
  const Bytes desc(kRdvDescSize);
  for (const MessageSpec& spec : {msg::stats_request(1), msg::set_reply(1, 0),
                                  msg::get_reply_missing(1, 0)}) {
    Bytes buf = patched(spec, [](RawHeader& h) { h.flags |= kFlagRdv; });
    buf.insert(buf.end(), desc.begin(), desc.end());
    expect_reason(buf, Reason::rdv_not_allowed);
  }
  Bytes buf = forge(raw_of(Opcode::stats_reply, 0, 10, kFlagRdv), desc);
  expect_reason(buf, Reason::rdv_not_allowed);
}

// A value written into the client's buffer is answered by its WRITE's
// immediate: a GET_REPLY (like a CALL_REPLY) names server memory or nothing.
TEST(ProtoStrict, RdvReplyWithoutPull) {
  for (const MessageSpec& spec : {msg::get_reply_pull(1, 1, kDesc, 9000), msg::call_reply_pull(1, 1, kDesc, 9000)}) {
    EXPECT_FALSE(first_error(encode_one(spec)));
    expect_reason(patched(spec, [](RawHeader& h) { h.flags &= static_cast<std::uint16_t>(~kFlagPull); }),
                  Reason::rdv_without_pull);
  }
}

TEST(ProtoStrict, KeyRules) {
  expect_reason(forge(raw_of(Opcode::set, 0)), Reason::bad_key_len);
  expect_reason(forge(raw_of(Opcode::get, 0)), Reason::bad_key_len);
  const Bytes k = to_bytes("k");
  for (Opcode op : {Opcode::stats, Opcode::set_reply, Opcode::get_reply, Opcode::stats_reply}) {
    expect_reason(forge(raw_of(op, 1), k), Reason::key_not_allowed);
  }
}

TEST(ProtoStrict, ValueNotAllowed) {
  const Bytes v = to_bytes("vvvv");
  expect_reason(forge(raw_of(Opcode::get, 1, 3), v), Reason::value_not_allowed);
  expect_reason(forge(raw_of(Opcode::stats, 0, 4), v), Reason::value_not_allowed);
  expect_reason(forge(raw_of(Opcode::set_reply, 0, 4), v), Reason::value_not_allowed);
  expect_reason(forge(raw_of(Opcode::get_reply, 0, 4), v), Reason::value_not_allowed);
}

TEST(ProtoStrict, ValueTooLarge) {
  const Bytes v(100);
  const Limits small{.max_value = 99};
  expect_reason(encode_one(msg::get_reply_found(1, 1, v)), Reason::value_too_large, small);
  expect_reason(encode_one(msg::stats_reply(1, 1, std::string(100, 's'))),
                Reason::value_too_large, small);
  expect_reason(encode_one(msg::set_request(1, "k", v)), Reason::value_too_large, small);
  expect_reason(encode_one(msg::get_request_rdv(1, "k", kDesc, 100)), Reason::value_too_large,
                small);
  EXPECT_FALSE(first_error(encode_one(msg::get_reply_found(1, 1, v)), Limits{.max_value = 100}));
}

TEST(ProtoStrict, TruncatedHeaderAndPayload) {
  expect_reason(Bytes(1), Reason::truncated_header);
  expect_reason(Bytes(kHeaderSize - 1), Reason::truncated_header);
  Bytes key_short = encode_one(msg::get_request(1, "abcdef"));
  key_short.pop_back();
  expect_reason(key_short, Reason::truncated_payload);
  Bytes desc_short = encode_one(msg::get_reply_pull(1, 1, kDesc, 10));
  desc_short.pop_back();
  expect_reason(desc_short, Reason::truncated_payload);
  Bytes value_short = encode_one(msg::stats_reply(1, 1, "abc"));
  value_short.pop_back();
  expect_reason(value_short, Reason::truncated_payload);
}

TEST(ProtoStrict, RdvValueCrcOnlyInSetRequests) {
  for (std::size_t at : {std::size_t{12}, std::size_t{15}}) {
    Bytes get = encode_one(msg::get_request_rdv(1, "k", kDesc, 10));
    get[kHeaderSize + 1 + at] = std::byte{1};
    expect_reason(get, Reason::rdv_reserved_nonzero);
    Bytes reply = encode_one(msg::get_reply_pull(1, 1, kDesc, 10));
    reply[kHeaderSize + at] = std::byte{1};
    expect_reason(reply, Reason::rdv_reserved_nonzero);
  }
  // A SET request carries the writer's crc32c of the value there, any value.
  proto::RdvDesc d = kDesc;
  d.value_crc = 0xDEADBEEF;
  const MessageView m = decode_single(encode_one(msg::set_request_rdv(1, "k", d, 10)));
  ASSERT_TRUE(m.rdv);
  EXPECT_EQ(*m.rdv, d);
}

// ---------------------------------------------------------------- fuzzing

// What the fuzz loops reached, so they provably exercise deep paths.
struct FuzzStats {
  std::size_t messages = 0;
  std::set<Reason> reasons;
};

// view_validated (the unchecked second walk) must give exactly what the Decoder gave.
void expect_same_view(const MessageView& got, const MessageView& want) {
  ASSERT_EQ(got.header, want.header);
  ASSERT_EQ(got.key.data(), want.key.data());
  ASSERT_EQ(got.key.size(), want.key.size());
  ASSERT_EQ(got.value.data(), want.value.data());
  ASSERT_EQ(got.value.size(), want.value.size());
  ASSERT_EQ(got.rdv, want.rdv);
  ASSERT_EQ(got.offset, want.offset);
  ASSERT_EQ(got.size, want.size);
}

// Decodes to the end, checking every view and that errors are sticky.
void fuzz_one(std::span<const std::byte> buf, FuzzStats& stats, const Limits& limits = {}) {
  Decoder dec(buf, limits);
  std::size_t last_end = 0;
  for (std::size_t i = 0; i <= buf.size() / kHeaderSize + 1; ++i) {
    const DecodeResult r = dec.next();
    if (const auto* m = std::get_if<MessageView>(&r)) {
      check_view(buf, *m);
      expect_same_view(view_validated(buf, m->offset), *m);
      ASSERT_EQ(m->offset, last_end);
      last_end = m->offset + m->size;
      ++stats.messages;
      continue;
    }
    if (const auto* e = std::get_if<DecodeError>(&r)) {
      ASSERT_EQ(e->offset, last_end);
      ASSERT_LT(e->offset, buf.size());
      ASSERT_EQ(std::get<DecodeError>(dec.next()), *e);
      stats.reasons.insert(e->reason);
    } else {
      ASSERT_EQ(last_end, buf.size());
    }
    return;
  }
  FAIL() << "decoder did not terminate";
}

TEST(ProtoFuzz, RandomBytes) {
  std::mt19937_64 rng(0x5eed);
  FuzzStats stats;
  Bytes buf;
  for (int iter = 0; iter < 200000; ++iter) {
    buf.resize(rng() % 513);
    for (auto& b : buf) b = std::byte(rng() & 0xFF);
    // Half the time start with a valid magic/version so deeper rules get hit.
    if (buf.size() >= 3 && (iter & 1)) {
      buf[0] = std::byte{0x56};
      buf[1] = std::byte{0x4B};
      buf[2] = std::byte{kVersion};
    }
    fuzz_one(buf, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(stats.reasons.size(), 5u);
}

// Random but mostly-plausible headers: small lengths, known opcodes and flags.
TEST(ProtoFuzz, RandomHeaders) {
  std::mt19937_64 rng(1234);
  FuzzStats stats;
  const std::uint8_t ops[] = {0x01, 0x02, 0x03, 0x81, 0x82, 0x83};
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes buf;
    const int count = static_cast<int>(rng() % 4) + 1;
    for (int i = 0; i < count; ++i) {
      RawHeader h;
      h.opcode = ops[rng() % 6];
      h.flags = static_cast<std::uint16_t>(rng() % 4);
      h.status = static_cast<std::uint16_t>(rng() % 8 == 0 ? rng() % 7 : 0);
      h.credits = static_cast<std::uint16_t>(rng() % 8 == 0 ? rng() % 3 : 0);
      h.key_len = static_cast<std::uint16_t>(rng() % 3 == 0 ? 0 : rng() % 40);
      h.value_len = rng() % 50 == 0 ? rng() : rng() % 64;
      const Bytes rec = forge(h, Bytes(rng() % 100));
      buf.insert(buf.end(), rec.begin(), rec.end());
    }
    fuzz_one(buf, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stats.messages, 1000u);
  EXPECT_GE(stats.reasons.size(), 10u);
}

TEST(ProtoFuzz, MutatedValidBuffers) {
  const Bytes v1 = to_bytes("first value");
  const Bytes v2 = to_bytes("second");
  const Bytes base = encode_all(sample_messages(v1, v2));
  std::mt19937_64 rng(42);
  FuzzStats stats;
  for (int iter = 0; iter < 200000; ++iter) {
    Bytes buf = base;
    const int flips = static_cast<int>(rng() % 4) + 1;
    for (int i = 0; i < flips; ++i) buf[rng() % buf.size()] ^= std::byte(1u << (rng() % 8));
    if (rng() % 4 == 0) buf[rng() % buf.size()] = std::byte(rng() & 0xFF);
    if (rng() % 8 == 0) buf.resize(rng() % (buf.size() + 1));
    fuzz_one(buf, stats);
    fuzz_one(buf, stats, Limits{.max_key = 4, .max_value = std::numeric_limits<std::uint64_t>::max()});
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stats.messages, 100000u);
  EXPECT_GE(stats.reasons.size(), 15u);
}

// ---------------------------------------------------------------- connect params

ConnectParams client_params() {
  ConnectParams p;
  p.role = Role::client;
  p.credits = 64;
  p.recv_buf_size = 8192;
  return p;
}

ConnectParams server_params() {
  ConnectParams p;
  p.role = Role::server;
  p.credits = 32;
  p.recv_buf_size = 4200;
  p.max_value = 256u << 20;
  p.index_addr = 0xDEADBEEF000ull;
  p.index_rkey = 0x1234;
  p.index_buckets = 1u << 16;
  p.index_bucket_size = 64;
  return p;
}

template <class T>
std::optional<ConnectError> connect_error(const T& data, Role expected) {
  const ConnectDecodeResult r = decode_connect_params(data, expected);
  if (const auto* e = std::get_if<ConnectError>(&r)) return *e;
  return std::nullopt;
}

TEST(ProtoConnect, RoundTrip) {
  for (const ConnectParams& p : {client_params(), server_params()}) {
    EXPECT_FALSE(check_connect_params(p));
    const auto bytes = encode_connect_params(p);
    const ConnectDecodeResult r = decode_connect_params(bytes, p.role);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(r)) << to_string(p.role);
    EXPECT_EQ(std::get<ConnectParams>(r), p);
  }
  ConnectParams no_index = server_params();
  no_index.index_addr = 0;
  no_index.index_rkey = 0;
  no_index.index_buckets = 0;
  no_index.index_bucket_size = 0;
  EXPECT_EQ(std::get<ConnectParams>(
                decode_connect_params(encode_connect_params(no_index), Role::server)),
            no_index);
}

// A client uses a server's index only if its buckets are this build's
// layout: a kvd of the 64-byte layout (before INLINE entries) gets GETs by message.
TEST(ProtoConnect, AnIndexOfAnotherBucketSizeIsNotUsed) {
  ConnectParams p = server_params();
  p.index_bucket_size = static_cast<std::uint32_t>(kBucketSize);
  const auto ix = usable_index(p);
  ASSERT_TRUE(ix.has_value());
  EXPECT_EQ(ix->buckets, p.index_buckets);
  p.index_bucket_size = 64;
  EXPECT_FALSE(usable_index(p).has_value());
}

TEST(ProtoConnect, GoldenBytes) {
  const auto b = encode_connect_params(client_params());
  EXPECT_EQ(b[0], std::byte{0x56});
  EXPECT_EQ(b[1], std::byte{0x4B});
  EXPECT_EQ(b[2], std::byte{kVersion});
  EXPECT_EQ(b[3], std::byte{1});
  EXPECT_EQ(b[4], std::byte{64});
  EXPECT_EQ(b[9], std::byte{0x20});  // 8192 = 0x2000
}

TEST(ProtoConnect, TrailingPaddingIgnored) {
  const auto b = encode_connect_params(client_params());
  Bytes padded(b.begin(), b.end());
  padded.resize(kMaxConnectPrivateData, std::byte{0});
  EXPECT_FALSE(connect_error(padded, Role::client));
  padded.resize(196, std::byte{0x77});
  EXPECT_FALSE(connect_error(padded, Role::client));
}

TEST(ProtoConnect, TooShort) {
  const auto b = encode_connect_params(client_params());
  for (std::size_t len = 0; len < kConnectParamsMinSize; ++len) {
    const Bytes prefix(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_EQ(connect_error(prefix, Role::client), ConnectError::too_short) << len;
  }
}

TEST(ProtoConnect, AuthDigestRoundTripsAndAShortSenderHasNone) {
  ConnectParams p = client_params();
  p.auth = auth_digest("s3cret");
  const auto b = encode_connect_params(p);
  EXPECT_EQ(b.size(), kMaxConnectPrivateData) << "the whole connect private data";
  const auto r = decode_connect_params(b, Role::client);
  ASSERT_TRUE(std::holds_alternative<ConnectParams>(r));
  EXPECT_EQ(std::get<ConnectParams>(r).auth, p.auth);
  for (std::size_t len = kConnectParamsMinSize; len < kConnectParamsSize; ++len) {
    const Bytes prefix(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    const auto short_r = decode_connect_params(prefix, Role::client);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(short_r)) << len;
    EXPECT_FALSE(auth_present(std::get<ConnectParams>(short_r).auth)) << len;
  }
  ConnectParams s = server_params();
  s.auth = auth_digest("x");
  EXPECT_EQ(check_connect_params(s), ConnectError::client_only_field);
  EXPECT_EQ(connect_error(encode_connect_params(s), Role::server), ConnectError::client_only_field);
}

TEST(ProtoAuth, Sha256KnownVectors) {
  auto hex = [](const std::array<std::byte, 32>& d) {
    std::string out;
    static constexpr char kHex[] = "0123456789abcdef";
    for (const std::byte b : d) {
      out += kHex[static_cast<unsigned>(b) >> 4];
      out += kHex[static_cast<unsigned>(b) & 15];
    }
    return out;
  };
  auto of = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  EXPECT_EQ(hex(sha256(of(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(of("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(hex(sha256(of(million))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ProtoAuth, DigestsCompareAndRejectsRoundTrip) {
  const AuthDigest a = auth_digest("token-a");
  EXPECT_TRUE(auth_present(a));
  EXPECT_FALSE(auth_present(AuthDigest{}));
  EXPECT_TRUE(auth_equal(a, auth_digest("token-a")));
  EXPECT_FALSE(auth_equal(a, auth_digest("token-b")));
  EXPECT_FALSE(auth_equal(a, auth_digest("token-a\n")));
  AuthDigest last = a;
  last[kAuthDigestSize - 1] ^= std::byte{1};
  EXPECT_FALSE(auth_equal(a, last));
  for (RejectReason r : {RejectReason::auth_required, RejectReason::auth_failed}) {
    const auto b = encode_reject(r);
    EXPECT_EQ(decode_reject(b), r);
    Bytes padded(b.begin(), b.end());
    padded.resize(148, std::byte{0});
    EXPECT_EQ(decode_reject(padded), r);
  }
  EXPECT_FALSE(decode_reject(Bytes(3, std::byte{0})));
  auto bad = encode_reject(RejectReason::auth_failed);
  bad[3] = std::byte{9};
  EXPECT_FALSE(decode_reject(bad));
  bad = encode_reject(RejectReason::auth_failed);
  bad[0] = std::byte{0};
  EXPECT_FALSE(decode_reject(bad));
}

TEST(ProtoConnect, Rejections) {
  const auto good = encode_connect_params(client_params());
  auto with = [&](std::size_t at, std::uint8_t v) {
    auto b = good;
    b[at] = std::byte{v};
    return b;
  };
  EXPECT_EQ(connect_error(with(0, 0x43), Role::client), ConnectError::bad_magic);
  EXPECT_EQ(connect_error(with(1, 0x00), Role::client), ConnectError::bad_magic);
  EXPECT_EQ(connect_error(with(2, 0), Role::client), ConnectError::bad_version);
  EXPECT_EQ(connect_error(with(2, 2), Role::client), ConnectError::bad_version);
  EXPECT_EQ(connect_error(with(3, 0), Role::client), ConnectError::bad_role);
  EXPECT_EQ(connect_error(with(3, 9), Role::client), ConnectError::bad_role);
  EXPECT_EQ(connect_error(good, Role::server), ConnectError::bad_role);
  EXPECT_EQ(connect_error(with(6, 2), Role::client), ConnectError::unknown_feature);
  EXPECT_EQ(connect_error(with(7, 0x80), Role::client), ConnectError::unknown_feature);
  EXPECT_EQ(connect_error(with(39, 1), Role::client), ConnectError::reserved_nonzero);
  // The grants feature, asked for by a client and done by a server, round-trips.
  for (const Role r : {Role::client, Role::server}) {
    ConnectParams p = r == Role::client ? client_params() : ConnectParams{};
    if (r == Role::server) {
      p.role = Role::server;
      p.credits = 8;
      p.recv_buf_size = kMinRecvBufSize;
    }
    p.features = kFeatureGrants;
    const auto d = decode_connect_params(encode_connect_params(p), r);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(d)) << to_string(r);
    EXPECT_EQ(std::get<ConnectParams>(d), p);
  }
  EXPECT_EQ(connect_error(with(6, 1), Role::client), std::nullopt) << "grants";

  ConnectParams p = client_params();
  p.credits = 0;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client), ConnectError::zero_credits);
  p = client_params();
  p.recv_buf_size = kMinRecvBufSize - 1;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client),
            ConnectError::recv_buf_too_small);
  p.recv_buf_size = kMinRecvBufSize;
  EXPECT_FALSE(connect_error(encode_connect_params(p), Role::client));
  p = client_params();
  p.index_rkey = 5;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client),
            ConnectError::server_only_field);
  p = client_params();
  p.max_value = 5;
  EXPECT_EQ(check_connect_params(p), ConnectError::server_only_field);

  ConnectParams s = server_params();
  s.index_bucket_size = 0;
  EXPECT_EQ(connect_error(encode_connect_params(s), Role::server), ConnectError::bad_index);
  s = server_params();
  s.index_buckets = 0;
  EXPECT_EQ(check_connect_params(s), ConnectError::bad_index);
}

TEST(ProtoConnect, ToString) {
  std::set<std::string_view> seen;
  for (unsigned v = 0; v <= static_cast<unsigned>(ConnectError::bad_index); ++v) {
    EXPECT_TRUE(seen.insert(to_string(static_cast<ConnectError>(v))).second);
  }
  EXPECT_EQ(to_string(Role::server), "server");
}

}  // namespace
// ---------------------------------------------------------------- time to live

TEST(ProtoTtl, SetExpireTtlAndTouchRoundTrip) {
  const Bytes v(10, std::byte{7});
  auto set = msg::set_request(3, "key", v);
  set.ttl = 500;
  const Decoded s = roundtrip(set);
  EXPECT_TRUE(s.m.header.has_ttl());
  EXPECT_EQ(s.m.ttl, 500u);
  EXPECT_EQ(s.m.key, "key");
  EXPECT_EQ(s.m.value.size(), 10u);
  auto set_rdv = msg::set_request_rdv(4, "key", kDesc, 1 << 20);
  set_rdv.ttl = kMaxTtlMs;
  const Decoded r = roundtrip(set_rdv);
  EXPECT_EQ(r.m.ttl, kMaxTtlMs);
  EXPECT_EQ(r.m.rdv, kDesc);
  EXPECT_EQ(r.m.size, kHeaderSize + 3 + kTtlSize + kRdvDescSize);

  const Decoded e = roundtrip(msg::expire_request(5, "key", 0));  // 0: persist
  EXPECT_EQ(e.m.opcode(), Opcode::expire);
  EXPECT_TRUE(e.m.header.has_ttl());
  EXPECT_EQ(e.m.ttl, 0u);
  EXPECT_EQ(roundtrip(msg::ttl_request(6, "key")).m.opcode(), Opcode::ttl);
  const Decoded none = roundtrip(msg::ttl_reply(6, 1, kNoTtl));
  EXPECT_TRUE(none.m.found());
  EXPECT_EQ(none.m.ttl, kNoTtl);
  const Decoded left = roundtrip(msg::ttl_reply(6, 1, 1234));
  EXPECT_EQ(left.m.ttl, 1234u);
  const Decoded missing = roundtrip(msg::ttl_reply(6, 1, std::nullopt));
  EXPECT_FALSE(missing.m.found());
  EXPECT_FALSE(missing.m.header.has_ttl());
  EXPECT_TRUE(roundtrip(msg::expire_reply(5, 1, true)).m.found());

  const Bytes keys{std::byte{1}, std::byte{0}, std::byte{'a'}};
  const Decoded t = roundtrip(msg::touch(7, keys));
  EXPECT_EQ(t.m.opcode(), Opcode::touch);
  EXPECT_EQ(t.m.value.size(), 3u);
  EXPECT_EQ(roundtrip(msg::touch_reply(7, 2)).m.opcode(), Opcode::touch_reply);
}

namespace {
// A message the encoder refuses for `want`: check_message says why, and
// encode() writes nothing.
void expect_refused(const MessageSpec& m, Reason want) {
  Bytes buf(64);
  EXPECT_EQ(check_message(m), want) << to_string(m.opcode);
  EXPECT_EQ(encode(buf, 0, m).status, EncodeStatus::invalid);
}
}  // namespace

TEST(ProtoTtl, TtlFieldRules) {
  auto set = msg::set_request(1, "k", {});
  set.ttl = 0;
  expect_refused(set, Reason::bad_ttl);  // a SET's TTL is > 0 (without one, no flag)
  set.ttl = kMaxTtlMs + 1;
  expect_refused(set, Reason::bad_ttl);
  auto expire = msg::expire_request(1, "k", kMaxTtlMs + 1);
  expect_refused(expire, Reason::bad_ttl);
  expire.ttl.reset();
  expect_refused(expire, Reason::ttl_not_allowed);  // EXPIRE needs its field
  auto get = msg::get_request(1, "k");
  get.ttl = 5;
  expect_refused(get, Reason::ttl_not_allowed);
  auto found = msg::ttl_reply(1, 0, 5);
  found.ttl.reset();
  expect_refused(found, Reason::ttl_not_allowed);  // a found TTL_REPLY needs its field
  auto touch_key = msg::touch(1, {});
  touch_key.key = "k";
  expect_refused(touch_key, Reason::key_not_allowed);
  // On the wire: a flag without its 8 bytes is a truncated message; a forged
  // flag on a GET is refused from the header alone.
  expect_reason(patched(msg::get_request(1, "k"), [](RawHeader& h) { h.flags |= kFlagTtl; }),
                Reason::ttl_not_allowed);
  Bytes cut = encode_one(msg::expire_request(1, "k", 9));
  cut.resize(cut.size() - 1);
  expect_reason(cut, Reason::truncated_payload);
}

// ---------------------------------------------------------------- replication records

TEST(ProtoEpoch, SetDelExpireCarryAShardEpoch) {
  const Bytes v(10, std::byte{7});
  auto set = msg::set_request(3, "key", v);
  set.ttl = 500;
  set.epoch = 42;
  const Decoded s = roundtrip(set);
  EXPECT_TRUE(s.m.header.has_epoch());
  EXPECT_EQ(s.m.epoch, 42u);
  EXPECT_EQ(s.m.ttl, 500u);
  EXPECT_EQ(s.m.value.size(), 10u);
  EXPECT_EQ(s.m.size, kHeaderSize + 3 + kTtlSize + kEpochSize + 10);
  auto set_rdv = msg::set_request_rdv(4, "key", kDesc, 1 << 20);
  set_rdv.epoch = ~std::uint64_t{0};
  const Decoded r = roundtrip(set_rdv);
  EXPECT_EQ(r.m.epoch, ~std::uint64_t{0});
  EXPECT_FALSE(r.m.header.has_ttl());
  EXPECT_EQ(r.m.rdv, kDesc);
  auto del = msg::del_request(5, "key");
  del.epoch = 1;
  EXPECT_EQ(roundtrip(del).m.epoch, 1u);
  auto expire = msg::expire_request(6, "key", 0);
  expire.epoch = 9;
  const Decoded e = roundtrip(expire);
  EXPECT_EQ(e.m.epoch, 9u);
  EXPECT_EQ(e.m.ttl, 0u);
  EXPECT_FALSE(roundtrip(msg::set_request(7, "key", v)).m.header.has_epoch());
}

TEST(ProtoEpoch, EpochFieldRules) {
  auto set = msg::set_request(1, "k", {});
  set.epoch = 0;
  expect_refused(set, Reason::bad_epoch);
  auto get = msg::get_request(1, "k");
  get.epoch = 5;
  expect_refused(get, Reason::epoch_not_allowed);
  auto ttl = msg::ttl_request(1, "k");
  ttl.epoch = 5;
  expect_refused(ttl, Reason::epoch_not_allowed);
  auto reply = msg::set_reply(1, 0);
  reply.epoch = 5;
  expect_refused(reply, Reason::epoch_not_allowed);
  auto call = msg::call_request(1, "\x01\x01", {});
  call.epoch = 5;
  expect_refused(call, Reason::epoch_not_allowed);
  // On the wire: a forged flag on a GET is refused from the header alone; an
  // epoch of 0 or a flag without its 8 bytes once the body is read.
  expect_reason(patched(msg::get_request(1, "k"), [](RawHeader& h) { h.flags |= kFlagEpoch; }),
                Reason::epoch_not_allowed);
  auto del = msg::del_request(1, "k");
  del.epoch = 3;
  Bytes zero = encode_one(del);
  std::fill(zero.begin() + static_cast<std::ptrdiff_t>(kHeaderSize + 1), zero.end(), std::byte{0});
  expect_reason(zero, Reason::bad_epoch);
  Bytes cut = encode_one(del);
  cut.resize(cut.size() - 1);
  expect_reason(cut, Reason::truncated_payload);
}

// BACKUP_READ (--read-from backups): a GET request may carry it, and it
// round-trips; anything else carrying it is refused, from the header alone.
TEST(ProtoBackupRead, OnGetRequestsOnly) {
  auto get = msg::get_request(1, "k");
  get.backup_read = true;
  const Decoded d = roundtrip(get);
  EXPECT_TRUE(d.m.header.backup_read());
  EXPECT_FALSE(roundtrip(msg::get_request(2, "k")).m.header.backup_read());
  auto rdv = msg::get_request_rdv(3, "k", kDesc, 100);
  rdv.backup_read = true;
  EXPECT_TRUE(roundtrip(rdv).m.header.backup_read());
  auto set = msg::set_request(1, "k", {});
  set.backup_read = true;
  expect_refused(set, Reason::backup_read_not_allowed);
  auto ttl = msg::ttl_request(1, "k");
  ttl.backup_read = true;
  expect_refused(ttl, Reason::backup_read_not_allowed);
  auto reply = msg::get_reply_missing(1, 0);
  reply.backup_read = true;
  expect_refused(reply, Reason::backup_read_not_allowed);
  expect_reason(patched(msg::del_request(1, "k"), [](RawHeader& h) { h.flags |= kFlagBackupRead; }),
                Reason::backup_read_not_allowed);
}

// copy_to_string writes a value no longer than the old one over it in place
// and grows by assign otherwise; either way `out` ends up holding exactly
// `src` and the meter counts src.size(), even when src lies inside out.
TEST(ProtoCopy, CopyToStringReplacesInPlaceOrGrows) {
  std::string out = "0123456789abcdef0123456789abcdef";
  const auto before = copied_bytes();
  copy_to_string(out, std::string_view("ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"));  // same size
  EXPECT_EQ(out, "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345");
  copy_to_string(out, std::string_view("short"));  // shorter: in place
  EXPECT_EQ(out, "short");
  EXPECT_EQ(out.size(), 5u);
  copy_to_string(out, std::string_view("a longer value than the one before it"));  // grows
  EXPECT_EQ(out, "a longer value than the one before it");
  copy_to_string(out, std::string_view());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(copied_bytes() - before, 32u + 5u + 37u);
  // src inside out, at an offset: read before it is overwritten or cut.
  out = "xxxxhello worldyyyy";
  copy_to_string(out, std::string_view(out).substr(4, 11));
  EXPECT_EQ(out, "hello world");
  out = "abcdef";
  copy_to_string(out, std::string_view(out).substr(1, 3));
  EXPECT_EQ(out, "bcd");
  out = "abcdef";
  copy_to_string(out, std::string_view(out));
  EXPECT_EQ(out, "abcdef");
}

}  // namespace rkv::proto
