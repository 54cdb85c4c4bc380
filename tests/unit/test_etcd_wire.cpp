// etcd's JSON gateway bodies and a cluster's keys (cluster/etcd_wire.hpp,
// cluster/keyspace.hpp): round trips, the gateway's real replies (captured
// from etcd 3.4, Debian 12's), and hostile ones that must parse to an error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cluster/etcd_wire.hpp"
#include "cluster/keyspace.hpp"

namespace rkv::cluster {
namespace {

TEST(EtcdWire, Base64RoundTripsEveryLengthAndByte) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    bytes.push_back(static_cast<char>(i * 7 + 3));
    const auto text = base64_encode(bytes);
    EXPECT_EQ(text.size() % 4, 0u);
    const auto back = base64_decode(text);
    ASSERT_TRUE(back) << text;
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("/rkv/c/members/b"), "L3Jrdi9jL21lbWJlcnMvYg==");
  EXPECT_EQ(base64_decode(""), std::string());
}

TEST(EtcdWire, Base64RejectsWhatIsNotStrictBase64) {
  for (const char* bad : {"Zm9", "Zm9v=", "Zm=v", "Z===", "Zm9v\n", "Zm 9", "Zm9*", "=Zm9", "Zg==Zm9v", "Zh==", "Zm9=" /* Zm8= */}) {
    EXPECT_FALSE(base64_decode(bad)) << bad;
  }
}

TEST(EtcdWire, PrefixEndCoversThePrefix) {
  EXPECT_EQ(prefix_end("/rkv/c/"), "/rkv/c0");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

TEST(EtcdWire, RequestBodiesAreWhatTheGatewayTakes) {
  const auto put = nlohmann::json::parse(put_body("k", "v", 42));
  EXPECT_EQ(put["key"], "aw==");
  EXPECT_EQ(put["value"], "dg==");
  EXPECT_EQ(put["lease"], "42");
  EXPECT_FALSE(nlohmann::json::parse(put_body("k", "v", 0)).contains("lease"));
  const auto range = nlohmann::json::parse(range_prefix_body("/rkv/c/"));
  EXPECT_EQ(*base64_decode(range["range_end"].get<std::string>()), "/rkv/c0");
  EXPECT_EQ(nlohmann::json::parse(grant_body(5))["TTL"], "5");
  EXPECT_EQ(nlohmann::json::parse(keepalive_body(-7))["ID"], "-7");
  const auto txn = nlohmann::json::parse(put_if_body("k", "v", 9));
  EXPECT_EQ(txn["compare"][0]["key"], "aw==");
  EXPECT_EQ(txn["compare"][0]["target"], "MOD");
  EXPECT_EQ(txn["compare"][0]["result"], "EQUAL");
  EXPECT_EQ(txn["compare"][0]["mod_revision"], "9");
  EXPECT_EQ(txn["success"][0]["request_put"]["value"], "dg==");
  EXPECT_EQ(txn["compare"].size(), 1U);
  // A lease asked for by ID (a lapsed member joining again under it).
  EXPECT_FALSE(nlohmann::json::parse(grant_body(5)).contains("ID"));
  EXPECT_EQ(nlohmann::json::parse(grant_body(5, 0x1b00))["ID"], "6912");
  // Keys that must still be absent when the map lands: version 0 each.
  const std::vector<std::string> absent{"/rkv/c/members/a:1", "/rkv/c/members/b:1"};
  const auto guarded = nlohmann::json::parse(put_if_body("k", "v", 9, absent));
  ASSERT_EQ(guarded["compare"].size(), 3U);
  EXPECT_EQ(guarded["compare"][0]["target"], "MOD");
  for (std::size_t i = 0; i < absent.size(); ++i) {
    EXPECT_EQ(guarded["compare"][i + 1]["key"], base64_encode(absent[i]));
    EXPECT_EQ(guarded["compare"][i + 1]["target"], "VERSION");
    EXPECT_EQ(guarded["compare"][i + 1]["result"], "EQUAL");
    EXPECT_EQ(guarded["compare"][i + 1]["version"], "0");
  }
}

TEST(EtcdWire, ParsesATransactionsReply) {
  // As etcd 3.4.23's gateway wrote them: the comparison held, then did not.
  std::string why;
  const auto won = parse_txn(
      R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"2","raft_term":"2"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]})",
      why);
  ASSERT_TRUE(won) << why;
  EXPECT_TRUE(won->succeeded);
  EXPECT_EQ(won->revision, 2);
  const auto lost = parse_txn(
      R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"2","raft_term":"2"}})",
      why);
  ASSERT_TRUE(lost) << why;
  EXPECT_FALSE(lost->succeeded);
  for (const char* bad : {"", "{}", R"({"succeeded":true})", R"({"header":{"revision":"2"},"succeeded":"yes"})",
                          R"({"error":"invalid character","code":3})"}) {
    EXPECT_FALSE(parse_txn(bad, why)) << bad;
  }
}

