#include "kv/load/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "proto/wire.hpp"  // kEagerLimit only (header constant, nothing to link)

namespace rkv::kv::load {
namespace {

constexpr std::array<Op::Kind, 6> kKinds = {Op::Kind::get,  Op::Kind::set,    Op::Kind::del,
                                            Op::Kind::call, Op::Kind::expire, Op::Kind::ttl};
static_assert(kKinds.size() * 2 == Report::kClasses);
constexpr std::array<SizeClass, 2> kSizes = {SizeClass::eager, SizeClass::rendezvous};

double finite_or_zero(double v) noexcept { return std::isfinite(v) ? v : 0.0; }

double rate(double amount, double seconds) noexcept {
  seconds = finite_or_zero(seconds);
  return seconds > 0.0 ? amount / seconds : 0.0;
}

// Length of the valid UTF-8 sequence starting at s[i] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), 0 if invalid.
std::size_t utf8_len(std::string_view s, std::size_t i) noexcept {
  const auto at = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = at(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (at(i + k) < 0x80 || at(i + k) > 0xBF) return 0;
  }
  return n;
}

// "812ns", "12.3us", "4.56ms", "1.20s": latencies span six orders of magnitude.
std::string format_ns(std::uint64_t ns) {
  const auto v = static_cast<double>(ns);
  if (ns < 1000) return fmt::format("{}ns", ns);
  if (ns < 1000000) return fmt::format("{:.1f}us", v / 1e3);
  if (ns < 1000000000) return fmt::format("{:.2f}ms", v / 1e6);
  return fmt::format("{:.2f}s", v / 1e9);
}

std::string format_bytes(std::uint64_t b) {
  const auto v = static_cast<double>(b);
  if (b < 1000) return fmt::format("{} B", b);
  if (b < 1000000) return fmt::format("{:.2f} kB", v / 1e3);
  if (b < 1000000000) return fmt::format("{:.2f} MB", v / 1e6);
  return fmt::format("{:.2f} GB", v / 1e9);
}

std::string_view upper(Op::Kind k) noexcept {
  switch (k) {
    case Op::Kind::get: return "GET";
    case Op::Kind::set: return "SET";
    case Op::Kind::del: return "DEL";
    case Op::Kind::call: return "CALL";
    case Op::Kind::expire: return "EXPIRE";
    case Op::Kind::ttl: return "TTL";
  }
  return "?";
}

}  // namespace

std::string_view to_string(SizeClass c) noexcept {
  switch (c) {
    case SizeClass::eager: return "eager";
    case SizeClass::rendezvous: return "rendezvous";
  }
  return "?";
}

SizeClass size_class(std::size_t key_len, std::uint64_t value_len) noexcept {
  // Written as a subtraction so a huge value_len cannot overflow the sum.
  return key_len < proto::kEagerLimit && value_len < proto::kEagerLimit - key_len
             ? SizeClass::eager
             : SizeClass::rendezvous;
}

std::size_t Report::index(Op::Kind k, SizeClass c) noexcept {
  std::size_t i = 0;
  switch (k) {
    case Op::Kind::get: i = 0; break;
    case Op::Kind::set: i = 2; break;
    case Op::Kind::del: i = 4; break;
    case Op::Kind::call: i = 6; break;
    case Op::Kind::expire: i = 8; break;
    case Op::Kind::ttl: i = 10; break;
  }
  switch (c) {
    case SizeClass::eager: break;
    case SizeClass::rendezvous: i += 1; break;
  }
  return i;
}

void Report::record(Op::Kind k, SizeClass c, std::uint64_t bytes, std::uint64_t latency_ns,
                    bool ok) noexcept {
  ClassStats& s = at(k, c);
  ++s.count;
  if (!ok) {
    ++s.errors;
    return;
  }
  s.bytes += bytes;
  s.latency.record(latency_ns);
}

void Report::record_shard(std::size_t i, bool ok, bool down, std::uint64_t latency_ns) noexcept {
  if (down) {
    ++shard_down;
    shard_down_max_ns = std::max(shard_down_max_ns, latency_ns);
  }
  if (i >= shards.size()) return;
  ShardStats& s = shards[i];
  ++s.ops;
  if (!ok) ++s.errors;
  if (down) ++s.shard_down;
}

void Report::merge(const Report& other) {
  for (std::size_t i = 0; i < kClasses; ++i) {
    classes[i].count += other.classes[i].count;
    classes[i].errors += other.classes[i].errors;
    classes[i].bytes += other.classes[i].bytes;
    classes[i].latency.merge(other.classes[i].latency);
  }
  seconds = std::fmax(finite_or_zero(seconds), finite_or_zero(other.seconds));
  mismatches += other.mismatches;
  get_hits += other.get_hits;
  get_misses += other.get_misses;
  shard_down += other.shard_down;
  shard_down_max_ns = std::max(shard_down_max_ns, other.shard_down_max_ns);
  if (shards.size() < other.shards.size()) shards.resize(other.shards.size());
  for (std::size_t i = 0; i < other.shards.size(); ++i) {
    if (shards[i].server.empty()) shards[i].server = other.shards[i].server;
    shards[i].ops += other.shards[i].ops;
    shards[i].errors += other.shards[i].errors;
    shards[i].shard_down += other.shards[i].shard_down;
  }
  // Not a structured binding: a lambda may not capture one in C++20 (clang 14
  // refuses it; GCC 12 accepts it), and scripts/fuzz builds this with clang.
  for (const auto& counter : other.client) {
    const auto mine =
        std::find_if(client.begin(), client.end(), [&](const auto& c) { return c.first == counter.first; });
    if (mine == client.end()) {
      client.push_back(counter);
    } else {
      mine->second += counter.second;
    }
  }
}

std::uint64_t Report::ops() const noexcept {
  std::uint64_t n = 0;
  for (const ClassStats& s : classes) n += s.count;
  return n;
}

std::uint64_t Report::errors() const noexcept {
  std::uint64_t n = 0;
  for (const ClassStats& s : classes) n += s.errors;
  return n;
}

double Report::ops_per_s() const noexcept { return rate(static_cast<double>(ops()), seconds); }

std::string to_text(const Report& r) {
  std::string out;
  if (!r.name.empty()) out += fmt::format("workload: {}\n", r.name);
  constexpr std::string_view kRow = "{:<4} {:<10} {:>10} {:>7} {:>10} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9}\n";
  out += fmt::format(fmt::runtime(kRow), "op", "class", "count", "errors", "bytes", "ops/s",
                     "MB/s", "p50", "p99", "p99.9", "max");
  bool any = false;
  for (Op::Kind k : kKinds) {
    for (SizeClass c : kSizes) {
      const ClassStats& s = r.at(k, c);
      if (s.count == 0) continue;
      any = true;
      const Histogram& h = s.latency;
      // Only failures: there is no latency to show, and 0ns would be a lie.
      const auto lat = [&h](std::uint64_t ns) { return h.count() ? format_ns(ns) : "-"; };
      out += fmt::format(fmt::runtime(kRow), upper(k), to_string(c), s.count, s.errors,
                         format_bytes(s.bytes),
                         fmt::format("{:.1f}", rate(static_cast<double>(s.count), r.seconds)),
                         fmt::format("{:.2f}", rate(static_cast<double>(s.bytes) / 1e6, r.seconds)),
                         lat(h.percentile(50)), lat(h.percentile(99)), lat(h.percentile(99.9)),
                         lat(h.max()));
    }
  }
  if (!any) out += "(no operations)\n";
  out += fmt::format("total: {} ops, {} errors, {:.3f} s, {:.1f} ops/s, {} mismatches\n", r.ops(),
                     r.errors(), finite_or_zero(r.seconds), r.ops_per_s(), r.mismatches);
  if (const std::uint64_t gets = r.get_hits + r.get_misses; gets > 0) {
    out += fmt::format("gets: {} hits, {} misses (hit ratio {:.2f} %)\n", r.get_hits, r.get_misses,
                       100.0 * static_cast<double>(r.get_hits) / static_cast<double>(gets));
  }
  if (r.shards.size() > 1 || r.shard_down > 0) {
    for (const ShardStats& s : r.shards) {
      out += fmt::format("server {}: {} ops, {} errors, {} shard_down\n", s.server, s.ops, s.errors, s.shard_down);
    }
    if (r.shard_down > 0) {
      out += fmt::format("shard_down: {} ops failed because their server was down (the slowest in {})\n",
                         r.shard_down, format_ns(r.shard_down_max_ns));
    }
  }
  return out;
}

std::string to_json(const Report& r) {
  Histogram all;  // every successful operation of the run, whatever its class
  for (const ClassStats& s : r.classes) all.merge(s.latency);
  std::string out = fmt::format(
      R"({{"name":"{}","ops":{},"errors":{},"seconds":{:.6f},"ops_per_s":{:.3f},"mismatches":{},)"
      R"("get_hits":{},"get_misses":{},"latency_ns":{{"min":{},"mean":{:.1f},"p50":{},"p99":{},"p99_9":{},"max":{}}},"classes":[)",
      json_escape(r.name), r.ops(), r.errors(), finite_or_zero(r.seconds), r.ops_per_s(),
      r.mismatches, r.get_hits, r.get_misses, all.min(), all.mean(), all.percentile(50), all.percentile(99), all.percentile(99.9),
      all.max());
  bool first = true;
  for (Op::Kind k : kKinds) {
    for (SizeClass c : kSizes) {
      const ClassStats& s = r.at(k, c);
      const Histogram& h = s.latency;
      out += first ? "" : ",";
      first = false;
      out += fmt::format(
          R"({{"op":"{}","size_class":"{}","count":{},"errors":{},"bytes":{},"ops_per_s":{:.3f},)"
          R"("mb_per_s":{:.3f},"latency_ns":{{"min":{},"mean":{:.1f},"p50":{},"p99":{},)"
          R"("p99_9":{},"max":{}}}}})",
          to_string(k), to_string(c), s.count, s.errors, s.bytes,
          rate(static_cast<double>(s.count), r.seconds),
          rate(static_cast<double>(s.bytes) / 1e6, r.seconds), h.min(), h.mean(),
          h.percentile(50), h.percentile(99), h.percentile(99.9), h.max());
    }
  }
  out += fmt::format(R"(],"shard_down":{},"shard_down_max_ns":{},"shards":[)", r.shard_down, r.shard_down_max_ns);
  for (std::size_t i = 0; i < r.shards.size(); ++i) {
    const ShardStats& s = r.shards[i];
    out += fmt::format(R"({}{{"server":"{}","ops":{},"errors":{},"shard_down":{}}})", i == 0 ? "" : ",",
                       json_escape(s.server), s.ops, s.errors, s.shard_down);
  }
  out += "]";
  if (!r.client.empty()) {
    out += R"(,"client":{)";
    for (std::size_t i = 0; i < r.client.size(); ++i) {
      out += fmt::format(R"({}"{}":{})", i == 0 ? "" : ",", json_escape(r.client[i].first), r.client[i].second);
    }
    out += "}";
  }
  out += "}";
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_len(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

}  // namespace rkv::kv::load
