#pragma once
// The protocol suite's way into a ServerConn: one SEND delivered into its
// next posted receive, then the flush a reactor turn ends with; and the
// replies it posted since a point.
#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "fake_link.hpp"
#include "wire_helpers.hpp"
#include "kv/server/counters.hpp"
#include "kv/server/server_conn.hpp"

namespace rkv::test {

// What a Server answers STATS with, from these two (ServerConnConfig::stats).
inline std::function<kv::store::StatRows()> stats_of(const kv::server::ServerCounters& counters,
                                                     const kv::store::Store& store) {
  return [&counters, &store] {
    kv::store::StatRows rows = kv::server::counter_rows(counters);
    store.append_stats(rows);
    return rows;
  };
}

inline kv::server::Verdict deliver_request(kv::server::ServerConn& sc, FakeLink& link, std::size_t& next_recv,
                                           const std::vector<std::byte>& bytes) {
  const auto& r = link.recvs[next_recv++];
  const kv::server::Verdict v = sc.on_completion(FakeLink::deliver(r, bytes));
  EXPECT_EQ(sc.flush(), kv::server::Verdict::keep);
  return v;
}

// Every message of the SENDs posted after the first `sends` ones.
inline std::vector<proto::MessageView> replies_since(const FakeLink& link, std::size_t sends) {
  std::vector<proto::MessageView> out;
  for (std::size_t i = sends; i < link.sends.size(); ++i) {
    auto r = decode(link.sends[i].bytes);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace rkv::test
