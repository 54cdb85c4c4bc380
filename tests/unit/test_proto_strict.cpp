// Unit tests for src/proto: what the decoder and encoder refuse, and the
// optional fields (time to live, shard epochs, BACKUP_READ) with their rules.

#include "proto_test_util.hpp"

namespace rkv::proto {
namespace {

using namespace rkv::proto::test;  // NOLINT(google-build-using-namespace)

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

}  // namespace
}  // namespace rkv::proto
