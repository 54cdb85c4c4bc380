// ClusterWatch against a real etcd (Debian's etcd-server; scripts/setup
// --rdma installs it): the members it reports follow puts and deletes of
// member records, a record under another key than its id's is not a member,
// and when etcd is killed and started again on the same data the watch reads
// the members again and goes on watching. MapKeeper::member_gone revokes a
// member's lease only under the id and lease its view shows, once. A
// member whose lease lapsed joins again under the same lease, and a
// keeper holds a plan that would drop it meanwhile. Runs on the host (etcd and the
// reactor; no verbs). Every wait has a 60 s deadline; nothing is timed.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../temp_dir.hpp"
#include "cluster/etcd.hpp"
#include "cluster/etcd_wire.hpp"
#include "cluster/cluster_watch.hpp"
#include "cluster/map_keeper.hpp"
#include "cluster/membership.hpp"
#include "reactor/reactor.hpp"

extern char** environ;

namespace rkv::cluster {
namespace {

using namespace std::chrono_literals;
constexpr auto kDeadline = 60s;

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("no free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// One single-node etcd on free ports of 127.0.0.1, its data in a temp dir.
class Etcd {
 public:
  Etcd() : dir_("member-watch"), client_(free_port()), peer_(free_port()) { start(); }
  ~Etcd() { kill(SIGTERM); }
  Etcd(const Etcd&) = delete;
  Etcd& operator=(const Etcd&) = delete;

  [[nodiscard]] std::uint16_t port() const { return client_; }

  void start() {
    const std::string c = "http://127.0.0.1:" + std::to_string(client_);
    const std::string p = "http://127.0.0.1:" + std::to_string(peer_);
    const std::string log = dir_.path() + "/etcd.log";
    std::vector<std::string> args = {"etcd", "--name", "w", "--data-dir", dir_.path() + "/data", "--log-level", "warn",
                                     "--listen-client-urls", c, "--advertise-client-urls", c,
                                     "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                                     "--initial-cluster", "w=" + p};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t io;
    posix_spawn_file_actions_init(&io);
    posix_spawn_file_actions_addopen(&io, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&io, STDOUT_FILENO, STDERR_FILENO);
    const int rc = ::posix_spawnp(&pid_, "etcd", &io, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&io);
    if (rc != 0) throw std::runtime_error("cannot start etcd (Debian: etcd-server; scripts/setup --rdma installs it)");
  }

  [[nodiscard]] bool alive() {
    int status = 0;
    return pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == 0;
  }

  void kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  [[nodiscard]] std::string log() const {
    std::ifstream in(dir_.path() + "/etcd.log");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  test::TempDir dir_;
  std::uint16_t client_;
  std::uint16_t peer_;
  pid_t pid_ = -1;
};

class ClusterWatchTest : public ::testing::Test {
 protected:
  ClusterWatchTest() {
    url_.etcd = {proto::ServerAddr{"127.0.0.1", etcd_.port(), proto::server_id("127.0.0.1", etcd_.port())}};
    url_.name = "w";
    await_etcd();
  }

  // Runs the reactor until done() (false after the deadline).
  bool run_until(const std::function<bool()>& done) {
    const auto end = reactor::Reactor::now() + kDeadline;
    while (!done()) {
      if (reactor::Reactor::now() > end) return false;
      reactor_.run_once(100ms);
    }
    return true;
  }

  void await_etcd() {
    EtcdClient etcd(reactor_, url_.endpoints(), 2s);
    const auto end = reactor::Reactor::now() + kDeadline;
    while (!etcd.call(kPathRange, range_prefix_body("/")).ok) {
      ASSERT_TRUE(etcd_.alive()) << "etcd exited; its log:\n" << etcd_.log();
      ASSERT_LT(reactor::Reactor::now(), end) << "etcd did not answer; its log:\n" << etcd_.log();
      reactor_.run_once(200ms);
    }
  }

  void put(const std::string& key, const Member& m) { put_raw(key, member_value(m)); }
  void put_raw(const std::string& key, const std::string& value) {
    EtcdClient etcd(reactor_, url_.endpoints(), 10s);
    const EtcdReply r = etcd.call(kPathPut, put_body(key, value, 0));
    ASSERT_TRUE(r.ok) << r.error;
  }
  void del(const std::string& key) {
    EtcdClient etcd(reactor_, url_.endpoints(), 10s);
    const EtcdReply r = etcd.call(kPathDelete, delete_body(key));
    ASSERT_TRUE(r.ok) << r.error;
  }

  static std::vector<std::string> ids(const std::vector<Member>& members) {
    std::vector<std::string> out;
    for (const auto& m : members) out.push_back(m.id());
    return out;
  }

  Etcd etcd_;
  ClusterUrl url_;
  reactor::Reactor reactor_;
};

// An address naming several members of an etcd cluster, the first of which
// cannot be reached (nothing listens on port 1): a sync call tries the next,
// requests then go there, and reading and watching the cluster work.
TEST_F(ClusterWatchTest, AnUnreachableEtcdEndpointIsPassedOver) {
  ClusterUrl two = url_;
  two.etcd.insert(two.etcd.begin(), proto::ServerAddr{"127.0.0.1", 1, "127.0.0.1:1"});
  const Member a{"10.0.0.1", 7471, 1};
  {
    EtcdClient etcd(reactor_, two.endpoints(), 10s);
    ASSERT_EQ(etcd.endpoint(), "http://127.0.0.1:1");
    const EtcdReply r = etcd.call(kPathPut, put_body(member_key(two, a), member_value(a), 0));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(etcd.endpoint(), url_.endpoints()[0]) << "requests go on to the endpoint that answered";
  }
  {
    EtcdClient later(reactor_, two.endpoints(), 10s);
    EXPECT_EQ(later.endpoint(), url_.endpoints()[0]) << "a new client starts where the last one found etcd";
  }
  const ClusterView start = read_cluster(two, 10s);
  ASSERT_EQ(ids(start.members), std::vector<std::string>{a.id()});
  std::vector<std::string> seen;
  ClusterWatch watch(reactor_, start, [&](const ClusterView& v) { seen = ids(v.members); });
  const Member b{"10.0.0.2", 7471, 2};
  put(member_key(url_, b), b);
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{a.id(), b.id()}; }))
      << "state " << to_string(watch.state());
  del(member_key(url_, a));
  del(member_key(url_, b));
}

TEST_F(ClusterWatchTest, FollowsPutsAndDeletesAndSurvivesAnEtcdRestart) {
  const Member a{"10.0.0.1", 7471, 1};
  const Member b{"10.0.0.2", 7471, 2};
  const Member c{"10.0.0.3", 7471, 3};
  put(member_key(url_, a), a);
  const ClusterView start = read_cluster(url_, 10s);
  ASSERT_EQ(ids(start.members), std::vector<std::string>{a.id()});

  std::vector<std::string> seen;  // the last report
  std::optional<ShardMap> seen_map;
  int reports = 0;
  ClusterWatch watch(reactor_, start, [&](const ClusterView& v) {
    seen = ids(v.members);
    seen_map = v.map;
    ++reports;
  });

  // A record under another key than its id's is not a member; b's is.
  put(url_.members_prefix() + "someone-else", c);
  put(member_key(url_, b), b);
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{a.id(), b.id()}; }))
      << "reports " << reports << ", state " << to_string(watch.state());
  del(member_key(url_, a));
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{b.id()}; }));
  EXPECT_EQ(ids(watch.view().members), std::vector<std::string>{b.id()});

  // The map: put, replaced by one that does not parse (taken as none), put
  // again. A key of the cluster's that is neither changes nothing.
  const std::vector<std::string> one{b.id()};
  const ShardMap map = *plan_map(std::nullopt, one, std::vector<std::int64_t>{7}, MapShape{4, 0});
  put_raw(url_.map_key(), map_value(map));
  ASSERT_TRUE(run_until([&] { return seen_map == map; }));
  put_raw(url_.map_key(), "{\"epoch\": 1}");
  ASSERT_TRUE(run_until([&] { return !seen_map; }));
  const ShardMap next = *plan_map(map, std::vector<std::string>{b.id(), c.id()}, std::vector<std::int64_t>{7, 8}, MapShape{});
  put_raw(url_.map_key(), map_value(next));
  ASSERT_TRUE(run_until([&] { return seen_map == next; }));
  const int before = reports;
  put_raw(url_.prefix() + "something-else", "x");
  put_raw(url_.members_prefix() + "zz-not-a-member", "x");  // skipped: it was not a member either
  put(member_key(url_, a), a);                                 // a sentinel: the report after it
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{a.id(), b.id()}; }));
  EXPECT_EQ(reports, before + 1) << "a key that changed neither the members nor the map was reported";
  EXPECT_GT(watch.view().map_revision, 0);
  del(member_key(url_, a));
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{b.id()}; }));
  const std::uint64_t restarts = watch.restarts();

  // etcd dies and comes back on the same data: the stream ended; the watch
  // reads the members again and watches from there.
  etcd_.kill(SIGKILL);
  ASSERT_TRUE(run_until([&] { return watch.restarts() > restarts; })) << "the watch did not notice etcd dying";
  etcd_.start();
  await_etcd();
  put(member_key(url_, c), c);
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{b.id(), c.id()}; }))
      << "after etcd restarted: state " << to_string(watch.state()) << "; its log:\n" << etcd_.log();
  del(member_key(url_, b));
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{c.id()}; }));
  EXPECT_EQ(seen_map, next) << "the map read again after the restart";
  EXPECT_EQ(watch.state(), WatchState::watching);
}