TEST(EtcdWire, ParsesTheGatewaysReplies) {
  std::string why;
  const auto lease = parse_grant(
      R"({"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"},"ID":"7587899191183823621","TTL":"3"})",
      why);
  ASSERT_TRUE(lease) << why;
  EXPECT_EQ(lease->id, 7587899191183823621);
  EXPECT_EQ(lease->ttl, 3);

  const auto alive = parse_keepalive(R"({"result":{"header":{"revision":"1"},"ID":"75","TTL":"3"}})", why);
  ASSERT_TRUE(alive) << why;
  EXPECT_EQ(alive->ttl, 3);
  const auto gone = parse_keepalive(R"({"result":{"header":{"revision":"1"},"ID":"75"}})", why);
  ASSERT_TRUE(gone) << why;
  EXPECT_EQ(gone->ttl, 0);  // left out: the lease expired

  const auto range = parse_range(
      R"({"header":{"revision":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy","lease":"9"}],"count":"1"})",
      why);
  ASSERT_TRUE(range) << why;
  EXPECT_EQ(range->revision, 2);
  ASSERT_EQ(range->kvs.size(), 1u);
  EXPECT_EQ(range->kvs[0].key, "foo");
  EXPECT_EQ(range->kvs[0].value, "bar");
  EXPECT_EQ(range->kvs[0].lease, 9);
  const auto empty = parse_range(R"({"header":{"revision":"5"}})", why);
  ASSERT_TRUE(empty) << why;
  EXPECT_TRUE(empty->kvs.empty());

  EXPECT_EQ(error_message(R"({"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"})"),
            "etcdserver: requested lease not found");
  EXPECT_EQ(error_message("<html>bad gateway</html>"), "<html>bad gateway</html>");
}

TEST(EtcdWire, ParsesTheGatewaysWatchStream) {
  std::string why;
  const std::string body = watch_prefix_body("/rkv/t/members/", 7);
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["create_request"]["key"], base64_encode("/rkv/t/members/"));
  EXPECT_EQ(j["create_request"]["range_end"], base64_encode("/rkv/t/members0"));
  EXPECT_EQ(j["create_request"]["start_revision"], "7");
  // Lines as etcd 3.4's gateway wrote them for a watch of /rkv/t/members/.
  const auto created = parse_watch(
      R"({"result":{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"1","raft_term":"2"},"created":true}})",
      why);
  ASSERT_TRUE(created) << why;
  EXPECT_TRUE(created->created);
  EXPECT_FALSE(created->canceled);
  EXPECT_TRUE(created->events.empty());
  EXPECT_EQ(created->revision, 1);
  const auto put = parse_watch(
      R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"events":[{"kv":{"key":"L3Jrdi90L21lbWJlcnMvYTox","create_revision":"2","mod_revision":"2","version":"1","value":"eyJ4IjoxfQ=="}}]}})",
      why);
  ASSERT_TRUE(put) << why;
  ASSERT_EQ(put->events.size(), 1U);
  EXPECT_EQ(put->events[0].type, WatchEvent::Type::put);
  EXPECT_EQ(put->events[0].kv.key, "/rkv/t/members/a:1");
  EXPECT_EQ(put->events[0].kv.value, R"({"x":1})");
  EXPECT_EQ(put->events[0].kv.mod_revision, 2);
  const auto del = parse_watch(
      R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"4","raft_term":"2"},"events":[{"type":"DELETE","kv":{"key":"L3Jrdi90L21lbWJlcnMvYTox","mod_revision":"4"}}]}})",
      why);
  ASSERT_TRUE(del) << why;
  ASSERT_EQ(del->events.size(), 1U);
  EXPECT_EQ(del->events[0].type, WatchEvent::Type::del);
  EXPECT_EQ(del->events[0].kv.key, "/rkv/t/members/a:1");
  EXPECT_TRUE(del->events[0].kv.value.empty());
  // A start revision etcd compacted away: created, then canceled.
  const auto compacted = parse_watch(
      R"({"result":{"header":{"cluster_id":"1","member_id":"2","raft_term":"2"},"canceled":true,"compact_revision":"4"}})",
      why);
  ASSERT_TRUE(compacted) << why;
  EXPECT_TRUE(compacted->canceled);
  EXPECT_EQ(compacted->compact_revision, 4);
  // A request the gateway refused: one error line.
  why.clear();
  EXPECT_FALSE(parse_watch(
      R"({"error":"illegal base64 data at input byte 0","message":"illegal base64 data at input byte 0","code":2})",
      why));
  EXPECT_NE(why.find("illegal base64"), std::string::npos) << why;
}

