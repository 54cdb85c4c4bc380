#include "proto/decode.hpp"

#include "proto/endian.hpp"

namespace rkv::proto {

DecodeResult Decoder::next() noexcept {
  if (error_) return *error_;
  const std::size_t rest = buf_.size() - pos_;
  if (rest == 0) return EndOfBuffer{};
  if (rest < kHeaderSize) return fail(Reason::truncated_header);
  const RawHeader raw = read_raw_header(buf_.subspan(pos_).first<kHeaderSize>());
  if (auto r = check_header(raw, limits_)) return fail(*r);
  return decode_body(raw);
}

DecodeResult Decoder::fail(Reason r) noexcept {
  error_ = DecodeError{r, pos_};
  return *error_;
}

// Header is valid; bound every length against what is left before reading it.
DecodeResult Decoder::decode_body(const RawHeader& raw) noexcept {
  MessageView m;
  m.header = to_header(raw);
  m.offset = pos_;
  std::size_t p = pos_ + kHeaderSize;

  if (raw.key_len > buf_.size() - p) return fail(Reason::truncated_payload);
  if (raw.key_len != 0) m.key = as_string_view(buf_.subspan(p, raw.key_len));
  p += raw.key_len;

  if (m.header.has_ttl()) {
    if (buf_.size() - p < kTtlSize) return fail(Reason::truncated_payload);
    m.ttl = load_le<std::uint64_t>(buf_.subspan(p, kTtlSize), 0);
    if (auto r = check_ttl(m.header.opcode, m.ttl)) return fail(*r);
    p += kTtlSize;
  }
  if (m.header.has_epoch()) {
    if (buf_.size() - p < kEpochSize) return fail(Reason::truncated_payload);
    m.epoch = load_le<std::uint64_t>(buf_.subspan(p, kEpochSize), 0);
    if (auto r = check_epoch(m.epoch)) return fail(*r);
    p += kEpochSize;
  }

  const std::size_t avail = buf_.size() - p;
  if (m.header.grant()) {
    if (avail < kGrantDescSize) return fail(Reason::truncated_payload);
    const auto desc = buf_.subspan(p, kGrantDescSize);
    m.grant = GrantDesc{load_le<std::uint64_t>(desc, grant_off::addr), load_le<std::uint32_t>(desc, grant_off::rkey),
                        load_le<std::uint32_t>(desc, grant_off::id)};
    if (m.grant->id == 0) return fail(Reason::bad_grant);
    p += kGrantDescSize;
  } else if (m.header.rdv()) {
    if (avail < kRdvDescSize) return fail(Reason::truncated_payload);
    const auto desc = buf_.subspan(p, kRdvDescSize);
    const auto crc = load_le<std::uint32_t>(desc, rdv_off::value_crc);
    if (crc != 0 && m.header.opcode != Opcode::set) return fail(Reason::rdv_reserved_nonzero);
    m.rdv = RdvDesc{load_le<std::uint64_t>(desc, rdv_off::addr), load_le<std::uint32_t>(desc, rdv_off::rkey), crc};
    p += kRdvDescSize;
  } else {
    // value_len is an untrusted u64: compare before narrowing.
    if (raw.value_len > static_cast<std::uint64_t>(avail)) return fail(Reason::truncated_payload);
    const auto len = static_cast<std::size_t>(raw.value_len);
    if (len != 0) m.value = buf_.subspan(p, len);
    p += len;
  }

  m.size = p - pos_;
  pos_ = p;
  return m;
}

MessageView view_validated(std::span<const std::byte> buf, std::size_t offset) noexcept {
  const RawHeader raw = read_raw_header(buf.subspan(offset).first<kHeaderSize>());
  MessageView m;
  m.header = to_header(raw);
  m.offset = offset;
  std::size_t p = offset + kHeaderSize;
  if (raw.key_len != 0) m.key = as_string_view(buf.subspan(p, raw.key_len));
  p += raw.key_len;
  if (m.header.has_ttl()) {
    m.ttl = load_le<std::uint64_t>(buf.subspan(p, kTtlSize), 0);
    p += kTtlSize;
  }
  if (m.header.has_epoch()) {
    m.epoch = load_le<std::uint64_t>(buf.subspan(p, kEpochSize), 0);
    p += kEpochSize;
  }
  if (m.header.grant()) {
    const auto desc = buf.subspan(p, kGrantDescSize);
    m.grant = GrantDesc{load_le<std::uint64_t>(desc, grant_off::addr), load_le<std::uint32_t>(desc, grant_off::rkey),
                        load_le<std::uint32_t>(desc, grant_off::id)};
    p += kGrantDescSize;
  } else if (m.header.rdv()) {
    const auto desc = buf.subspan(p, kRdvDescSize);
    m.rdv = RdvDesc{load_le<std::uint64_t>(desc, rdv_off::addr), load_le<std::uint32_t>(desc, rdv_off::rkey),
                    load_le<std::uint32_t>(desc, rdv_off::value_crc)};
    p += kRdvDescSize;
  } else {
    const auto len = static_cast<std::size_t>(raw.value_len);
    if (len != 0) m.value = buf.subspan(p, len);
    p += len;
  }
  m.size = p - offset;
  return m;
}

}  // namespace rkv::proto