// A member found gone (kvd: a backup's node refused a connect, nothing
// listening on its port) loses its lease only if the keeper's view shows it
// under that very lease: not under another lease (a new incarnation, which
// listens), not another member's; and only once. Then etcd deletes its
// record at once, and the other member stays.
TEST_F(ClusterWatchTest, AMemberFoundGoneLosesOnlyTheLeaseItWasSeenUnder) {
  MemberLease a(reactor_, url_, Member{"10.0.0.1", 7471, 1}, 60s);
  MemberLease b(reactor_, url_, Member{"10.0.0.2", 7471, 2}, 60s);
  std::vector<std::string> seen;
  const std::string a_id = "10.0.0.1:7471";
  const std::string b_id = "10.0.0.2:7471";
  MapKeeper keeper(reactor_, read_cluster(url_, 10s), MapShape{4, 0}, a_id, 0ms,
                   [&](const ClusterView& v) { seen = ids(v.members); });
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{a_id, b_id}; }));

  keeper.member_gone(b_id, b.lease() + 1);  // another incarnation's lease
  keeper.member_gone("10.0.0.9:7471", a.lease());  // a lease, but not that member's
  keeper.member_gone(b_id, 0);              // no lease known
  EXPECT_EQ(keeper.revoking(), 0U) << "a lease the view does not show under that member was revoked";

  keeper.member_gone(b_id, b.lease());
  keeper.member_gone(b_id, b.lease());  // reported again (the shipper retries): once is enough
  EXPECT_EQ(keeper.revoking(), 1U);
  ASSERT_TRUE(run_until([&] { return seen == std::vector<std::string>{a_id}; }))
      << "b's record is still there after its lease was revoked";
  ASSERT_TRUE(run_until([&] { return keeper.revoked() == 1; }));
  EXPECT_EQ(ids(read_cluster(url_, 10s).members), std::vector<std::string>{a_id});
  a.leave();
}