TEST(EtcdWire, HostileWatchLinesParseToAnError) {
  for (const char* line : {
           "", "{", "[]", R"({"result":5})", R"({"result":{"header":7}})",
           R"({"result":{"header":{"revision":"x"}}})", R"({"result":{"header":{},"created":"yes"}})",
           R"({"result":{"header":{},"events":{}}})", R"({"result":{"header":{},"events":[5]}})",
           R"({"result":{"header":{},"events":[{"type":"PUT"}]}})",
           R"({"result":{"header":{},"events":[{"type":"MOVE","kv":{"key":"Zm9v"}}]}})",
           R"({"result":{"header":{},"events":[{"type":7,"kv":{"key":"Zm9v"}}]}})",
           R"({"result":{"header":{},"events":[{"kv":{"key":"Zm9v","value":"!!"}}]}})",
           R"({"result":{"header":{},"events":[{"kv":{"value":"Zm9v"}}]}})",
           R"({"result":{"header":{},"events":[{"kv":{"key":"Zm9v","mod_revision":"-"}}]}})",
           R"({"error":{"grpc_code":1}})",
       }) {
    std::string why;
    EXPECT_FALSE(parse_watch(line, why)) << line;
    EXPECT_FALSE(why.empty()) << line;
  }
}

TEST(EtcdWire, HostileRepliesParseToAnErrorNeverAThrow) {
  const char* hostile[] = {
      "",
      "not json",
      "[]",
      "42",
      R"({"ID":"x","TTL":"3"})",
      R"({"ID":"12","TTL":"3x"})",
      R"({"ID":"99999999999999999999","TTL":"3"})",
      R"({"ID":{},"TTL":"3"})",
      R"({"ID":"0","TTL":"3"})",
      R"({"error":"no","ID":"1","TTL":"3"})",
      R"({"result":5})",
      R"({"header":{"revision":"2"},"kvs":{}})",
      R"({"header":{"revision":"2"},"kvs":[7]})",
      R"({"header":{"revision":"2"},"kvs":[{"key":"!!!!"}]})",
      R"({"header":{"revision":"2"},"kvs":[{"key":"Zm9v","value":5}]})",
      R"({"header":7})",
      R"({"kvs":[]})",
      "{\"header\":{\"revision\":\"2\"},\"kvs\":[{\"key\":\"Zm9v\"",
  };
  for (const char* body : hostile) {
    std::string why;
    EXPECT_FALSE(parse_grant(body, why)) << body;
    why.clear();
    const auto k = parse_keepalive(body, why);
    if (k) {
      EXPECT_NE(std::string(body).find("result"), std::string::npos) << body;
    }
    why.clear();
    EXPECT_FALSE(parse_range(body, why)) << body;
    EXPECT_FALSE(why.empty()) << body;
    (void)error_message(body);
  }
}

