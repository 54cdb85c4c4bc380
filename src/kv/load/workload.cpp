#include "kv/load/workload.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>

#include "proto/wire.hpp"  // proto::kMaxTtlMs only

namespace rkv::kv::load {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kMiB = 1024 * 1024;

constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64: tiny state, passes BigCrush, one multiply-xorshift per 8 bytes.
class SplitMix {
 public:
  explicit constexpr SplitMix(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t next() noexcept { return mix64(state_ += kGolden); }
  // Uniform in [0, 1) from the top 53 bits.
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // [0, n), n > 0. Modulo bias is < n / 2^64: irrelevant for workloads.
  std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

 private:
  std::uint64_t state_;
};

// The size takes part in the seed so values of different sizes are unrelated.
SplitMix value_rng(std::uint64_t seed, std::size_t size) noexcept {
  return SplitMix(mix64(seed) ^ mix64(static_cast<std::uint64_t>(size) + kGolden));
}

// Little-endian on every host so generated values are portable.
void store_le(std::byte* out, std::uint64_t w, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(w >> (8 * i));
}

bool is_blank(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

std::size_t skip_blanks(std::string_view s, std::size_t pos) noexcept {
  while (pos < s.size() && is_blank(s[pos])) ++pos;
  return pos;
}

std::size_t token_end(std::string_view s, std::size_t pos) noexcept {
  while (pos < s.size() && !is_blank(s[pos])) ++pos;
  return pos;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'a' && x <= 'z' ? x - 32 : x) == y;
         });
}

// Quoted excerpt for messages: long keys or values must not flood the terminal.
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  std::string q = "'";
  q += s.substr(0, kMax);
  if (s.size() > kMax) q += "...";
  q += '\'';
  return q;
}

// Decimal digits; false on empty, non-digit or overflow (overflow sets `big`).
bool parse_u64(std::string_view s, std::uint64_t& out, bool& big) noexcept {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  std::uint64_t v = 0;
  for (char c : s) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
      big = true;
      return false;
    }
    v = v * 10 + d;
  }
  out = v;
  return true;
}

// `spec` is the text after '@' (trailing blanks already removed).
bool parse_generated(std::string_view spec, std::uint64_t max_value, GeneratedValue& out,
                     std::string& err) {
  const std::string shown = quote(std::string("@").append(spec));
  const std::size_t colon = spec.find(':');
  std::string_view size_text = spec.substr(0, colon);
  std::uint64_t mult = 1;
  if (!size_text.empty()) {
    switch (size_text.back()) {
      case 'k': case 'K': mult = kKiB; break;
      case 'm': case 'M': mult = kMiB; break;
      default: break;
    }
    if (mult != 1) size_text.remove_suffix(1);
  }
  std::uint64_t n = 0;
  bool big = false;
  if (!parse_u64(size_text, n, big) && !big) {
    err = "bad value size " + shown + ": expected @<size>[:<seed>], size decimal with an "
          "optional k/K/m/M suffix (e.g. @4096, @64k:7); write @@ for a literal '@'";
    return false;
  }
  if (colon != std::string_view::npos) {
    bool seed_big = false;
    if (!parse_u64(spec.substr(colon + 1), out.seed, seed_big)) {
      err = "bad seed in " + shown + ": expected a decimal number below 2^64";
      return false;
    }
  } else {
    out.seed = 0;
  }
  if (big || n > max_value / mult) {
    err = "value size " + shown + " is over the limit of " + std::to_string(max_value) +
          " bytes (" + format_size(max_value) + ")";
    return false;
  }
  out.size = n * mult;
  return true;
}

enum class LineKind { blank, op, error };

// A SET value's " PX <ms>" ending (PX in any case, blanks around): cut off
// into ttl. False (err set) when the ending is there but <ms> is out of range.
bool take_px(std::string_view& value, std::uint64_t& ttl, std::string& err) {
  std::string_view v = value;
  while (!v.empty() && is_blank(v.back())) v.remove_suffix(1);
  std::size_t digits = v.size();
  while (digits > 0 && v[digits - 1] >= '0' && v[digits - 1] <= '9') --digits;
  if (digits == v.size()) return true;  // no number at the end
  const std::string_view num = v.substr(digits);
  std::size_t p = digits;
  if (p == 0 || !is_blank(v[p - 1])) return true;
  while (p > 0 && is_blank(v[p - 1])) --p;
  if (p < 2 || !iequals(v.substr(p - 2, 2), "PX")) return true;
  p -= 2;
  if (p == 0 || !is_blank(v[p - 1])) return true;  // "...xPX 5": part of the value
  bool big = false;
  std::uint64_t ms = 0;
  if (!parse_u64(num, ms, big) || ms == 0 || ms > proto::kMaxTtlMs) {
    err = "SET: PX " + quote(num) + " is not a number of milliseconds from 1 to " + std::to_string(proto::kMaxTtlMs);
    return false;
  }
  ttl = ms;
  value = value.substr(0, p - 1);  // the one separator before PX goes too
  return true;
}

