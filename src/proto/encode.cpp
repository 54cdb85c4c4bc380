#include "proto/encode.hpp"

#include <limits>

#include "proto/copy.hpp"
#include "proto/endian.hpp"

namespace rkv::proto {

namespace msg {

MessageSpec set_request(std::uint32_t req_id, std::string_view key,
                        std::span<const std::byte> value) noexcept {
  MessageSpec m;
  m.opcode = Opcode::set;
  m.req_id = req_id;
  m.key = key;
  m.value = value;
  return m;
}

MessageSpec set_request_rdv(std::uint32_t req_id, std::string_view key, RdvDesc desc,
                            std::uint64_t value_len) noexcept {
  MessageSpec m = set_request(req_id, key, {});
  m.rdv = desc;
  m.rdv_len = value_len;
  return m;
}

MessageSpec get_request(std::uint32_t req_id, std::string_view key) noexcept {
  MessageSpec m;
  m.opcode = Opcode::get;
  m.req_id = req_id;
  m.key = key;
  return m;
}

MessageSpec get_request_rdv(std::uint32_t req_id, std::string_view key, RdvDesc buf,
                            std::uint64_t buf_len) noexcept {
  MessageSpec m = get_request(req_id, key);
  m.rdv = buf;
  m.rdv_len = buf_len;
  return m;
}

MessageSpec stats_request(std::uint32_t req_id) noexcept {
  MessageSpec m;
  m.opcode = Opcode::stats;
  m.req_id = req_id;
  return m;
}

MessageSpec del_request(std::uint32_t req_id, std::string_view key) noexcept {
  MessageSpec m;
  m.opcode = Opcode::del;
  m.req_id = req_id;
  m.key = key;
  return m;
}

MessageSpec call_request(std::uint32_t req_id, std::string_view op_key, std::span<const std::byte> request) noexcept {
  MessageSpec m;
  m.opcode = Opcode::call;
  m.req_id = req_id;
  m.key = op_key;
  m.value = request;
  return m;
}

MessageSpec call_request_rdv(std::uint32_t req_id, std::string_view op_key, RdvDesc desc,
                             std::uint64_t len) noexcept {
  MessageSpec m = call_request(req_id, op_key, {});
  m.rdv = desc;
  m.rdv_len = len;
  return m;
}

MessageSpec expire_request(std::uint32_t req_id, std::string_view key, std::uint64_t ttl_ms) noexcept {
  MessageSpec m;
  m.opcode = Opcode::expire;
  m.req_id = req_id;
  m.key = key;
  m.ttl = ttl_ms;
  return m;
}

MessageSpec ttl_request(std::uint32_t req_id, std::string_view key) noexcept {
  MessageSpec m;
  m.opcode = Opcode::ttl;
  m.req_id = req_id;
  m.key = key;
  return m;
}

MessageSpec touch(std::uint32_t req_id, std::span<const std::byte> keys) noexcept {
  MessageSpec m;
  m.opcode = Opcode::touch;
  m.req_id = req_id;
  m.value = keys;
  return m;
}

MessageSpec release(std::uint32_t req_id) noexcept {
  MessageSpec m;
  m.opcode = Opcode::release;
  m.req_id = req_id;
  return m;
}

namespace {
MessageSpec reply(Opcode op, std::uint32_t req_id, std::uint16_t credits) noexcept {
  MessageSpec m;
  m.opcode = op;
  m.req_id = req_id;
  m.credits = credits;
  return m;
}
}  // namespace

MessageSpec set_reply(std::uint32_t req_id, std::uint16_t credits, Status status) noexcept {
  MessageSpec m = reply(Opcode::set_reply, req_id, credits);
  m.status = status;
  return m;
}

MessageSpec set_reply_grant(std::uint32_t req_id, std::uint16_t credits, GrantDesc grant,
                            std::uint64_t capacity) noexcept {
  MessageSpec m = reply(Opcode::set_reply, req_id, credits);
  m.grant = grant;
  m.rdv_len = capacity;
  return m;
}

MessageSpec get_reply_found(std::uint32_t req_id, std::uint16_t credits,
                            std::span<const std::byte> value) noexcept {
  MessageSpec m = reply(Opcode::get_reply, req_id, credits);
  m.found = true;
  m.value = value;
  return m;
}

MessageSpec get_reply_pull(std::uint32_t req_id, std::uint16_t credits, RdvDesc desc,
                           std::uint64_t value_len) noexcept {
  MessageSpec m = reply(Opcode::get_reply, req_id, credits);
  m.found = true;
  m.rdv = desc;
  m.rdv_len = value_len;
  m.pull = true;
  return m;
}

MessageSpec get_reply_missing(std::uint32_t req_id, std::uint16_t credits) noexcept {
  return reply(Opcode::get_reply, req_id, credits);
}

MessageSpec stats_reply(std::uint32_t req_id, std::uint16_t credits,
                        std::string_view text) noexcept {
  MessageSpec m = reply(Opcode::stats_reply, req_id, credits);
  m.value = as_bytes(text);
  return m;
}

MessageSpec del_reply(std::uint32_t req_id, std::uint16_t credits, bool found) noexcept {
  MessageSpec m = reply(Opcode::del_reply, req_id, credits);
  m.found = found;
  return m;
}

MessageSpec call_reply(std::uint32_t req_id, std::uint16_t credits, std::span<const std::byte> reply_bytes) noexcept {
  MessageSpec m = reply(Opcode::call_reply, req_id, credits);
  m.value = reply_bytes;
  return m;
}

MessageSpec call_reply_pull(std::uint32_t req_id, std::uint16_t credits, RdvDesc desc, std::uint64_t len) noexcept {
  MessageSpec m = reply(Opcode::call_reply, req_id, credits);
  m.rdv = desc;
  m.rdv_len = len;
  m.pull = true;
  return m;
}

MessageSpec expire_reply(std::uint32_t req_id, std::uint16_t credits, bool found) noexcept {
  MessageSpec m = reply(Opcode::expire_reply, req_id, credits);
  m.found = found;
  return m;
}

MessageSpec touch_reply(std::uint32_t req_id, std::uint16_t credits) noexcept {
  return reply(Opcode::touch_reply, req_id, credits);
}

MessageSpec ttl_reply(std::uint32_t req_id, std::uint16_t credits, std::optional<std::uint64_t> ttl) noexcept {
  MessageSpec m = reply(Opcode::ttl_reply, req_id, credits);
  m.found = ttl.has_value();
  m.ttl = ttl;
  return m;
}

MessageSpec error_reply(Opcode request, std::uint32_t req_id, std::uint16_t credits,
                        Status status) noexcept {
  MessageSpec m = reply(reply_opcode(request), req_id, credits);
  m.status = status;
  return m;
}

}  // namespace msg

std::string_view to_string(EncodeStatus s) noexcept {
  switch (s) {
    case EncodeStatus::ok: return "ok";
    case EncodeStatus::no_space: return "message does not fit in the buffer";
    case EncodeStatus::invalid: return "message breaks a wire rule";
  }
  return "unknown encode status";
}

namespace {

std::uint16_t message_flags(const MessageSpec& m) noexcept {
  std::uint16_t flags = 0;
  if (m.found) flags |= kFlagFound;
  if (m.rdv) flags |= kFlagRdv;
  if (m.pull) flags |= kFlagPull;
  if (m.ttl) flags |= kFlagTtl;
  if (m.epoch) flags |= kFlagEpoch;
  if (m.backup_read) flags |= kFlagBackupRead;
  if (m.grant) flags |= kFlagGrant;
  return flags;
}

// Precondition: m.key.size() fits in u16 (checked by check_message).
RawHeader raw_header_of(const MessageSpec& m) noexcept {
  RawHeader h;
  h.opcode = static_cast<std::uint8_t>(m.opcode);
  h.flags = message_flags(m);
  h.status = static_cast<std::uint16_t>(m.status);
  h.credits = m.credits;
  h.key_len = static_cast<std::uint16_t>(m.key.size());
  h.req_id = m.req_id;
  h.value_len = m.rdv || m.grant ? m.rdv_len : m.value.size();
  return h;
}

// `h` is raw_header_of(m).
void write_message(std::span<std::byte> out, const RawHeader& h, const MessageSpec& m,
                   std::uint64_t* value_account) noexcept {
  write_raw_header(out.first<kHeaderSize>(), h);
  copy_bytes(out.subspan(kHeaderSize, m.key.size()), as_bytes(m.key));
  std::size_t at = kHeaderSize + m.key.size();
  if (m.ttl) {
    store_le(out.subspan(at, kTtlSize), 0, *m.ttl);
    at += kTtlSize;
  }
  if (m.epoch) {
    store_le(out.subspan(at, kEpochSize), 0, *m.epoch);
    at += kEpochSize;
  }
  const auto payload = out.subspan(at);
  if (m.grant) {
    write_grant_desc(payload.first<kGrantDescSize>(), *m.grant);
  } else if (m.rdv) {
    write_rdv_desc(payload.first<kRdvDescSize>(), *m.rdv);
  } else {
    copy_bytes(payload, m.value, value_account);
  }
}

}  // namespace

std::size_t encoded_size(const MessageSpec& m) noexcept {
  return kHeaderSize + m.key.size() + (m.ttl ? kTtlSize : 0) + (m.epoch ? kEpochSize : 0) +
         (m.grant ? kGrantDescSize : m.rdv ? kRdvDescSize : m.value.size());
}

namespace {

// check_message's rules, with m's header built once (encode writes the same one).
std::optional<Reason> check_with_header(const MessageSpec& m, std::optional<RawHeader>& header,
                                        const Limits& limits) noexcept {
  // Guards against the u16 truncation in raw_header_of.
  if (m.key.size() > std::numeric_limits<std::uint16_t>::max()) {
    if (m.opcode == Opcode::call) return Reason::bad_call_op;
    const bool keyed = m.opcode == Opcode::set || m.opcode == Opcode::get || m.opcode == Opcode::del ||
                       m.opcode == Opcode::expire || m.opcode == Opcode::ttl;
    return keyed ? Reason::bad_key_len : Reason::key_not_allowed;
  }
  // Both an eager value and a descriptor would be ambiguous.
  if ((m.rdv || m.grant) && !m.value.empty()) return Reason::value_not_allowed;
  header = raw_header_of(m);
  if (auto r = check_header(*header, limits)) return r;
  if (m.grant && m.grant->id == 0) return Reason::bad_grant;
  if (m.epoch) {
    if (auto r = check_epoch(*m.epoch)) return r;
  }
  return m.ttl ? check_ttl(m.opcode, *m.ttl) : std::nullopt;
}

}  // namespace

std::optional<Reason> check_message(const MessageSpec& m, const Limits& limits) noexcept {
  std::optional<RawHeader> header;
  return check_with_header(m, header, limits);
}

EncodeResult encode(std::span<std::byte> buf, std::size_t offset, const MessageSpec& m, const Limits& limits,
                    std::uint64_t* value_account, Origin origin) noexcept {
#ifdef NDEBUG
  constexpr bool kCheckBuilt = false;
#else
  constexpr bool kCheckBuilt = true;
#endif
  std::optional<RawHeader> header;
  if (origin == Origin::outside || kCheckBuilt) {
    if (check_with_header(m, header, limits)) return {EncodeStatus::invalid, offset};
  } else {
    header = raw_header_of(m);
  }
  const std::size_t size = encoded_size(m);
  if (offset > buf.size() || size > buf.size() - offset) return {EncodeStatus::no_space, offset};
  write_message(buf.subspan(offset, size), *header, m, value_account);
  return {EncodeStatus::ok, offset + size};
}

EncodeStatus Encoder::append(const MessageSpec& m) noexcept {
  const EncodeResult r = encode(buf_, pos_, m, limits_);
  if (r.ok()) pos_ = r.offset;
  return r.status;
}

}  // namespace rkv::proto