TEST(Keyspace, ParsesClusterAddresses) {
  ClusterUrl url;
  std::string why;
  ASSERT_TRUE(parse_cluster_url("etcd://127.0.0.1:23790/prod-1", url, why)) << why;
  ASSERT_EQ(url.etcd.size(), 1u);
  EXPECT_EQ(url.etcd[0].host, "127.0.0.1");
  EXPECT_EQ(url.etcd[0].port, 23790);
  EXPECT_EQ(url.name, "prod-1");
  EXPECT_EQ(url.endpoints(), std::vector<std::string>{"http://127.0.0.1:23790"});
  EXPECT_EQ(url.members_prefix(), "/rkv/prod-1/members/");
  EXPECT_EQ(url.text(), "etcd://127.0.0.1:23790/prod-1");
  ASSERT_TRUE(parse_cluster_url("etcd://[::1]/c", url, why)) << why;
  EXPECT_EQ(url.etcd[0].port, kDefaultEtcdPort);
  EXPECT_EQ(url.endpoints(), std::vector<std::string>{"http://[::1]:2379"});
  // Several members of an etcd cluster, in the order written.
  ASSERT_TRUE(parse_cluster_url("etcd://e1:2381,10.0.0.2,[::1]:2390/c", url, why)) << why;
  EXPECT_EQ(url.endpoints(), (std::vector<std::string>{"http://e1:2381", "http://10.0.0.2:2379", "http://[::1]:2390"}));
  EXPECT_EQ(url.text(), "etcd://e1:2381,10.0.0.2:2379,[::1]:2390/c");
  for (const char* bad : {"etcd://", "etcd://h", "etcd://h/", "etcd:///c", "etcd://h:0/c", "etcd://h:x/c",
                          "etcd://h/c/d", "etcd://h/c d", "http://h/c", "etcd://h/../x", "etcd://a_b/c",
                          "etcd://h\"[::1]/c", "etcd://h@x:1/c", "etcd://h?x/c", "etcd://a,/c",
                          "etcd://,a/c", "etcd://a,,b/c", "etcd://a,a:2379/c", "etcd://a,b_c/c"}) {
    EXPECT_FALSE(parse_cluster_url(bad, url, why)) << bad;
  }
  EXPECT_TRUE(is_cluster_url("etcd://x"));
  EXPECT_FALSE(is_cluster_url("h1:7471,h2"));
}

TEST(Keyspace, MemberRecordsRoundTripAndStrangersAreRefused) {
  const Member m{"10.0.2.15", 7471, 1u << 30};
  EXPECT_EQ(m.id(), "10.0.2.15:7471");
  ClusterUrl url{{proto::ServerAddr{"h", 2379, "h:2379"}}, "c"};
  EXPECT_EQ(member_key(url, m), "/rkv/c/members/10.0.2.15:7471");
  std::string why;
  const auto back = parse_member(member_value(m), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->host, m.host);
  EXPECT_EQ(back->port, m.port);
  EXPECT_EQ(back->capacity, m.capacity);
  EXPECT_FALSE(back->draining);
  EXPECT_EQ(member_value(m).find("draining"), std::string::npos) << "only a draining member says so";
  Member leaving = m;
  leaving.draining = true;
  const auto drains = parse_member(member_value(leaving), why);
  ASSERT_TRUE(drains) << why;
  EXPECT_TRUE(drains->draining);
  for (const char* bad : {"", "x", "[]", R"({"port":1})", R"({"host":"","port":1})", R"({"host":"h"})",
                          R"({"host":"h","port":0})", R"({"host":"h","port":70000})", R"({"host":"h","port":-1})",
                          R"({"host":"h","port":"1"})", R"({"host":"h","port":1,"capacity":-5})",
                          R"({"host":"h","port":1,"draining":1})", R"({"host":"h","port":1,"draining":"yes"})"}) {
    EXPECT_FALSE(parse_member(bad, why)) << bad;
  }
}

}  // namespace
}  // namespace rkv::cluster
