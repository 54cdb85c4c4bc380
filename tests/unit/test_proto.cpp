// Unit tests for src/proto: wire constants, round trips, packing, the
// encoder, boundaries and truncation. Strictness: test_proto_strict.cpp;
// fuzzing: test_proto_fuzz.cpp; connection parameters: test_proto_connect.cpp.

#include "proto_test_util.hpp"

namespace rkv::proto {
namespace {

using namespace rkv::proto::test;  // NOLINT(google-build-using-namespace)

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

}  // namespace
}  // namespace rkv::proto
