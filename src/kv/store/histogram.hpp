#pragma once
// Histogram: one latency distribution in power-of-two buckets of a
// microsecond (1 µs .. 2^22 µs, about 4.2 s, then +Inf), the one shape every
// duration kvd measures is kept in (docs/observability.md, "Latency"): the
// server's time per request by class (kv/server/latency.hpp) and the log's
// fsyncs (durable/log.hpp). Exported two ways, both from here:
//   - Prometheus: append_prometheus() writes a histogram's samples
//     (cumulative _bucket{le=...}, _sum, _count) under a family name;
//   - kvd's statistics: QuantileRows turn it into derived rows
//     PREFIX_count, PREFIX_p50_microseconds, _p99_, _p999_ (the upper bound of
//     the bucket holding the quantile: within a factor of two).
// Thread: its owner's (plain integers). Pure.

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kv/store/stats.hpp"

namespace rkv::kv::store {

class Histogram {
 public:
  static constexpr std::size_t kBounds = 23;  // bucket i holds durations up to 2^i µs; bucket kBounds is +Inf

  void record(std::chrono::nanoseconds d) noexcept;
  void add(const Histogram& other) noexcept;  // merge: every sample of other counted here too

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t sum_ns() const noexcept { return sum_ns_; }
  // Samples of at most 2^i µs (i < kBounds), or all of them (i == kBounds).
  [[nodiscard]] std::uint64_t cumulative(std::size_t i) const noexcept;
  // The upper bound (µs) of the bucket holding quantile q (0 < q <= 1); 0
  // with no sample; 2^kBounds for a quantile in the +Inf bucket.
  [[nodiscard]] std::uint64_t quantile_us(double q) const noexcept;
  // NAME_bucket{LABELS,le="..."} per bucket, NAME_sum{LABELS}, NAME_count{LABELS};
  // labels: "" or e.g. op="get". No HELP/TYPE lines: a family's are written
  // once, by append_family() before its first histogram.
  void append_prometheus(std::string& out, std::string_view name, std::string_view labels) const;
  // The HELP and TYPE lines of histogram family `name`.
  static void append_family(std::string& out, std::string_view name, std::string_view help);

 private:
  std::array<std::uint64_t, kBounds + 1> buckets_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ns_ = 0;
};

// The quantile bound of a cumulative bucket array: shared by Histogram and by
// readers that have only the cumulative counts (rkv top's deltas of STATS rows).
[[nodiscard]] std::uint64_t quantile_us(const std::array<std::uint64_t, Histogram::kBounds + 1>& cumulative,
                                        double q) noexcept;

// The derived rows of one histogram. StatRow holds views: the names and help
// live here, as long as the owner of the histogram.
class QuantileRows {
 public:
  // prefix: "latency_get", "log_fsync"; what: "requests of this class", "log fsyncs".
  QuantileRows(std::string_view prefix, std::string_view what);
  void append(StatRows& rows, const Histogram& h) const;

 private:
  std::array<std::string, 4> names_;
  std::array<std::string, 4> help_;
};

}  // namespace rkv::kv::store
