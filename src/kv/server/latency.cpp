// LatencyHistograms: see latency.hpp.
#include "kv/server/latency.hpp"

#include <bit>
#include <fmt/format.h>

namespace rkv::kv::server {

namespace {
// Bucket i holds durations up to 2^i µs.
std::size_t bucket_of(std::uint64_t ns) noexcept {
  if (ns <= 1000) return 0;
  const auto i = static_cast<std::size_t>(std::bit_width((ns - 1) / 1000));
  return i < LatencyHistograms::kBounds ? i : LatencyHistograms::kBounds;
}
// The row names, built once: StatRow holds views.
struct Names {
  std::array<std::array<std::string, 4>, kOpClasses> n;
  Names() {
    for (std::size_t c = 0; c < kOpClasses; ++c) {
      const auto cls = kOpClassNames[c];
      n[c] = {fmt::format("latency_{}_count", cls), fmt::format("latency_{}_p50_microseconds", cls),
              fmt::format("latency_{}_p99_microseconds", cls), fmt::format("latency_{}_p999_microseconds", cls)};
    }
  }
};
const Names& names() {
  static const Names n;
  return n;
}
}  // namespace

void LatencyHistograms::record(OpClass c, Duration d) noexcept {
  const auto i = static_cast<std::size_t>(c);
  const std::uint64_t ns = d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0;
  ++buckets_[i][bucket_of(ns)];
  ++count_[i];
  sum_ns_[i] += ns;
}

std::uint64_t LatencyHistograms::quantile_us(OpClass c, double q) const noexcept {
  const auto i = static_cast<std::size_t>(c);
  if (count_[i] == 0) return 0;
  const auto want = static_cast<std::uint64_t>(q * static_cast<double>(count_[i]) + 0.999999);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b <= kBounds; ++b) {
    seen += buckets_[i][b];
    if (seen >= want) return std::uint64_t{1} << b;
  }
  return std::uint64_t{1} << kBounds;
}

void LatencyHistograms::append_stats(store::StatRows& rows) const {
  using store::StatKind;
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    const auto cls = static_cast<OpClass>(c);
    const auto& n = names().n[c];
    rows.insert(rows.end(),
                {{n[0], count_[c], StatKind::derived, "requests of this class timed (receive completion to reply post)"},
                 {n[1], quantile_us(cls, 0.5), StatKind::derived, "median server time of this class, microseconds (its bucket's upper bound)"},
                 {n[2], quantile_us(cls, 0.99), StatKind::derived, "99th percentile of this class, microseconds (bucket bound)"},
                 {n[3], quantile_us(cls, 0.999), StatKind::derived, "99.9th percentile of this class, microseconds (bucket bound)"}});
  }
}

std::string LatencyHistograms::prometheus() const {
  constexpr std::string_view kName = "rkv_request_duration_seconds";
  std::string out = fmt::format(
      "# HELP {} server time of a request: the receive completion of its SEND to the post of its reply's SEND\n"
      "# TYPE {} histogram\n",
      kName, kName);
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < kBounds; ++b) {
      cumulative += buckets_[c][b];
      fmt::format_to(std::back_inserter(out), "{}_bucket{{op=\"{}\",le=\"{:.9g}\"}} {}\n", kName, kOpClassNames[c],
                     static_cast<double>(std::uint64_t{1} << b) * 1e-6, cumulative);
    }
    fmt::format_to(std::back_inserter(out), "{}_bucket{{op=\"{}\",le=\"+Inf\"}} {}\n", kName, kOpClassNames[c],
                   count_[c]);
    fmt::format_to(std::back_inserter(out), "{}_sum{{op=\"{}\"}} {:.9g}\n", kName, kOpClassNames[c],
                   static_cast<double>(sum_ns_[c]) * 1e-9);
    fmt::format_to(std::back_inserter(out), "{}_count{{op=\"{}\"}} {}\n", kName, kOpClassNames[c], count_[c]);
  }
  return out;
}

}  // namespace rkv::kv::server
