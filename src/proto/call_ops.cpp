#include "proto/call_ops.hpp"

#include <charconv>

#include "proto/endian.hpp"

namespace rkv::proto::ops {

namespace {

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xFFu));
  out.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

// key_len u16 | key, checked; the offset after it.
std::optional<std::size_t> read_key(std::span<const std::byte> in, std::string_view& key) noexcept {
  if (in.size() < 2) return std::nullopt;
  const std::size_t len = load_le<std::uint16_t>(in, 0);
  if (len == 0 || len > kMaxKey || len > in.size() - 2) return std::nullopt;
  key = as_string_view(in.subspan(2, len));
  return 2 + len;
}

}  // namespace

std::string incr_request(std::string_view key, std::int64_t delta) {
  std::string out;
  out.reserve(2 + key.size() + 8);
  put_u16(out, static_cast<std::uint16_t>(key.size()));
  out.append(key);
  put_u64(out, static_cast<std::uint64_t>(delta));
  return out;
}

std::optional<IncrRequest> parse_incr(std::span<const std::byte> in) noexcept {
  IncrRequest r;
  const auto at = read_key(in, r.key);
  if (!at || in.size() - *at != 8) return std::nullopt;
  r.delta = static_cast<std::int64_t>(load_le<std::uint64_t>(in, *at));
  return r;
}

std::string incr_reply(std::int64_t value) {
  std::string out;
  put_u64(out, static_cast<std::uint64_t>(value));
  return out;
}

std::optional<std::int64_t> parse_incr_reply(std::span<const std::byte> in) noexcept {
  if (in.size() != kIncrReplySize) return std::nullopt;
  return static_cast<std::int64_t>(load_le<std::uint64_t>(in, 0));
}

std::string cas_request(std::string_view key, std::string_view expected, std::string_view value) {
  std::string out;
  out.reserve(2 + key.size() + 4 + expected.size() + value.size());
  put_u16(out, static_cast<std::uint16_t>(key.size()));
  out.append(key);
  put_u32(out, static_cast<std::uint32_t>(expected.size()));
  out.append(expected);
  out.append(value);
  return out;
}

std::optional<CasRequest> parse_cas(std::span<const std::byte> in) noexcept {
  CasRequest r;
  const auto at = read_key(in, r.key);
  if (!at || in.size() - *at < 4) return std::nullopt;
  const std::uint64_t elen = load_le<std::uint32_t>(in, *at);
  const std::size_t p = *at + 4;
  if (elen > in.size() - p) return std::nullopt;
  r.expected = as_string_view(in.subspan(p, static_cast<std::size_t>(elen)));
  r.value = as_string_view(in.subspan(p + static_cast<std::size_t>(elen)));
  return r;
}

std::optional<bool> parse_cas_reply(std::span<const std::byte> in) noexcept {
  if (in.size() != kCasReplySize) return std::nullopt;
  const auto b = std::to_integer<unsigned>(in[0]);
  if (b > 1) return std::nullopt;
  return b == 1;
}

std::optional<std::int64_t> parse_decimal(std::string_view text) noexcept {
  const std::size_t digits = text.size() - (text.starts_with('-') ? 1 : 0);
  if (digits == 0 || digits > 19) return std::nullopt;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string to_decimal(std::int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc{} ? end : buf);
}

}  // namespace rkv::proto::ops
