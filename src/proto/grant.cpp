// A SET by grant: see grant.hpp.
#include "proto/grant.hpp"

#include <algorithm>

#include "proto/endian.hpp"

namespace rkv::proto {

namespace {
constexpr std::uint16_t kTrailerFlags = kFlagTtl | kFlagEpoch;

// The rules of the fields, shared by the writer's check and the reader.
std::optional<Reason> check_fields(std::size_t key_len, std::uint64_t value_len, std::optional<std::uint64_t> ttl,
                                   std::optional<std::uint64_t> epoch, const Limits& limits) noexcept {
  if (key_len == 0 || key_len > std::min(limits.max_key, kMaxKey)) return Reason::bad_key_len;
  if (value_len > limits.max_value) return Reason::value_too_large;
  if (ttl) {
    if (auto r = check_ttl(Opcode::set, *ttl)) return r;
  }
  if (epoch) return check_epoch(*epoch);
  return std::nullopt;
}
}  // namespace

void write_grant_trailer(std::span<std::byte, kGrantTrailerSize> out, const GrantedSet& s) noexcept {
  std::uint16_t flags = 0;
  if (s.ttl) flags |= kFlagTtl;
  if (s.epoch) flags |= kFlagEpoch;
  store_le(out, trailer_off::req_id, s.req_id);
  store_le(out, trailer_off::key_len, static_cast<std::uint16_t>(s.key.size()));
  store_le(out, trailer_off::flags, flags);
  store_le(out, trailer_off::value_crc, s.value_crc);
  store_le(out, trailer_off::reserved, std::uint32_t{0});
  store_le(out, trailer_off::ttl, s.ttl.value_or(0));
  store_le(out, trailer_off::epoch, s.epoch.value_or(0));
}

std::optional<Reason> check_granted_set(const GrantedSet& s, std::uint64_t capacity, const Limits& limits) noexcept {
  if (auto r = check_fields(s.key.size(), s.value.size(), s.ttl, s.epoch, limits)) return r;
  if (granted_set_size(s.key.size(), s.value.size()) > capacity) return Reason::truncated_payload;
  return std::nullopt;
}

std::variant<GrantedSet, Reason> read_granted_set(std::span<const std::byte> written, const Limits& limits) noexcept {
  if (written.size() < kGrantTrailerSize) return Reason::truncated_payload;
  const std::size_t body = written.size() - kGrantTrailerSize;
  const auto t = written.subspan(body);
  const auto key_len = load_le<std::uint16_t>(t, trailer_off::key_len);
  const auto flags = load_le<std::uint16_t>(t, trailer_off::flags);
  const auto ttl = load_le<std::uint64_t>(t, trailer_off::ttl);
  const auto epoch = load_le<std::uint64_t>(t, trailer_off::epoch);
  if ((flags & ~kTrailerFlags) != 0 || load_le<std::uint32_t>(t, trailer_off::reserved) != 0 ||
      ((flags & kFlagTtl) == 0 && ttl != 0) || ((flags & kFlagEpoch) == 0 && epoch != 0)) {
    return Reason::bad_grant_trailer;
  }
  if (key_len > body) return Reason::truncated_payload;
  GrantedSet s;
  s.req_id = load_le<std::uint32_t>(t, trailer_off::req_id);
  s.value = written.first(body - key_len);
  s.key = as_string_view(written.subspan(body - key_len, key_len));
  s.value_crc = load_le<std::uint32_t>(t, trailer_off::value_crc);
  if ((flags & kFlagTtl) != 0) s.ttl = ttl;
  if ((flags & kFlagEpoch) != 0) s.epoch = epoch;
  if (auto r = check_fields(key_len, s.value.size(), s.ttl, s.epoch, limits)) return *r;
  return s;
}

}  // namespace rkv::proto