// CALL <op> <payload>: `end` is the end of the opcode word.
LineKind parse_call(std::string_view line, std::size_t end, const ParseLimits& lim, Op& op, std::string& err) {
  std::size_t pos = skip_blanks(line, end);
  if (pos == line.size()) {
    err = "CALL: missing operation number";
    return LineKind::error;
  }
  end = token_end(line, pos);
  const std::string_view num = line.substr(pos, end - pos);
  const bool hex = num.size() > 2 && (num.starts_with("0x") || num.starts_with("0X"));
  unsigned long v = 0;
  const char* first = num.data() + (hex ? 2 : 0);
  const auto [ptr, ec] = std::from_chars(first, num.data() + num.size(), v, hex ? 16 : 10);
  if (ec != std::errc{} || ptr != num.data() + num.size() || v > 0xFFFF) {
    err = "CALL: operation " + quote(num) + " is not a number from 0 to 65535 (decimal or 0x hex)";
    return LineKind::error;
  }
  op.call_op = static_cast<std::uint16_t>(v);
  op.key.clear();
  if (end == line.size()) {  // no payload
    op.value = std::string();
    return LineKind::op;
  }
  std::string_view payload = line.substr(end + 1);  // exactly one separator
  if (payload.starts_with('@') && !payload.starts_with("@@")) {
    std::string_view spec = payload.substr(1);
    while (!spec.empty() && is_blank(spec.back())) spec.remove_suffix(1);
    GeneratedValue g;
    if (!parse_generated(spec, lim.max_value, g, err)) return LineKind::error;
    op.value = g;
    return LineKind::op;
  }
  if (payload.starts_with("@@")) payload.remove_prefix(1);
  std::string bytes;
  for (std::size_t i = 0; i < payload.size(); ++i) {
    if (payload[i] != '\\') {
      bytes.push_back(payload[i]);
      continue;
    }
    if (i + 1 < payload.size() && payload[i + 1] == '\\') {
      bytes.push_back('\\');
      ++i;
      continue;
    }
    unsigned byte = 0;
    if (i + 3 < payload.size() && payload[i + 1] == 'x' &&
        std::from_chars(payload.data() + i + 2, payload.data() + i + 4, byte, 16).ptr == payload.data() + i + 4) {
      bytes.push_back(static_cast<char>(byte));
      i += 3;
      continue;
    }
    err = "CALL: bad escape at " + quote(payload.substr(i, 4)) + " (\\xHH is one byte, \\\\ a backslash)";
    return LineKind::error;
  }
  if (bytes.size() > lim.max_value) {
    err = "CALL: request is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
          std::to_string(lim.max_value);
    return LineKind::error;
  }
  op.value = std::move(bytes);
  return LineKind::op;
}