// A member whose lease lapsed (here: revoked by hand, as etcd expires it)
// joins again under the same lease ID, so it is the same incarnation; its
// record is put again at a later revision.
TEST_F(ClusterWatchTest, AMemberWhoseLeaseLapsedJoinsAgainUnderTheSameLease) {
  MemberLease a(reactor_, url_, Member{"10.0.0.1", 7471, 1}, 2s);
  const std::int64_t lease = a.lease();
  const std::int64_t first_put = a.record_revision();
  ASSERT_GT(first_put, 0);
  {
    EtcdClient etcd(reactor_, url_.endpoints(), 10s);
    ASSERT_TRUE(etcd.call(kPathRevoke, revoke_body(lease)).ok);
  }
  ASSERT_TRUE(run_until([&] { return a.rejoins() == 1 && a.state() == LeaseState::joined; }))
      << "state " << to_string(a.state()) << ", rejoins " << a.rejoins();
  EXPECT_EQ(a.lease(), lease) << "joined again under another lease: a new incarnation";
  EXPECT_GT(a.record_revision(), first_put);
  const ClusterView v = read_cluster(url_, 10s);
  ASSERT_EQ(v.members.size(), 1U);
  EXPECT_EQ(v.members[0].lease, lease);
  a.leave();
}

// A map transaction that drops an absent member lands only while that
// member's record is still absent (etcd compares its version with 0).
TEST_F(ClusterWatchTest, AMapPlannedWithoutAMemberDoesNotLandOnceItIsBack) {
  EtcdClient etcd(reactor_, url_.endpoints(), 10s);
  const std::vector<std::string> absent{url_.members_prefix() + "10.0.0.2:7471"};
  std::string why;
  auto r = etcd.call(kPathTxn, put_if_body(url_.map_key(), "one", 0, absent));
  ASSERT_TRUE(r.ok) << r.error;
  auto txn = parse_txn(r.body, why);
  ASSERT_TRUE(txn && txn->succeeded) << why << r.body;
  put(absent[0], Member{"10.0.0.2", 7471, 2});
  const std::int64_t map_rev = read_cluster(url_, 10s).map_revision;
  r = etcd.call(kPathTxn, put_if_body(url_.map_key(), "two", map_rev, absent));
  ASSERT_TRUE(r.ok) << r.error;
  txn = parse_txn(r.body, why);
  ASSERT_TRUE(txn) << why;
  EXPECT_FALSE(txn->succeeded) << "a map planned without 10.0.0.2 landed after its record was back";
  r = etcd.call(kPathTxn, put_if_body(url_.map_key(), "three", map_rev));
  txn = parse_txn(r.body, why);
  ASSERT_TRUE(txn) << why;
  EXPECT_TRUE(txn->succeeded) << "the map's own comparison failed: the test proves nothing";
}

