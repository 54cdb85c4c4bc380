#include "proto/validate.hpp"

#include <algorithm>
#include <array>

namespace rkv::proto {

std::string_view to_string(Reason r) noexcept {
  switch (r) {
    case Reason::truncated_header: return "truncated header (fewer than 24 bytes left)";
    case Reason::bad_magic: return "bad magic";
    case Reason::bad_version: return "unsupported protocol version";
    case Reason::unknown_opcode: return "unknown opcode";
    case Reason::reserved_flags: return "reserved flag bits set";
    case Reason::status_in_request: return "nonzero status in a request";
    case Reason::credits_in_request: return "nonzero credits in a request";
    case Reason::unknown_status: return "unknown reply status";
    case Reason::payload_on_error: return "error reply carries flags or a value";
    case Reason::found_not_allowed: return "FOUND flag on a message other than GET_REPLY or DEL_REPLY";
    case Reason::rdv_not_allowed: return "RDV flag not allowed on this message";
    case Reason::bad_key_len: return "key length zero or above the limit";
    case Reason::key_not_allowed: return "key on a message that takes none";
    case Reason::value_not_allowed: return "value on a message that takes none";
    case Reason::value_too_large: return "value length above the limit";
    case Reason::eager_too_large: return "eager key + value not below the eager limit";
    case Reason::truncated_payload: return "key, value or descriptor runs past the buffer";
    case Reason::rdv_reserved_nonzero: return "rendezvous descriptor value_crc not zero outside a SET request";
    case Reason::pull_not_allowed: return "PULL flag without a GET_REPLY carrying RDV and FOUND or a CALL_REPLY carrying RDV";
    case Reason::bad_call_op: return "CALL key is not the 2-byte user opcode";
    case Reason::rdv_without_pull: return "GET_REPLY or CALL_REPLY with RDV but without PULL";
    case Reason::ttl_not_allowed: return "TTL flag refused on this message, or missing on EXPIRE or a found TTL_REPLY";
    case Reason::bad_ttl: return "TTL field out of range (0 on a SET, or above the largest TTL)";
    case Reason::epoch_not_allowed: return "EPOCH flag on a message other than a SET, DEL or EXPIRE request";
    case Reason::bad_epoch: return "epoch field 0";
    case Reason::backup_read_not_allowed: return "BACKUP_READ flag on a message other than a GET request";
    case Reason::grant_not_allowed: return "GRANT flag on a message other than an ok SET_REPLY, or with RDV";
    case Reason::bad_grant: return "grant with capacity or id 0";
    case Reason::bad_grant_trailer: return "granted SET trailer with reserved bits set or an unused field not 0";
  }
  return "unknown reason";
}

namespace {

// Whether the TTL field (kFlagTtl) may, or must, follow the key.
enum class TtlRule : std::uint8_t { refused, optional, required };

// What each opcode may carry.
struct OpRules {
  bool key;    // SET/GET/DEL/EXPIRE/TTL need 1..max_key key bytes; others none
  bool value;  // eager value bytes allowed
  bool rdv;    // RDV descriptor allowed
  bool found;  // FOUND flag allowed
  bool pull;   // PULL allowed (with RDV; a GET_REPLY also needs FOUND)
  TtlRule ttl = TtlRule::refused;
  bool epoch = false;  // the EPOCH flag (a replication record) allowed
  bool backup_read = false;  // the BACKUP_READ flag allowed
  bool grant = false;  // the GRANT flag (a grant descriptor as payload) allowed
};

constexpr OpRules rules_for(Opcode op, bool found) noexcept {
  switch (op) {
    case Opcode::set: return {true, true, true, false, false, TtlRule::optional, true};
    case Opcode::get: return {true, false, true, false, false, TtlRule::refused, false, true};  // RDV = offered buffer
    case Opcode::del: return {true, false, false, false, false, TtlRule::refused, true};  // the key only
    case Opcode::call: return {true, true, true, false, false};   // key = user opcode; request bytes as a SET's value
    case Opcode::expire: return {true, false, false, false, false, TtlRule::required, true};  // key + TTL (0: persist)
    case Opcode::ttl: return {true, false, false, false, false};  // the key only
    case Opcode::touch: return {false, true, false, false, false};  // the keys, packed in the eager payload
    case Opcode::stats:    // header only
    case Opcode::release: return {false, false, false, false, false};  // header only; req_id names the pinned GET or CALL
    // Header only, or a grant of landing space for the next SET.
    case Opcode::set_reply: return {false, false, false, false, false, TtlRule::refused, false, false, true};
    // A miss carries nothing; a hit carries the value eagerly or by descriptor.
    case Opcode::get_reply: return {false, found, found, true, true};
    case Opcode::stats_reply: return {false, true, false, false, false};
    case Opcode::del_reply: return {false, false, false, true, false};  // FOUND: the key was removed
    case Opcode::call_reply: return {false, true, true, false, true};  // reply bytes, eager or pulled
    case Opcode::expire_reply: return {false, false, false, true, false};  // FOUND: the key exists
    // FOUND: the key exists and the TTL field says for how long.
    case Opcode::ttl_reply: return {false, false, false, true, false, found ? TtlRule::required : TtlRule::refused};
    case Opcode::touch_reply: return {false, false, false, false, false};  // header only
  }
  return {false, false, false, false, false};
}

// The flag rules of `op` for one combination of the known flags (the
// decoder looks the verdict up: flag_verdicts below).
constexpr std::optional<Reason> flags_reason(Opcode op, std::uint16_t flags, const OpRules& rules) noexcept {
  if ((flags & kFlagFound) != 0 && !rules.found) return Reason::found_not_allowed;
  if ((flags & kFlagRdv) != 0 && !rules.rdv) return Reason::rdv_not_allowed;
  const std::uint16_t pull_needs = op == Opcode::get_reply ? (kFlagRdv | kFlagFound) : kFlagRdv;
  if ((flags & kFlagPull) != 0 && (!rules.pull || (flags & pull_needs) != pull_needs)) {
    return Reason::pull_not_allowed;
  }
  if ((op == Opcode::get_reply || op == Opcode::call_reply) && (flags & kFlagRdv) != 0 && (flags & kFlagPull) == 0) {
    return Reason::rdv_without_pull;
  }
  const bool ttl = (flags & kFlagTtl) != 0;
  if ((ttl && rules.ttl == TtlRule::refused) || (!ttl && rules.ttl == TtlRule::required)) {
    return Reason::ttl_not_allowed;
  }
  if ((flags & kFlagEpoch) != 0 && !rules.epoch) return Reason::epoch_not_allowed;
  if ((flags & kFlagBackupRead) != 0 && !rules.backup_read) return Reason::backup_read_not_allowed;
  if ((flags & kFlagGrant) != 0 && (!rules.grant || (flags & kFlagRdv) != 0)) return Reason::grant_not_allowed;
  return std::nullopt;
}

// rules_for() per wire opcode byte and FOUND flag, looked up instead of
// decided per message (check_header runs for every message sent and received).
// Every combination of the known flags has its verdict (0: allowed, else
// the Reason + 1), so a message's flags cost one lookup.
inline constexpr std::size_t kFlagCombos = kKnownFlags + 1;
static_assert((kKnownFlags & (kKnownFlags + 1)) == 0, "the known flags are the low bits");
struct OpEntry {
  bool known = false;
  Opcode op = Opcode::set;
  OpRules rules[2] = {};  // [found]
  std::array<std::uint8_t, kFlagCombos> flag_verdicts{};
};
constexpr std::array<OpEntry, 256> make_op_table() noexcept {
  std::array<OpEntry, 256> t{};
  for (std::size_t v = 0; v < t.size(); ++v) {
    const auto op = opcode_from_wire(static_cast<std::uint8_t>(v));
    if (!op) continue;
    t[v] = {true, *op, {rules_for(*op, false), rules_for(*op, true)}, {}};
    for (std::size_t f = 0; f < kFlagCombos; ++f) {
      const auto flags = static_cast<std::uint16_t>(f);
      const auto r = flags_reason(*op, flags, t[v].rules[(flags & kFlagFound) != 0 ? 1 : 0]);
      t[v].flag_verdicts[f] = r ? static_cast<std::uint8_t>(static_cast<unsigned>(*r) + 1) : 0;
    }
  }
  return t;
}
constexpr std::array<OpEntry, 256> kOps = make_op_table();

std::optional<Reason> check_request_fields(const RawHeader& h) noexcept {
  if (h.status != 0) return Reason::status_in_request;
  if (h.credits != 0) return Reason::credits_in_request;
  return std::nullopt;
}

std::optional<Reason> check_reply_fields(const RawHeader& h) noexcept {
  const auto status = status_from_wire(h.status);
  if (!status) return Reason::unknown_status;
  // Errors are bare so a client never mistakes a partial result for data.
  if (*status != Status::ok && (h.flags != 0 || h.value_len != 0)) return Reason::payload_on_error;
  return std::nullopt;
}

std::optional<Reason> check_key(const RawHeader& h, const OpRules& rules,
                                const Limits& limits) noexcept {
  if (!rules.key) return h.key_len == 0 ? std::nullopt : std::optional{Reason::key_not_allowed};
  const std::size_t max_key = std::min(limits.max_key, kMaxKey);
  if (h.key_len == 0 || h.key_len > max_key) return Reason::bad_key_len;
  return std::nullopt;
}

// A CALL's key is its user opcode: exactly kCallOpSize bytes.
std::optional<Reason> check_call_key(Opcode op, const RawHeader& h) noexcept {
  if (op == Opcode::call && h.key_len != kCallOpSize) return Reason::bad_call_op;
  return std::nullopt;
}

std::optional<Reason> check_value(Opcode op, const RawHeader& h, const OpRules& rules,
                                  const Limits& limits) noexcept {
  const bool rdv = (h.flags & kFlagRdv) != 0;
  const bool grant = (h.flags & kFlagGrant) != 0;
  if (grant && h.value_len == 0) return Reason::bad_grant;
  if (!rdv && !grant && !rules.value && h.value_len != 0) return Reason::value_not_allowed;
  if ((op == Opcode::set || op == Opcode::call || op == Opcode::touch) && !rdv && !eager_fits(h.key_len, h.value_len))
    return Reason::eager_too_large;
  if (h.value_len > limits.max_value) return Reason::value_too_large;
  return std::nullopt;
}

}  // namespace

std::optional<Reason> check_ttl(Opcode op, std::uint64_t ttl) noexcept {
  if (op == Opcode::ttl_reply && ttl == kNoTtl) return std::nullopt;
  if ((op == Opcode::set && ttl == 0) || ttl > kMaxTtlMs) return Reason::bad_ttl;
  return std::nullopt;
}

std::optional<Reason> check_header(const RawHeader& h, const Limits& limits) noexcept {
  if (h.magic != kMagic) return Reason::bad_magic;
  if (h.version != kVersion) return Reason::bad_version;
  const OpEntry& e = kOps[h.opcode];
  if (!e.known) return Reason::unknown_opcode;
  const Opcode op = e.op;
  if ((h.flags & ~kKnownFlags) != 0) return Reason::reserved_flags;
  if (auto r = is_request(op) ? check_request_fields(h) : check_reply_fields(h)) return r;
  const OpRules& rules = e.rules[(h.flags & kFlagFound) != 0 ? 1 : 0];
  if (const std::uint8_t verdict = e.flag_verdicts[h.flags]; verdict != 0) return static_cast<Reason>(verdict - 1);
  if (auto r = check_key(h, rules, limits)) return r;
  if (auto r = check_call_key(op, h)) return r;
  return check_value(op, h, rules, limits);
}

Header to_header(const RawHeader& h) noexcept {
  Header out;
  out.opcode = static_cast<Opcode>(h.opcode);
  out.flags = h.flags;
  out.status = static_cast<Status>(h.status);
  out.credits = h.credits;
  out.key_len = h.key_len;
  out.req_id = h.req_id;
  out.value_len = h.value_len;
  return out;
}

}  // namespace rkv::proto