// The whole grammar, shared by the file parser and the interactive mode.
LineKind parse_line(std::string_view line, const ParseLimits& lim, Op& op, std::string& err) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::size_t pos = skip_blanks(line, 0);
  if (pos == line.size() || line[pos] == '#') return LineKind::blank;

  std::size_t end = token_end(line, pos);
  const std::string_view opcode = line.substr(pos, end - pos);
  if (iequals(opcode, "SET")) {
    op.kind = Op::Kind::set;
  } else if (iequals(opcode, "GET")) {
    op.kind = Op::Kind::get;
  } else if (iequals(opcode, "DEL")) {
    op.kind = Op::Kind::del;
  } else if (iequals(opcode, "EXPIRE")) {
    op.kind = Op::Kind::expire;
  } else if (iequals(opcode, "TTL")) {
    op.kind = Op::Kind::ttl;
  } else if (iequals(opcode, "CALL")) {
    op.kind = Op::Kind::call;
    return parse_call(line, end, lim, op, err);
  } else {
    err = "unknown operation " + quote(opcode) + " (expected SET, GET, DEL, EXPIRE, TTL or CALL)";
    return LineKind::error;
  }
  std::string name(to_string(op.kind));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  op.ttl_ms = 0;

  pos = skip_blanks(line, end);
  if (pos == line.size()) {
    err = name + ": missing key";
    return LineKind::error;
  }
  end = token_end(line, pos);
  const std::string_view key = line.substr(pos, end - pos);
  if (key.size() > lim.max_key) {
    err = "key " + quote(key) + " is " + std::to_string(key.size()) +
          " bytes, over the limit of " + std::to_string(lim.max_key);
    return LineKind::error;
  }

  switch (op.kind) {
    case Op::Kind::get:
    case Op::Kind::del:
    case Op::Kind::ttl: {
      const std::size_t rest = skip_blanks(line, end);
      if (rest != line.size()) {
        err = name + ": unexpected text after the key: " + quote(line.substr(rest));
        return LineKind::error;
      }
      op.value = std::string();
      break;
    }
    case Op::Kind::expire: {
      const std::size_t at = skip_blanks(line, end);
      const std::size_t num_end = token_end(line, at);
      bool big = false;
      if (at == line.size()) {
        err = "EXPIRE: missing time to live (write 'EXPIRE <key> <ms>'; 0 makes the key persist)";
        return LineKind::error;
      }
      if (!parse_u64(line.substr(at, num_end - at), op.ttl_ms, big) || op.ttl_ms > proto::kMaxTtlMs) {
        err = "EXPIRE: " + quote(line.substr(at, num_end - at)) + " is not a number of milliseconds from 0 to " +
              std::to_string(proto::kMaxTtlMs);
        return LineKind::error;
      }
      if (const std::size_t rest = skip_blanks(line, num_end); rest != line.size()) {
        err = "EXPIRE: unexpected text after the time to live: " + quote(line.substr(rest));
        return LineKind::error;
      }
      op.value = std::string();
      break;
    }
    case Op::Kind::call: break;  // parse_call
    case Op::Kind::set: {
      if (end == line.size()) {
        err = "SET: missing value (write 'SET <key> <value>'; a single trailing space sets "
              "an empty value)";
        return LineKind::error;
      }
      std::string_view value = line.substr(end + 1);  // exactly one separator
      if (!take_px(value, op.ttl_ms, err)) return LineKind::error;
      if (value.starts_with("@@")) {
        value.remove_prefix(1);
      } else if (value.starts_with('@')) {
        std::string_view spec = value.substr(1);
        while (!spec.empty() && is_blank(spec.back())) spec.remove_suffix(1);
        GeneratedValue g;
        if (!parse_generated(spec, lim.max_value, g, err)) return LineKind::error;
        op.value = g;
        break;
      }
      if (value.size() > lim.max_value) {
        err = "value is " + std::to_string(value.size()) + " bytes, over the limit of " +
              std::to_string(lim.max_value);
        return LineKind::error;
      }
      op.value = std::string(value);
      break;
    }
  }
  op.key = std::string(key);
  return LineKind::op;
}

}  // namespace

std::string_view to_string(Op::Kind k) noexcept {
  switch (k) {
    case Op::Kind::set: return "set";
    case Op::Kind::get: return "get";
    case Op::Kind::del: return "del";
    case Op::Kind::call: return "call";
    case Op::Kind::expire: return "expire";
    case Op::Kind::ttl: return "ttl";
  }
  return "?";
}

std::uint64_t value_size(const ValueSpec& v) noexcept {
  if (const auto* s = std::get_if<std::string>(&v)) return s->size();
  return std::get<GeneratedValue>(v).size;
}

void write_value(const ValueSpec& v, std::span<std::byte> out) noexcept {
  if (const auto* s = std::get_if<std::string>(&v)) {
    if (!s->empty()) std::memcpy(out.data(), s->data(), std::min(out.size(), s->size()));
    return;
  }
  fill_value(out, std::get<GeneratedValue>(v).seed);
}

bool matches(const ValueSpec& v, std::span<const std::byte> bytes) noexcept {
  if (const auto* s = std::get_if<std::string>(&v)) {
    return bytes.size() == s->size() &&
           (s->empty() || std::memcmp(bytes.data(), s->data(), s->size()) == 0);
  }
  const auto& g = std::get<GeneratedValue>(v);
  return bytes.size() == g.size && check_value(bytes, g.seed);
}

