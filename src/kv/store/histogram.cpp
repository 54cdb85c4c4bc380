// Histogram: see histogram.hpp.
#include "kv/store/histogram.hpp"

#include <bit>
#include <fmt/format.h>
#include <iterator>

namespace rkv::kv::store {

namespace {
std::size_t bucket_of(std::uint64_t ns) noexcept {
  if (ns <= 1000) return 0;
  const auto i = static_cast<std::size_t>(std::bit_width((ns - 1) / 1000));
  return i < Histogram::kBounds ? i : Histogram::kBounds;
}
}  // namespace

void Histogram::record(std::chrono::nanoseconds d) noexcept {
  const std::uint64_t ns = d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : 0;
  ++buckets_[bucket_of(ns)];
  ++count_;
  sum_ns_ += ns;
}

void Histogram::add(const Histogram& other) noexcept {
  for (std::size_t b = 0; b <= kBounds; ++b) buckets_[b] += other.buckets_[b];
  count_ += other.count_;
  sum_ns_ += other.sum_ns_;
}

std::uint64_t Histogram::cumulative(std::size_t i) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t b = 0; b <= i && b <= kBounds; ++b) n += buckets_[b];
  return n;
}

std::uint64_t quantile_us(const std::array<std::uint64_t, Histogram::kBounds + 1>& cumulative, double q) noexcept {
  const std::uint64_t total = cumulative[Histogram::kBounds];
  if (total == 0) return 0;
  const auto want = static_cast<std::uint64_t>(q * static_cast<double>(total) + 0.999999);
  for (std::size_t b = 0; b <= Histogram::kBounds; ++b) {
    if (cumulative[b] >= want) return std::uint64_t{1} << b;
  }
  return std::uint64_t{1} << Histogram::kBounds;
}

std::uint64_t Histogram::quantile_us(double q) const noexcept {
  std::array<std::uint64_t, kBounds + 1> c{};
  std::uint64_t n = 0;
  for (std::size_t b = 0; b <= kBounds; ++b) c[b] = n += buckets_[b];
  return store::quantile_us(c, q);
}

void Histogram::append_prometheus(std::string& out, std::string_view name, std::string_view labels) const {
  const std::string_view sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < kBounds; ++b) {
    cumulative += buckets_[b];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"{:.9g}\"}} {}\n", name, labels, sep,
                   static_cast<double>(std::uint64_t{1} << b) * 1e-6, cumulative);
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, count_);
  const std::string braces = labels.empty() ? std::string() : fmt::format("{{{}}}", labels);
  fmt::format_to(std::back_inserter(out), "{}_sum{} {:.9g}\n", name, braces, static_cast<double>(sum_ns_) * 1e-9);
  fmt::format_to(std::back_inserter(out), "{}_count{} {}\n", name, braces, count_);
}

void Histogram::append_family(std::string& out, std::string_view name, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
}

QuantileRows::QuantileRows(std::string_view prefix, std::string_view what)
    : names_{fmt::format("{}_count", prefix), fmt::format("{}_p50_microseconds", prefix),
             fmt::format("{}_p99_microseconds", prefix), fmt::format("{}_p999_microseconds", prefix)},
      help_{fmt::format("{} timed", what),
            fmt::format("median time of {}, microseconds (its bucket's upper bound)", what),
            fmt::format("99th percentile time of {}, microseconds (bucket bound)", what),
            fmt::format("99.9th percentile time of {}, microseconds (bucket bound)", what)} {}

void QuantileRows::append(StatRows& rows, const Histogram& h) const {
  rows.insert(rows.end(), {{names_[0], h.count(), StatKind::derived, help_[0]},
                           {names_[1], h.quantile_us(0.5), StatKind::derived, help_[1]},
                           {names_[2], h.quantile_us(0.99), StatKind::derived, help_[2]},
                           {names_[3], h.quantile_us(0.999), StatKind::derived, help_[3]}});
}

}  // namespace rkv::kv::store