// After a member's lease lapses, the keeper of another member holds the
// plan that would give that member's shards (no other owner: replicas 0)
// to members without their keys, and once the member is back under the
// same lease there is nothing to change: it keeps its shards, at their
// epochs. (Without the hold, they would have moved to a, empty.)
TEST_F(ClusterWatchTest, AShardWhoseOwnersAllLapsedWaitsForThemToJoinAgain) {
  const std::string a_id = "10.0.0.1:7471";
  const std::string b_id = "10.0.0.2:7471";
  MemberLease a(reactor_, url_, Member{"10.0.0.1", 7471, 1}, 60s);
  MemberLease b(reactor_, url_, Member{"10.0.0.2", 7471, 2}, 2s);
  std::optional<ShardMap> map;
  MapKeeper keeper(reactor_, read_cluster(url_, 10s), MapShape{4, 0}, a_id, 60s,
                   [&](const ClusterView& v) { map = v.map; });
  ASSERT_TRUE(run_until([&] { return map && map->primaries().size() == 2; })) << "no map for a and b";
  const ShardMap before = *map;
  {
    EtcdClient etcd(reactor_, url_.endpoints(), 10s);
    ASSERT_TRUE(etcd.call(kPathRevoke, revoke_body(b.lease())).ok);
  }
  ASSERT_TRUE(run_until([&] { return keeper.holds() == 1; })) << "the keeper did not hold the plan back";
  ASSERT_TRUE(run_until([&] { return b.rejoins() == 1 && b.state() == LeaseState::joined; }));
  ASSERT_TRUE(run_until([&] { return keeper.state() == KeeperState::idle; })) << to_string(keeper.state());
  const ClusterView v = read_cluster(url_, 10s);
  ASSERT_TRUE(v.map);
  EXPECT_EQ(v.map->shards, before.shards) << "b's shards moved while it was away";
  EXPECT_EQ(v.map->leases, before.leases);
  a.leave();
  b.leave();
}

}  // namespace
}  // namespace rkv::cluster