void fill_value(std::span<std::byte> out, std::uint64_t seed) noexcept {
  SplitMix rng = value_rng(seed, out.size());
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) store_le(out.data() + i, rng.next(), 8);
  if (i < out.size()) store_le(out.data() + i, rng.next(), out.size() - i);
}

bool check_value(std::span<const std::byte> bytes, std::uint64_t seed) noexcept {
  SplitMix rng = value_rng(seed, bytes.size());
  std::byte want[8];
  for (std::size_t i = 0; i < bytes.size(); i += 8) {
    const std::size_t n = std::min<std::size_t>(8, bytes.size() - i);
    store_le(want, rng.next(), n);
    if (std::memcmp(want, bytes.data() + i, n) != 0) return false;
  }
  return true;
}

std::uint64_t checksum(std::span<const std::byte> bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte b : bytes) {
    h ^= static_cast<std::uint64_t>(b);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string format_size(std::uint64_t size) {
  if (size != 0 && size % kMiB == 0) return std::to_string(size / kMiB) + "m";
  if (size != 0 && size % kKiB == 0) return std::to_string(size / kKiB) + "k";
  return std::to_string(size);
}

ParseResult parse_workload(std::istream& in, const ParseLimits& limits) {
  ParseResult r;
  std::string line;
  std::string err;
  unsigned lineno = 0;
  auto fail = [&](std::string msg) {
    r.ops.clear();  // ops are useless once the file is known to be bad
    if (r.errors.size() < limits.max_errors) {
      r.errors.push_back({lineno, std::move(msg)});
    } else {
      ++r.errors_omitted;
    }
  };
  while (std::getline(in, line)) {
    ++lineno;
    Op op;
    err.clear();
    switch (parse_line(line, limits, op, err)) {
      case LineKind::blank: break;
      case LineKind::error: fail(err); break;
      case LineKind::op:
        if (r.ok()) {
          op.line = lineno;
          r.ops.push_back(std::move(op));
        }
        break;
    }
  }
  if (in.bad()) {
    ++lineno;
    fail("read error");
  }
  return r;
}

std::optional<Op> parse_command(std::string_view line, std::string& error,
                                const ParseLimits& limits) {
  error.clear();
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  Op op;
  switch (parse_line(line, limits, op, error)) {
    case LineKind::blank: return std::nullopt;
    case LineKind::error: return std::nullopt;
    case LineKind::op: return op;
  }
  return std::nullopt;
}

std::string check_options(const GenOptions& opt) {
  if (opt.keys == 0) return "need at least one key";
  if (!(opt.get_ratio >= 0.0 && opt.get_ratio <= 1.0)) return "GET ratio must be in [0, 1]";
  if (opt.sizes.empty()) return "need at least one value size";
  std::uint64_t total = 0;
  for (const SizeWeight& s : opt.sizes) {
    if (s.size > opt.max_value) {
      return "value size " + std::to_string(s.size) + " is over the limit of " +
             std::to_string(opt.max_value) + " bytes";
    }
    total += s.weight;
  }
  if (total == 0) return "value size weights add up to zero";
  for (char c : opt.key_prefix) {
    if (is_blank(c) || c == '\n') return "key prefix must not contain blanks";
  }
  const std::size_t digits = std::to_string(opt.keys - 1).size();
  if (opt.key_prefix.size() + digits > kMaxKeyLen) return "key prefix too long";
  if (opt.dist.kind != KeyDist::Kind::uniform) {
    if (!(opt.dist.theta > 0.0 && opt.dist.theta < 1.0)) return "the skew must be in (0, 1)";
    if (opt.keys > kMaxZipfKeys) return "a skewed distribution takes at most 100000000 keys (its setup sums one term per key)";
  }
  return {};
}

std::optional<KeyDist> parse_key_dist(std::string_view text, std::string& error) {
  KeyDist d;
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  if (name == "uniform" && colon == std::string_view::npos) return d;
  if (name != "zipf" && name != "latest") {
    error = "unknown key distribution '" + std::string(text) + "' (uniform, zipf[:THETA], latest[:THETA])";
    return std::nullopt;
  }
  d.kind = name == "zipf" ? KeyDist::Kind::zipf : KeyDist::Kind::latest;
  if (colon != std::string_view::npos) {
    const std::string theta(text.substr(colon + 1));
    char* end = nullptr;
    d.theta = std::strtod(theta.c_str(), &end);
    if (theta.empty() || end != theta.c_str() + theta.size() || !(d.theta > 0.0 && d.theta < 1.0)) {
      error = "the skew of '" + std::string(text) + "' must be a number in (0, 1), e.g. zipf:0.99";
      return std::nullopt;
    }
  }
  return d;
}

namespace {
// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record
// synthetic databases", SIGMOD 1994): ranks 0..n-1, rank 0 the most likely.
// Setup sums the zeta series once (O(n)); each draw costs one pow().
class Zipf {
 public:
  Zipf(std::uint64_t n, double theta) : n_(n), theta_(theta), alpha_(1.0 / (1.0 - theta)) {
    for (std::uint64_t i = 1; i <= n; ++i) zetan_ += 1.0 / std::pow(static_cast<double>(i), theta);
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) / (1.0 - zeta2 / zetan_);
  }
  std::uint64_t rank(double u) const noexcept {
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, theta_)) return n_ > 1 ? 1 : 0;
    const auto r = static_cast<std::uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_));
    return r < n_ ? r : n_ - 1;
  }

 private:
  std::uint64_t n_;
  double theta_, alpha_, zetan_ = 0.0, eta_ = 0.0;
};
}  // namespace

