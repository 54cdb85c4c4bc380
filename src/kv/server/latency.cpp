// LatencyHistograms: see latency.hpp.
#include "kv/server/latency.hpp"

#include <fmt/format.h>

#include <fstream>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rkv::kv::server {

bool RequestClock::counter_usable() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0 || (d & (1u << 8)) == 0) return false;  // invariant TSC
  try {
    std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string source;
    return static_cast<bool>(f >> source) && source == "tsc";
  } catch (...) {
    return false;
  }
#else
  return false;
#endif
}

namespace {
using Steady = std::chrono::steady_clock;
// A counter reading and the steady_clock time it was taken at: of 32
// tries, the one whose two steady_clock reads around it were closest
// together (a preemption between them makes a try useless; the tightest of
// 32 is ~0.1 us here), its time the middle of those two.
std::pair<Steady::time_point, RequestClock::time_point> paired_reading() noexcept {
  Steady::time_point at{};
  Steady::duration width = Steady::duration::max();
  RequestClock::time_point counter = 0;
  for (int i = 0; i < 32; ++i) {
    const Steady::time_point a = Steady::now();
    const RequestClock::time_point c = RequestClock::now();
    const Steady::time_point b = Steady::now();
    if (b - a < width) {
      width = b - a;
      at = a + (b - a) / 2;
      counter = c;
    }
  }
  return {at, counter};
}
// Nanoseconds per tick: 1 for steady_clock's; the counter's measured against
// steady_clock over 5 ms (both keep running if the thread is preempted in
// between; each end is known to half its pair's width).
double ns_per_tick() noexcept {
  if (!RequestClock::counter()) return 1.0;
  const auto [t0, c0] = paired_reading();
  while (Steady::now() - t0 < std::chrono::milliseconds(5)) {
  }
  const auto [t1, c1] = paired_reading();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  return c1 > c0 ? static_cast<double>(ns) / static_cast<double>(c1 - c0) : 1.0;
}
}  // namespace

std::chrono::nanoseconds RequestClock::between(time_point from, time_point to) noexcept {
  static const double ratio = ns_per_tick();
  if (to <= from) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(to - from) * ratio));
}

namespace {
template <std::size_t... I>
std::array<store::QuantileRows, kOpClasses> quantile_rows(std::index_sequence<I...>) {
  return {store::QuantileRows(fmt::format("latency_{}", kOpClassNames[I]),
                              fmt::format("{} requests (receive completion to reply post)", kOpClassNames[I]))...};
}
}  // namespace

const std::array<std::string, store::Histogram::kBounds + 1>& latency_le_row_names() {
  static const auto names = [] {
    std::array<std::string, store::Histogram::kBounds + 1> n;
    for (std::size_t b = 0; b < store::Histogram::kBounds; ++b) {
      n[b] = fmt::format("latency_le_{}_microseconds", std::uint64_t{1} << b);
    }
    n[store::Histogram::kBounds] = "latency_le_inf";
    return n;
  }();
  return names;
}

LatencyHistograms::LatencyHistograms() : rows_(quantile_rows(std::make_index_sequence<kOpClasses>{})) {
  (void)RequestClock::between(0, 0);  // the counter's ratio measured now, not at the first reply
}

void LatencyHistograms::append_stats(store::StatRows& rows) const {
  for (std::size_t c = 0; c < kOpClasses; ++c) rows_[c].append(rows, of_[c]);
  store::Histogram requests;
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    if (static_cast<OpClass>(c) != OpClass::other) requests.add(of_[c]);
  }
  const auto& names = latency_le_row_names();
  for (std::size_t b = 0; b <= store::Histogram::kBounds; ++b) {
    rows.push_back({names[b], requests.cumulative(b), store::StatKind::derived,
                    "requests of every class but other answered within this bound, since start (cumulative: "
                    "rkv top's p99 of an interval)"});
  }
}

std::string LatencyHistograms::prometheus() const {
  constexpr std::string_view kName = "rkv_request_duration_seconds";
  std::string out;
  store::Histogram::append_family(
      out, kName, "server time of a request: the receive completion of its SEND to the post of its reply's SEND");
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    of_[c].append_prometheus(out, kName, fmt::format("op=\"{}\"", kOpClassNames[c]));
  }
  return out;
}

}  // namespace rkv::kv::server
