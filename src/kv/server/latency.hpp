#pragma once
// LatencyHistograms: the server's own time per request, by operation class
// (docs/observability.md, "Latency"): from the receive completion of the
// SEND that carried the request to the post of the SEND that carries its
// reply. One per Server, shared by its connections (like ServerCounters).
// ServerConn reads the clock once per received buffer and once per post, not
// per request. One store::Histogram per class (powers of two of a
// microsecond): a Prometheus histogram family and, for `rkv stats`,
// p50/p99/p999 rows. Thread: the reactor's.

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kv/store/histogram.hpp"
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

// The clock a request's server time is read from (ServerConn: once per
// received buffer, once per post). On x86-64 whose time-stamp counter is
// invariant (cpuid: one rate in every power state) and which the kernel
// keeps time by itself (clocksource `tsc`: in step on every CPU), the
// counter, read by rdtsc; elsewhere steady_clock. In this VM a
// steady_clock::now() (a vDSO call) cost 49 ns and an rdtsc 19 ns
// (2026-12-01, docs/performance.md "A cheaper clock for the request
// timings"): at one request per SEND that was two reads per request. Ticks
// become nanoseconds by a ratio measured once per process against
// steady_clock (over 5 ms, when the first LatencyHistograms is made).
struct RequestClock {
  using time_point = std::uint64_t;  // ticks
  [[nodiscard]] static time_point now() noexcept {
#if defined(__x86_64__)
    if (counter()) return __builtin_ia32_rdtsc();
#endif
    return static_cast<time_point>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  // The time from `from` to `to` (two now()s; 0 if `to` is earlier).
  [[nodiscard]] static std::chrono::nanoseconds between(time_point from, time_point to) noexcept;
  // Whether now() reads the time-stamp counter (decided once per process).
  [[nodiscard]] static bool counter() noexcept {
    static const bool use = counter_usable();
    return use;
  }

 private:
  [[nodiscard]] static bool counter_usable() noexcept;
};

class LatencyHistograms {
 public:
  using Duration = std::chrono::nanoseconds;

  LatencyHistograms();
  void record(OpClass c, Duration d) noexcept { of_[static_cast<std::size_t>(c)].record(d); }
  // The request whose SEND was received at `received` was answered at `now` (RequestClock's).
  void record(OpClass c, RequestClock::time_point received, RequestClock::time_point now) noexcept {
    record(c, RequestClock::between(received, now));
  }

  [[nodiscard]] const store::Histogram& of(OpClass c) const noexcept { return of_[static_cast<std::size_t>(c)]; }
  [[nodiscard]] std::uint64_t count(OpClass c) const noexcept { return of(c).count(); }
  [[nodiscard]] std::uint64_t quantile_us(OpClass c, double q) const noexcept { return of(c).quantile_us(q); }
  // For rkv stats: per class latency_<class>_count, _p50_microseconds,
  // _p99_microseconds and _p999_microseconds (store::QuantileRows); then the
  // cumulative buckets of every class but `other` together,
  // latency_le_<2^i>_microseconds and latency_le_inf, from whose deltas
  // rkv top computes the p99 of an interval. All derived rows (stats.hpp):
  // Prometheus gets the histograms themselves.
  void append_stats(store::StatRows& rows) const;
  // rkv_request_duration_seconds{op="<class>"} as one Prometheus histogram family.
  [[nodiscard]] std::string prometheus() const;

 private:
  std::array<store::Histogram, kOpClasses> of_{};
  std::array<store::QuantileRows, kOpClasses> rows_;
};

// The names of the cumulative rows, latency_le_1_microseconds ..
// latency_le_4194304_microseconds, latency_le_inf (rkv top reads them).
[[nodiscard]] const std::array<std::string, store::Histogram::kBounds + 1>& latency_le_row_names();

}  // namespace rkv::kv::server