void generate_workload(std::ostream& out, const GenOptions& opt) {
  if (!check_options(opt).empty()) {
    out.setstate(std::ios::failbit);
    return;
  }
  SplitMix rng(opt.seed);
  std::uint64_t total_weight = 0;
  for (const SizeWeight& s : opt.sizes) total_weight += s.weight;
  const std::size_t digits = std::to_string(opt.keys - 1).size();
  std::string key;
  auto make_key = [&](std::uint64_t i) {
    const std::string n = std::to_string(i);
    key.assign(opt.key_prefix).append(digits - n.size(), '0').append(n);
  };
  auto pick_size = [&] {
    std::uint64_t r = rng.below(total_weight);
    for (const SizeWeight& s : opt.sizes) {
      if (r < s.weight) return s.size;
      r -= s.weight;
    }
    return opt.sizes.back().size;  // unreachable: r < total_weight
  };
  static constexpr std::string_view kAlnum =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string line;
  auto emit_set = [&] {
    const std::uint64_t size = pick_size();
    line.assign("SET ").append(key).append(1, ' ');
    if (size <= opt.literal_max) {
      for (std::uint64_t i = 0; i < size; ++i) line += kAlnum[rng.below(kAlnum.size())];
    } else {
      line.append("@").append(format_size(size)).append(":").append(std::to_string(rng.next()));
    }
    line += '\n';
    out << line;
  };

  out << "# rkv workload: seed=" << opt.seed << " keys=" << opt.keys << " ops=" << opt.ops;
  if (opt.dist.kind != KeyDist::Kind::uniform) {  // uniform files keep their first line
    out << " dist=" << (opt.dist.kind == KeyDist::Kind::zipf ? "zipf:" : "latest:") << opt.dist.theta;
  }
  out
      << " get_ratio=" << opt.get_ratio << " preload=" << (opt.preload ? 1 : 0) << " sizes=";
  for (std::size_t i = 0; i < opt.sizes.size(); ++i) {
    out << (i ? "," : "") << format_size(opt.sizes[i].size) << "*" << opt.sizes[i].weight;
  }
  out << '\n';
  if (opt.preload) {
    for (std::uint64_t k = 0; k < opt.keys; ++k) {
      make_key(k);
      emit_set();
    }
  }
  std::optional<Zipf> zipf;
  if (opt.dist.kind != KeyDist::Kind::uniform) zipf.emplace(opt.keys, opt.dist.theta);
  std::uint64_t latest = opt.keys - 1;  // the key SET last (the preload's last one)
  auto pick_key = [&]() -> std::uint64_t {
    switch (opt.dist.kind) {
      case KeyDist::Kind::uniform: return rng.below(opt.keys);
      case KeyDist::Kind::zipf: return zipf->rank(rng.unit());
      case KeyDist::Kind::latest: return (latest + opt.keys - zipf->rank(rng.unit())) % opt.keys;
    }
    return 0;
  };
  for (std::uint64_t i = 0; i < opt.ops; ++i) {
    const bool get = rng.unit() < opt.get_ratio;
    const std::uint64_t k = pick_key();
    make_key(k);
    if (!get) latest = k;
    if (get) {
      out << "GET " << key << '\n';
    } else {
      emit_set();
    }
  }
}

}  // namespace rkv::kv::load
