// Unit tests for the grant path's wire pieces (docs/protocol.md "SET by
// grant"): an ok SET_REPLY carrying a grant descriptor (wire.hpp kFlagGrant)
// and the trailer of a SET written into a grant (proto/grant.hpp).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

#include "proto/decode.hpp"
#include "proto/encode.hpp"
#include "proto/endian.hpp"
#include "proto/grant.hpp"

namespace rkv::proto::grant_test {
namespace {

using Bytes = std::vector<std::byte>;
constexpr GrantDesc kGrant{0x1122334455667788ull, 0xA1B2C3D4u, 9};

Bytes encode_one(const MessageSpec& m) {
  Bytes buf(encoded_size(m));
  const EncodeResult r = encode(buf, 0, m);
  EXPECT_TRUE(r.ok()) << to_string(r.status);
  return buf;
}

std::variant<MessageView, EndOfBuffer, DecodeError> decode_first(std::span<const std::byte> buf) {
  Decoder d(buf);
  return d.next();
}

Reason decode_reason(std::span<const std::byte> buf) {
  const auto r = decode_first(buf);
  EXPECT_TRUE(std::holds_alternative<DecodeError>(r));
  return std::holds_alternative<DecodeError>(r) ? std::get<DecodeError>(r).reason : Reason::truncated_header;
}

void expect_refused(const MessageSpec& m, Reason want) {
  Bytes buf(128);
  EXPECT_EQ(check_message(m), want) << to_string(m.opcode);
  EXPECT_EQ(encode(buf, 0, m).status, EncodeStatus::invalid);
}

TEST(ProtoGrant, AnOkSetReplyCarriesAGrant) {
  const Bytes buf = encode_one(msg::set_reply_grant(7, 3, kGrant, 65536));
  ASSERT_EQ(buf.size(), kHeaderSize + kGrantDescSize);
  // Golden: the flag, the capacity as value_len, then {addr, rkey, id}.
  EXPECT_EQ(load_le<std::uint16_t>(buf, hdr_off::flags), kFlagGrant);
  EXPECT_EQ(load_le<std::uint64_t>(buf, hdr_off::value_len), 65536u);
  EXPECT_EQ(load_le<std::uint64_t>(buf, kHeaderSize + grant_off::addr), kGrant.addr);
  EXPECT_EQ(load_le<std::uint32_t>(buf, kHeaderSize + grant_off::rkey), kGrant.rkey);
  EXPECT_EQ(load_le<std::uint32_t>(buf, kHeaderSize + grant_off::id), 9u);
  const auto r = decode_first(buf);
  ASSERT_TRUE(std::holds_alternative<MessageView>(r));
  const MessageView& m = std::get<MessageView>(r);
  EXPECT_TRUE(m.header.grant());
  EXPECT_EQ(m.header.status, Status::ok);
  EXPECT_EQ(m.header.credits, 3u);
  ASSERT_TRUE(m.grant);
  EXPECT_EQ(*m.grant, kGrant);
  EXPECT_EQ(m.header.value_len, 65536u);
  EXPECT_FALSE(m.rdv);
  EXPECT_TRUE(m.value.empty());
  EXPECT_EQ(m.size, buf.size());
  const MessageView again = view_validated(buf, 0);
  ASSERT_TRUE(again.grant);
  EXPECT_EQ(*again.grant, kGrant);
  EXPECT_EQ(again.size, m.size);
  // A plain SET_REPLY has none.
  const Bytes plain = encode_one(msg::set_reply(7, 3));
  EXPECT_FALSE(std::get<MessageView>(decode_first(plain)).grant);
}

TEST(ProtoGrant, AGrantIsRefusedAnywhereElse) {
  MessageSpec on_get = msg::get_reply_missing(1, 0);
  on_get.grant = kGrant;
  on_get.rdv_len = 4096;
  expect_refused(on_get, Reason::grant_not_allowed);
  MessageSpec on_set = msg::set_request(1, "k", {});
  on_set.grant = kGrant;
  on_set.rdv_len = 4096;
  expect_refused(on_set, Reason::grant_not_allowed);
  MessageSpec with_rdv = msg::set_reply_grant(1, 0, kGrant, 4096);
  with_rdv.rdv = RdvDesc{1, 2, 0};
  expect_refused(with_rdv, Reason::rdv_not_allowed);
  MessageSpec pull_and_grant = msg::get_reply_pull(1, 0, RdvDesc{1, 2, 0}, 4096);
  pull_and_grant.grant = kGrant;
  expect_refused(pull_and_grant, Reason::grant_not_allowed);
  MessageSpec on_error = msg::set_reply_grant(1, 0, kGrant, 4096);
  on_error.status = Status::no_memory;
  expect_refused(on_error, Reason::payload_on_error);
  expect_refused(msg::set_reply_grant(1, 0, kGrant, 0), Reason::bad_grant);
  expect_refused(msg::set_reply_grant(1, 0, GrantDesc{1, 2, 0}, 4096), Reason::bad_grant);
  Limits small;
  small.max_value = 1024;
  EXPECT_EQ(check_message(msg::set_reply_grant(1, 0, kGrant, 4096), small), Reason::value_too_large);

  // The same, forged on the wire.
  Bytes buf = encode_one(msg::set_reply_grant(1, 0, kGrant, 4096));
  Bytes cut(buf.begin(), buf.end() - 1);
  EXPECT_EQ(decode_reason(cut), Reason::truncated_payload);
  Bytes zero_id = buf;
  store_le(std::span<std::byte>(zero_id), kHeaderSize + grant_off::id, std::uint32_t{0});
  EXPECT_EQ(decode_reason(zero_id), Reason::bad_grant);
  Bytes on_del_reply = buf;
  on_del_reply[hdr_off::opcode] = static_cast<std::byte>(Opcode::del_reply);
  EXPECT_EQ(decode_reason(on_del_reply), Reason::grant_not_allowed);
}

// value | key | trailer, as a client writes it into a grant.
Bytes granted(const GrantedSet& s) {
  Bytes out(granted_set_size(s.key.size(), s.value.size()));
  std::copy(s.value.begin(), s.value.end(), out.begin());
  const auto key = as_bytes(s.key);
  std::copy(key.begin(), key.end(), out.begin() + static_cast<std::ptrdiff_t>(s.value.size()));
  write_grant_trailer(std::span<std::byte>(out).last<kGrantTrailerSize>(), s);
  return out;
}

TEST(ProtoGrant, AGrantedSetReadsBackFromWhatWasWritten) {
  const Bytes value(5000, std::byte{0x5A});
  GrantedSet s;
  s.req_id = 0xDEADBEEF;
  s.key = "user:42";
  s.value = value;
  s.value_crc = 0x12345678;
  s.ttl = 60000;
  const Bytes w = granted(s);
  ASSERT_EQ(w.size(), 5000u + 7 + kGrantTrailerSize);
  EXPECT_FALSE(check_granted_set(s, 8192).has_value());
  EXPECT_EQ(check_granted_set(s, w.size() - 1), Reason::truncated_payload) << "does not fit the grant";
  const auto r = read_granted_set(w);
  ASSERT_TRUE(std::holds_alternative<GrantedSet>(r)) << to_string(std::get<Reason>(r));
  const GrantedSet& back = std::get<GrantedSet>(r);
  EXPECT_EQ(back.req_id, s.req_id);
  EXPECT_EQ(back.key, "user:42");
  EXPECT_EQ(back.value.data(), w.data()) << "the value at the grant's start";
  EXPECT_EQ(back.value.size(), 5000u);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(back.key.data()), w.data() + 5000) << "the key right after it";
  EXPECT_EQ(back.value_crc, s.value_crc);
  EXPECT_EQ(back.ttl, s.ttl);
  EXPECT_FALSE(back.epoch);

