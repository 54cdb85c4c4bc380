#include "proto/wire.hpp"

#include "proto/endian.hpp"

namespace rkv::proto {

std::string_view to_string(Opcode op) noexcept {
  switch (op) {
    case Opcode::set: return "SET";
    case Opcode::get: return "GET";
    case Opcode::stats: return "STATS";
    case Opcode::release: return "RELEASE";
    case Opcode::del: return "DEL";
    case Opcode::call: return "CALL";
    case Opcode::expire: return "EXPIRE";
    case Opcode::ttl: return "TTL";
    case Opcode::touch: return "TOUCH";
    case Opcode::set_reply: return "SET_REPLY";
    case Opcode::get_reply: return "GET_REPLY";
    case Opcode::stats_reply: return "STATS_REPLY";
    case Opcode::del_reply: return "DEL_REPLY";
    case Opcode::call_reply: return "CALL_REPLY";
    case Opcode::expire_reply: return "EXPIRE_REPLY";
    case Opcode::ttl_reply: return "TTL_REPLY";
    case Opcode::touch_reply: return "TOUCH_REPLY";
  }
  return "UNKNOWN_OPCODE";  // only reachable for values forged by a cast
}

std::string_view to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::too_large: return "too large";
    case Status::bad_request: return "bad request";
    case Status::no_memory: return "no memory";
    case Status::internal: return "internal error";
    case Status::remote_access: return "remote access error";
    case Status::io_error: return "I/O error";
    case Status::no_handler: return "no handler for this operation";
    case Status::handler_failed: return "the operation's handler failed";
    case Status::refused: return "refused by the operation's handler";
    case Status::not_owner: return "the key's shard is not this server's";
    case Status::moved: return "the key's shard moved before the write was replicated";
  }
  return "unknown status";
}

// Exhaustive switches: adding an enumerator without updating these is a -Wswitch error.
RawHeader read_raw_header(std::span<const std::byte, kHeaderSize> in) noexcept {
  RawHeader h;
  h.magic = load_le<std::uint16_t>(in, hdr_off::magic);
  h.version = load_le<std::uint8_t>(in, hdr_off::version);
  h.opcode = load_le<std::uint8_t>(in, hdr_off::opcode);
  h.flags = load_le<std::uint16_t>(in, hdr_off::flags);
  h.status = load_le<std::uint16_t>(in, hdr_off::status);
  h.credits = load_le<std::uint16_t>(in, hdr_off::credits);
  h.key_len = load_le<std::uint16_t>(in, hdr_off::key_len);
  h.req_id = load_le<std::uint32_t>(in, hdr_off::req_id);
  h.value_len = load_le<std::uint64_t>(in, hdr_off::value_len);
  return h;
}

void write_raw_header(std::span<std::byte, kHeaderSize> out, const RawHeader& h) noexcept {
  store_le(out, hdr_off::magic, h.magic);
  store_le(out, hdr_off::version, h.version);
  store_le(out, hdr_off::opcode, h.opcode);
  store_le(out, hdr_off::flags, h.flags);
  store_le(out, hdr_off::status, h.status);
  store_le(out, hdr_off::credits, h.credits);
  store_le(out, hdr_off::key_len, h.key_len);
  store_le(out, hdr_off::req_id, h.req_id);
  store_le(out, hdr_off::value_len, h.value_len);
}

RawHeader to_raw(const Header& h) noexcept {
  RawHeader r;
  r.opcode = static_cast<std::uint8_t>(h.opcode);
  r.flags = h.flags;
  r.status = static_cast<std::uint16_t>(h.status);
  r.credits = h.credits;
  r.key_len = h.key_len;
  r.req_id = h.req_id;
  r.value_len = h.value_len;
  return r;
}

void write_rdv_desc(std::span<std::byte, kRdvDescSize> out, const RdvDesc& d) noexcept {
  store_le(out, rdv_off::addr, d.addr);
  store_le(out, rdv_off::rkey, d.rkey);
  store_le(out, rdv_off::value_crc, d.value_crc);
}

void write_grant_desc(std::span<std::byte, kGrantDescSize> out, const GrantDesc& d) noexcept {
  store_le(out, grant_off::addr, d.addr);
  store_le(out, grant_off::rkey, d.rkey);
  store_le(out, grant_off::id, d.id);
}

}  // namespace rkv::proto
