#pragma once
// LatencyHistograms: the server's own time per request, by operation class
// (docs/observability.md, "Latency"): from the receive completion of the
// SEND that carried the request to the post of the SEND that carries its
// reply. One per Server, shared by its connections (like ServerCounters).
// ServerConn reads the clock once per received buffer and once per post, not
// per request. Buckets are powers of two of a microsecond (1 µs .. 2^22 µs,
// about 4.2 s, then +Inf): Prometheus histograms (cumulative buckets, sum,
// count) and, for `rkv stats`, p50/p99/p999 as the upper bound of the bucket
// that holds the quantile. Thread: the reactor's.

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kv/store/stats.hpp"

namespace rkv::kv::server {

enum class OpClass : std::uint8_t {
  get,        // GET answered in the reply (hit or miss)
  get_large,  // GET whose value went by RDMA (written into the client's buffer, or pulled)
  set,        // eager SET
  set_large,  // rendezvous SET (the server READ the value)
  del,
  call,       // CALL (user-defined operation)
  other,      // EXPIRE, TTL, TOUCH, STATS
};
inline constexpr std::size_t kOpClasses = 7;
inline constexpr std::array<std::string_view, kOpClasses> kOpClassNames{"get", "get_large", "set", "set_large",
                                                                      "del", "call", "other"};
[[nodiscard]] constexpr std::string_view to_string(OpClass c) noexcept {
  return kOpClassNames[static_cast<std::size_t>(c)];
}

class LatencyHistograms {
 public:
  static constexpr std::size_t kBounds = 23;  // 2^0 .. 2^22 µs; bucket kBounds is +Inf
  using Duration = std::chrono::nanoseconds;

  void record(OpClass c, Duration d) noexcept;

  [[nodiscard]] std::uint64_t count(OpClass c) const noexcept { return count_[static_cast<std::size_t>(c)]; }
  // The upper bound (µs) of the bucket holding quantile q (0 < q <= 1) of
  // class c; 0 with no sample; 2^23 for a quantile in the +Inf bucket.
  [[nodiscard]] std::uint64_t quantile_us(OpClass c, double q) const noexcept;
  // latency_<class>_count, _p50_microseconds, _p99_microseconds and
  // _p999_microseconds per class, for rkv stats: derived rows (stats.hpp),
  // which Prometheus does not get (it gets the histogram).
  void append_stats(store::StatRows& rows) const;
  // rkv_request_duration_seconds{op="<class>"} as one Prometheus histogram family.
  [[nodiscard]] std::string prometheus() const;

 private:
  std::array<std::array<std::uint64_t, kBounds + 1>, kOpClasses> buckets_{};
  std::array<std::uint64_t, kOpClasses> count_{};
  std::array<std::uint64_t, kOpClasses> sum_ns_{};
};

}  // namespace rkv::kv::server