  GrantedSet record = s;  // a replication record: epoch, no TTL; an empty value
  record.ttl.reset();
  record.epoch = 12;
  record.value = {};
  const auto rr = read_granted_set(granted(record));
  ASSERT_TRUE(std::holds_alternative<GrantedSet>(rr));
  EXPECT_EQ(std::get<GrantedSet>(rr).epoch, 12u);
  EXPECT_FALSE(std::get<GrantedSet>(rr).ttl);
  EXPECT_TRUE(std::get<GrantedSet>(rr).value.empty());
}

TEST(ProtoGrant, AMalformedTrailerIsRefused) {
  const Bytes value(100, std::byte{1});
  GrantedSet s;
  s.req_id = 1;
  s.key = "k";
  s.value = value;
  const Bytes good = granted(s);
  ASSERT_TRUE(std::holds_alternative<GrantedSet>(read_granted_set(good)));
  const auto reason = [](const Bytes& w, const Limits& limits = {}) {
    const auto r = read_granted_set(w, limits);
    EXPECT_TRUE(std::holds_alternative<Reason>(r));
    return std::holds_alternative<Reason>(r) ? std::get<Reason>(r) : Reason::truncated_header;
  };
  const std::size_t t = good.size() - kGrantTrailerSize;
  const auto with = [&](std::size_t off, auto v) {
    Bytes w = good;
    store_le(std::span<std::byte>(w), t + off, v);
    return w;
  };
  EXPECT_EQ(reason(Bytes(kGrantTrailerSize - 1)), Reason::truncated_payload);
  EXPECT_EQ(reason(with(trailer_off::key_len, std::uint16_t{102})), Reason::truncated_payload);
  EXPECT_EQ(reason(with(trailer_off::key_len, std::uint16_t{0})), Reason::bad_key_len);
  EXPECT_EQ(reason(with(trailer_off::flags, kFlagFound)), Reason::bad_grant_trailer);
  EXPECT_EQ(reason(with(trailer_off::reserved, std::uint32_t{1})), Reason::bad_grant_trailer);
  EXPECT_EQ(reason(with(trailer_off::ttl, std::uint64_t{5})), Reason::bad_grant_trailer) << "a TTL without its flag";
  EXPECT_EQ(reason(with(trailer_off::epoch, std::uint64_t{5})), Reason::bad_grant_trailer);
  EXPECT_EQ(reason(with(trailer_off::flags, kFlagTtl)), Reason::bad_ttl) << "TTL 0";
  EXPECT_EQ(reason(with(trailer_off::flags, kFlagEpoch)), Reason::bad_epoch);
  Limits small;
  small.max_value = 99;
  EXPECT_EQ(reason(good, small), Reason::value_too_large);
  small = {};
  small.max_key = 0;  // clamps nothing below 1: every key is too long
  EXPECT_EQ(reason(good, small), Reason::bad_key_len);
  GrantedSet zero_ttl = s;
  zero_ttl.ttl = 0;
  EXPECT_EQ(check_granted_set(zero_ttl, 4096), Reason::bad_ttl);
}

}  // namespace
}  // namespace rkv::proto::grant_test
