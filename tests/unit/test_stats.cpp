// The one list of statistics rows and its three formats (kv/store/stats.hpp),
// and the server's counter table (kv/server/counters.hpp).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kv/server/counters.hpp"
#include "kv/store/stats.hpp"
#include "kv/store/store.hpp"

namespace rkv::kv {
namespace {

TEST(Stats, ThreeFormatsOfOneList) {
  const store::StatRows rows{{"a", 1, "one"}, {"b_c", 22, "two"}};
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
            "keys=1 bytes=4 max_memory=0 memory_used=" + std::to_string(store::Store::kEntryOverhead + 4) +
                " evicted_keys=0 expired_keys=0 expiring_keys=0 touched_keys=0");
}

}  // namespace
}  // namespace rkv::kv
