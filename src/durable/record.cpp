// Record format: see record.hpp.
#include "durable/record.hpp"

#include "proto/crc32c.hpp"
#include "proto/endian.hpp"

namespace rkv::durable {

using proto::load_le;
using proto::store_le;

std::uint32_t body_crc(std::span<const std::byte> key, std::span<const std::byte> value) noexcept {
  return proto::crc32c_extend(proto::crc32c(key), value.data(), value.size());
}

void encode_header(std::span<std::byte> out, const RecordHeader& h) noexcept {
  store_le<std::uint32_t>(out, 0, kRecordMagic);
  out[4] = static_cast<std::byte>(h.type);
  out[5] = std::byte{0};
  store_le<std::uint16_t>(out, 6, h.key_len);
  store_le<std::uint64_t>(out, 8, h.seq);
  store_le<std::uint64_t>(out, 16, h.value_len);
  store_le<std::uint32_t>(out, 24, h.body_crc);
  store_le<std::uint32_t>(out, 28, proto::crc32c(out.first(28)));
}

std::array<std::byte, kSnapshotEndSize> snapshot_end_record(std::uint64_t count, std::uint64_t seq) noexcept {
  std::array<std::byte, kSnapshotEndSize> out{};
  const auto body = std::span(out).subspan(kHeaderSize);
  store_le<std::uint64_t>(body, 0, count);
  RecordHeader h;
  h.type = RecordType::snapshot_end;
  h.seq = seq;
  h.value_len = 8;
  h.body_crc = body_crc({}, body);
  encode_header(out, h);
  return out;
}

std::array<std::byte, kExpireAtSize> expire_bytes(std::int64_t expire_at) noexcept {
  std::array<std::byte, kExpireAtSize> out{};
  store_le<std::uint64_t>(out, 0, static_cast<std::uint64_t>(expire_at));
  return out;
}

std::int64_t load_expire_at(std::span<const std::byte> in) noexcept {
  return static_cast<std::int64_t>(load_le<std::uint64_t>(in, 0));
}

RecordHeader set_header(std::span<const std::byte> key, std::span<const std::byte> value, std::uint64_t seq,
                        std::int64_t expire_at) noexcept {
  RecordHeader h;
  h.type = expire_at != 0 ? RecordType::set_ttl : RecordType::set;
  h.key_len = static_cast<std::uint16_t>(key.size());
  h.seq = seq;
  h.value_len = value.size();
  if (expire_at != 0) {
    const auto at = expire_bytes(expire_at);
    h.body_crc = proto::crc32c_extend(body_crc(key, at), value.data(), value.size());
  } else {
    h.body_crc = body_crc(key, value);
  }
  return h;
}

RecordHeader expire_header(std::span<const std::byte> key, std::int64_t expire_at, std::uint64_t seq) noexcept {
  RecordHeader h;
  h.type = RecordType::expire;
  h.key_len = static_cast<std::uint16_t>(key.size());
  h.seq = seq;
  h.value_len = kExpireAtSize;
  h.body_crc = body_crc(key, expire_bytes(expire_at));
  return h;
}

RecordHeader del_header(std::span<const std::byte> key, std::uint64_t seq) noexcept {
  RecordHeader h;
  h.type = RecordType::del;
  h.key_len = static_cast<std::uint16_t>(key.size());
  h.seq = seq;
  h.value_len = 0;
  h.body_crc = body_crc(key, {});
  return h;
}

std::variant<RecordHeader, HeaderError> decode_header(std::span<const std::byte> in, std::uint64_t max_value) noexcept {
  if (in.size() < kHeaderSize) return HeaderError::short_header;
  if (load_le<std::uint32_t>(in, 0) != kRecordMagic) return HeaderError::bad_magic;
  if (load_le<std::uint32_t>(in, 28) != proto::crc32c(in.first(28))) return HeaderError::bad_header_crc;
  RecordHeader h;
  const auto type = static_cast<std::uint8_t>(in[4]);
  h.key_len = load_le<std::uint16_t>(in, 6);
  h.seq = load_le<std::uint64_t>(in, 8);
  h.value_len = load_le<std::uint64_t>(in, 16);
  h.body_crc = load_le<std::uint32_t>(in, 24);
  if (in[5] != std::byte{0}) return HeaderError::bad_field;
  if (type == static_cast<std::uint8_t>(RecordType::set) || type == static_cast<std::uint8_t>(RecordType::set_ttl)) {
    h.type = static_cast<RecordType>(type);
    if (h.key_len == 0 || h.key_len > kMaxKeyLen || h.value_len > max_value) return HeaderError::bad_field;
  } else if (type == static_cast<std::uint8_t>(RecordType::expire)) {
    h.type = RecordType::expire;
    if (h.key_len == 0 || h.key_len > kMaxKeyLen || h.value_len != kExpireAtSize) return HeaderError::bad_field;
  } else if (type == static_cast<std::uint8_t>(RecordType::del)) {
    h.type = RecordType::del;
    if (h.key_len == 0 || h.key_len > kMaxKeyLen || h.value_len != 0) return HeaderError::bad_field;
  } else if (type == static_cast<std::uint8_t>(RecordType::snapshot_end)) {
    h.type = RecordType::snapshot_end;
    if (h.key_len != 0 || h.value_len != 8) return HeaderError::bad_field;
  } else {
    return HeaderError::bad_field;
  }
  return h;
}

}  // namespace rkv::durable
