// The one list of statistics rows and its three formats (kv/store/stats.hpp),
// and the server's counter table (kv/server/counters.hpp).
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <thread>
#include <set>
#include <string>

#include "kv/server/counters.hpp"
#include "kv/server/latency.hpp"
#include "kv/store/stats.hpp"
#include "kv/store/store.hpp"

namespace rkv::kv {
namespace {

TEST(Stats, ThreeFormatsOfOneList) {
  const store::StatRows rows{{"a", 1, store::StatKind::counter, "one"}, {"b_c", 22, store::StatKind::gauge, "two"}};
  EXPECT_EQ(store::format_stats_line(rows), "a=1 b_c=22");
  EXPECT_EQ(store::format_stats_lines(rows), "a 1\nb_c 22\n");
  EXPECT_EQ(store::format_stats_json(rows), R"({"a": 1, "b_c": 22})");
  EXPECT_EQ(store::format_stats_json({}), "{}");
}

TEST(Stats, CounterRowsFollowTheTableAndCarryTheirValues) {
  server::ServerCounters c;
  c.stale_completions = 7;
  c.io_errors = 3;
  const auto rows = server::counter_rows(c);
  ASSERT_EQ(rows.size(), server::kServerCounterTable.size());
  std::set<std::string> names;
  for (const auto& r : rows) {
    EXPECT_FALSE(r.help.empty()) << r.name;
    EXPECT_TRUE(names.insert(std::string(r.name)).second) << r.name << " twice";
  }
  const auto text = store::format_stats_line(rows);
  EXPECT_NE(text.find("stale_completions=7"), std::string::npos) << text;
  EXPECT_NE(text.find("io_errors=3"), std::string::npos) << text;
}

TEST(Stats, StoreRowsCountKeysAndBytes) {
  store::Store s;
  EXPECT_TRUE(s.set("k", "vvv"));
  store::StatRows rows;
  s.append_stats(rows);
  // key + value; no limit; one entry's charge (Store::kEntryOverhead + key + value)
  EXPECT_EQ(store::format_stats_line(rows),
            "keys=1 data_bytes=4 max_memory_bytes=0 memory_used_bytes=" + std::to_string(store::Store::kEntryOverhead + 4) +
                " evicted_keys=0 expired_keys=0 expiring_keys=0 touched_keys=0 dropped_keys=0");
}

// The Prometheus exposition (kvd --metrics): names derive from the rows'
// names, types from their kinds, help text escaped.
TEST(Stats, PrometheusExpositionNamesTypesAndHelp) {
  const store::StatRows rows{{"sets", 5, store::StatKind::counter, "SET requests"},
                             {"bytes_copied_total", 9, store::StatKind::counter, "a total already"},
                             {"keys", 3, store::StatKind::gauge, "keys now"},
                             {"odd", 1, store::StatKind::untyped, "back\\slash and\nnewline"},
                             {"lat_p50", 7, store::StatKind::derived, "left out: Prometheus gets its histogram"}};
  EXPECT_EQ(store::format_prometheus(rows),
            "# HELP rkv_sets_total SET requests\n# TYPE rkv_sets_total counter\nrkv_sets_total 5\n"
            "# HELP rkv_bytes_copied_total a total already\n# TYPE rkv_bytes_copied_total counter\n"
            "rkv_bytes_copied_total 9\n"
            "# HELP rkv_keys keys now\n# TYPE rkv_keys gauge\nrkv_keys 3\n"
            "# HELP rkv_odd back\\\\slash and\\nnewline\n# TYPE rkv_odd untyped\nrkv_odd 1\n");
  EXPECT_EQ(store::format_prometheus({}), "");
}

// Every row kvd exports from the counter table and the Store is a metric
// Prometheus accepts: a valid, unique name, a counter's ending in _total and
// no gauge's, and nothing untyped.
TEST(Stats, EveryServerRowIsAWellFormedMetric) {
  store::StatRows rows = server::counter_rows(server::ServerCounters{});
  store::Store s;
  s.append_stats(rows);
  std::set<std::string> names;
  for (const auto& r : rows) {
    const std::string name = store::prometheus_name(r);
    SCOPED_TRACE(name);
    EXPECT_TRUE(names.insert(name).second) << "twice";
    ASSERT_FALSE(name.empty());
    EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (const char c : name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << c;
    EXPECT_NE(r.kind, store::StatKind::untyped);
    EXPECT_EQ(name.ends_with("_total"), r.kind == store::StatKind::counter);
    EXPECT_FALSE(r.help.empty());
    EXPECT_EQ(r.help.find('\n'), std::string_view::npos);
  }
  const std::string text = store::format_prometheus(rows);
  EXPECT_NE(text.find("# TYPE rkv_sets_total counter\nrkv_sets_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE rkv_connections gauge\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE rkv_keys gauge\nrkv_keys 0\n"), std::string::npos);
}

// The clock requests are timed by (the time-stamp counter where the kernel
// keeps time by it, as on this host; else steady_clock) agrees with
// steady_clock: a stretch timed by both, the counter's inside the other's,
// reads no longer (0.2 % for the ratio's error, a 1 us tick) and at least
// the 20 ms slept. Bounds of the clocks' agreement, not of any speed.
TEST(Stats, RequestClockAgreesWithSteadyClock) {
  using Steady = std::chrono::steady_clock;
  const auto t0 = Steady::now();
  const auto c0 = server::RequestClock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto c1 = server::RequestClock::now();
  const auto t1 = Steady::now();
  const auto timed = server::RequestClock::between(c0, c1);
  const auto outside = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0);
  std::printf("RequestClock: %s, %lld ns inside %lld ns of steady_clock\n",
              server::RequestClock::counter() ? "time-stamp counter" : "steady_clock",
              static_cast<long long>(timed.count()), static_cast<long long>(outside.count()));
  EXPECT_GE(timed, std::chrono::milliseconds(20) * 998 / 1000);
  EXPECT_LE(timed.count(), outside.count() * 1002 / 1000 + 1000);
  EXPECT_EQ(server::RequestClock::between(c1, c0).count(), 0) << "a reversed pair is no time, never a huge one";
}

// The server's latency histograms: buckets of powers of two of a
// microsecond, quantiles as the holding bucket's bound, the Prometheus
// histogram family cumulative with +Inf, sum and count.
TEST(Stats, LatencyHistogramsBucketCountAndExport) {
  using namespace std::chrono_literals;
  server::LatencyHistograms h;
  EXPECT_EQ(h.quantile_us(server::OpClass::get, 0.5), 0u) << "no sample";
  for (int i = 0; i < 98; ++i) h.record(server::OpClass::get, 3us);  // bucket 4 µs
  h.record(server::OpClass::get, 1ms);                                 // bucket 1024 µs
  h.record(server::OpClass::get, 10s);                                 // +Inf
  h.record(server::OpClass::set_large, 1000ns);                        // bucket 1 µs (bound inclusive)
  EXPECT_EQ(h.count(server::OpClass::get), 100u);
  EXPECT_EQ(h.quantile_us(server::OpClass::get, 0.5), 4u);
  EXPECT_EQ(h.quantile_us(server::OpClass::get, 0.99), 1024u);
  EXPECT_EQ(h.quantile_us(server::OpClass::get, 0.999), std::uint64_t{1} << 23) << "in +Inf";
  EXPECT_EQ(h.quantile_us(server::OpClass::set_large, 0.5), 1u);
  const std::string text = h.prometheus();
  EXPECT_NE(text.find("# TYPE rkv_request_duration_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("rkv_request_duration_seconds_bucket{op=\"get\",le=\"2e-06\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rkv_request_duration_seconds_bucket{op=\"get\",le=\"4e-06\"} 98\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rkv_request_duration_seconds_bucket{op=\"get\",le=\"0.001024\"} 99\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rkv_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("rkv_request_duration_seconds_count{op=\"get\"} 100\n"), std::string::npos);
  EXPECT_NE(text.find("rkv_request_duration_seconds_sum{op=\"get\"} 10.001294\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rkv_request_duration_seconds_count{op=\"set_large\"} 1\n"), std::string::npos);
  store::StatRows rows;
  h.append_stats(rows);
  EXPECT_EQ(rows.size(), 4 * server::kOpClasses + store::Histogram::kBounds + 1);
  const std::string line = store::format_stats_line(rows);
  EXPECT_NE(line.find("latency_get_count=100 latency_get_p50_microseconds=4 latency_get_p99_microseconds=1024"), std::string::npos) << line;
  // The cumulative rows rkv top reads: every class but `other` together.
  h.record(server::OpClass::other, 3us);
  rows.clear();
  h.append_stats(rows);
  const std::string again = store::format_stats_line(rows);
  EXPECT_NE(again.find("latency_le_1_microseconds=1 latency_le_2_microseconds=1 latency_le_4_microseconds=99 "),
            std::string::npos) << again;
  EXPECT_NE(again.find("latency_le_1024_microseconds=100 "), std::string::npos) << again;
  EXPECT_NE(again.find("latency_le_4194304_microseconds=100 latency_le_inf=101"), std::string::npos) << again;
  for (const auto& r : rows) EXPECT_EQ(r.kind, store::StatKind::derived) << r.name;
}

// One distribution alone: no labels, merging, and the quantile of cumulative
// counts (what rkv top computes from the deltas of two STATS replies).
TEST(Stats, HistogramWithoutLabelsMergesAndQuantilesFromCumulativeCounts) {
  using namespace std::chrono_literals;
  store::Histogram a;
  store::Histogram b;
  a.record(500us);  // bucket 512 µs
  b.record(2ms);    // bucket 2048 µs
  b.record(-5ns);   // a clock that went back counts as 0
  a.add(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_EQ(a.sum_ns(), 2'500'000u);
  EXPECT_EQ(a.cumulative(0), 1u);
  EXPECT_EQ(a.cumulative(9), 2u);
  EXPECT_EQ(a.cumulative(store::Histogram::kBounds), 3u);
  std::string text;
  a.append_prometheus(text, "rkv_x_seconds", "");
  EXPECT_NE(text.find("rkv_x_seconds_bucket{le=\"0.000512\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rkv_x_seconds_bucket{le=\"+Inf\"} 3\nrkv_x_seconds_sum 0.0025\nrkv_x_seconds_count 3\n"),
            std::string::npos) << text;
  std::array<std::uint64_t, store::Histogram::kBounds + 1> cumulative{};
  for (std::size_t i = 0; i <= store::Histogram::kBounds; ++i) cumulative[i] = a.cumulative(i);
  EXPECT_EQ(store::quantile_us(cumulative, 0.5), 512u);
  EXPECT_EQ(store::quantile_us(cumulative, 0.99), 2048u);
  EXPECT_EQ(store::quantile_us(cumulative, 0.99), a.quantile_us(0.99));
  EXPECT_EQ(store::quantile_us({}, 0.99), 0u) << "no sample";
  store::StatRows rows;
  const store::QuantileRows names("log_fsync", "the log's fsyncs");
  names.append(rows, a);
  EXPECT_EQ(store::format_stats_line(rows),
            "log_fsync_count=3 log_fsync_p50_microseconds=512 log_fsync_p99_microseconds=2048 "
            "log_fsync_p999_microseconds=2048");
}

}  // namespace
}  // namespace rkv::kv
