// Fuzz target: what kvd and every client read from etcd (src/cluster,
// docs/cluster.md): the JSON gateway's replies, member records, cluster
// addresses and base64. etcd is an outside process: a reply must never crash
// or mislead a reader, whatever bytes it holds. Input: a selector byte, then
// the text. Properties:
// - no parser throws or crashes; each returns a value or an error with a reason;
// - base64 is canonical: what decodes encodes back to the same text, and
//   every byte string round-trips;
// - a parsed member record re-encodes to one that parses to the same member;
// - a parsed cluster address prints as one that parses to the same address;
// - a parsed range holds only decoded keys and values;
// - a parsed shard map re-encodes to the same map, and planning it over its
//   own owners gives a map owned by them only, which is a fixed point.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cluster/etcd_wire.hpp"
#include "cluster/keyspace.hpp"
#include "cluster/shard_map.hpp"
#include "fuzz_target.hpp"

namespace {

using namespace rkv::cluster;

void replies(std::string_view text) {
  std::string why;
  if (const auto l = parse_grant(text, why)) {
    FUZZ_CHECK(l->id != 0 && l->ttl > 0);
  } else {
    FUZZ_CHECK(!why.empty());
  }
  why.clear();
  if (!parse_keepalive(text, why)) FUZZ_CHECK(!why.empty());
  why.clear();
  if (const auto r = parse_range(text, why)) {
    for (const auto& kv : r->kvs) {
      // What etcd sent base64-encoded, decoded once: encoding it again is legal base64.
      FUZZ_CHECK(base64_decode(base64_encode(kv.key)) == kv.key);
    }
  } else {
    FUZZ_CHECK(!why.empty());
  }
  why.clear();
  if (const auto w = parse_watch(text, why)) {
    for (const auto& ev : w->events) FUZZ_CHECK(!ev.kv.key.empty());
  } else {
    FUZZ_CHECK(!why.empty());
  }
  why.clear();
  if (!parse_txn(text, why)) FUZZ_CHECK(!why.empty());
  why.clear();
  if (!parse_header_revision(text, why)) FUZZ_CHECK(!why.empty());
  (void)error_message(text);
}

void base64(std::string_view text) {
  if (const auto bytes = base64_decode(text)) FUZZ_CHECK(base64_encode(*bytes) == text);
  FUZZ_CHECK(base64_decode(base64_encode(text)) == std::string(text));
  if (!text.empty()) {
    const std::string end = prefix_end(text);
    FUZZ_CHECK(end > std::string(text) || end == std::string(1, '\0'));
  }
}

void member(std::string_view text) {
  std::string why;
  const auto m = parse_member(text, why);
  if (!m) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  const auto again = parse_member(member_value(*m), why);
  FUZZ_CHECK(again && again->host == m->host && again->port == m->port && again->capacity == m->capacity);
}

void address(std::string_view text) {
  ClusterUrl url;
  std::string why;
  if (!parse_cluster_url(text, url, why)) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  ClusterUrl again;
  FUZZ_CHECK(parse_cluster_url(url.text(), again, why));
  FUZZ_CHECK(again.endpoints() == url.endpoints() && again.name == url.name && again.text() == url.text());
  FUZZ_CHECK(url.members_prefix().starts_with("/rkv/" + url.name + "/"));
}

void shard_map(std::string_view text) {
  std::string why;
  const auto m = parse_map(text, why);
  if (!m) {
    FUZZ_CHECK(!why.empty());
    return;
  }
  FUZZ_CHECK(parse_map(map_value(*m), why) == m);
  std::set<std::string> owners;
  for (const auto& s : m->shards) owners.insert(s.owners.begin(), s.owners.end());
  const std::vector<std::string> ids(owners.begin(), owners.end());
  std::vector<std::int64_t> leases;  // each owner under the lease the map has for it: the same incarnations
  for (const auto& id : ids) leases.push_back(m->leases.at(id));
  const auto next = plan_map(m, ids, leases, MapShape{});
  const ShardMap& planned = next ? *next : *m;
  for (const auto& s : planned.shards) {
    for (const auto& o : s.owners) FUZZ_CHECK(owners.count(o) == 1);
  }
  FUZZ_CHECK(!plan_map(planned, ids, leases, MapShape{}));
  for (const auto& id : ids) {
    const auto mine = planned.parts_of(id, planned.leases.at(id));
    const auto other = planned.parts_of(id, planned.leases.at(id) + 1);
    FUZZ_CHECK(std::count(other.begin(), other.end(), rkv::proto::ShardPart{}) ==
               static_cast<std::ptrdiff_t>(other.size()));  // only the map's incarnation
    FUZZ_CHECK(mine.size() == planned.shards.size());
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const auto& owners = planned.shards[i].owners;
      const bool owner = std::find(owners.begin(), owners.end(), id) != owners.end();
      FUZZ_CHECK(owner == (mine[i].role != rkv::proto::ShardRole::none));
      FUZZ_CHECK((mine[i].role == rkv::proto::ShardRole::primary) == (owners.front() == id));
      FUZZ_CHECK(!owner || mine[i].epoch == planned.shards[i].epoch);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: replies(text); break;
    case 1: base64(text); break;
    case 2: member(text); break;
    case 3: address(text); break;
    default: shard_map(text); break;
  }
  return 0;
}
