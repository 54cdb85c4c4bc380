// parse_size / parse_size_mix: see size_mix.hpp.
#include "kv/load/size_mix.hpp"

#include <charconv>
#include <limits>

namespace rkv::kv::load {

namespace {

std::optional<std::uint64_t> parse_u64(std::string_view text) noexcept {
  if (text.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::uint64_t mult = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K': mult = 1024; break;
      case 'm':
      case 'M': mult = 1024 * 1024; break;
      default: break;
    }
    if (mult != 1) text.remove_suffix(1);
  }
  const auto v = parse_u64(text);
  if (!v || *v > (std::uint64_t{1} << 63) / mult) return std::nullopt;
  return *v * mult;
}

std::optional<std::vector<SizeWeight>> parse_size_mix(std::string_view text, std::string& error) {
  std::vector<SizeWeight> out;
  if (text.empty()) {
    error = "empty size list";
    return std::nullopt;
  }
  for (;;) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto colon = item.find(':');
    const std::string_view size_text = item.substr(0, colon);
    const auto size = parse_size(size_text);
    if (!size) {
      error = "'" + std::string(item) + "': size must be a number with an optional k or m suffix (64, 4k, 1m)";
      return std::nullopt;
    }
    SizeWeight sw{*size, 1};
    if (colon != std::string_view::npos) {
      const auto w = parse_u64(item.substr(colon + 1));
      if (!w || *w == 0 || *w > std::numeric_limits<std::uint32_t>::max()) {
        error = "'" + std::string(item) + "': weight must be a positive integer";
        return std::nullopt;
      }
      sw.weight = static_cast<std::uint32_t>(*w);
    }
    out.push_back(sw);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace rkv::kv::load
