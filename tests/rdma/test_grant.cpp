// grant_e2e: kvd's grants (docs/protocol.md "SET by grant") over real verbs,
// with raw-verbs clients (raw_client.hpp) that ask for them: a large SET's
// reply carries a grant, a SET written into it by one WRITE WITH IMMEDIATE
// is stored without a READ and read back byte for byte, its reply carries
// the next grant; a client that did not ask gets none; a consumed grant's
// key, an immediate naming no grant and another connection's grant are
// refused, and each time only the offender loses its connection.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kvd_process.hpp"
#include "loopback.hpp"
#include "proto/connect_params.hpp"
#include "proto/crc32c.hpp"
#include "proto/grant.hpp"
#include "raw_client.hpp"

namespace rkv::test::grant_e2e {
namespace {

using namespace std::chrono_literals;

constexpr auto kStep = 60s;  // a hang guard per step, never a speed bound
constexpr std::size_t kBig = 65536;

void nap() { std::this_thread::sleep_for(1ms); }

class GrantE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    addr_ = verbs::test::softroce_addr();
    kvd_ = std::make_unique<KvdProcess>(RKV_KVD_PATH, addr_);
  }
  static void TearDownTestSuite() { kvd_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(kvd_) << "kvd did not start";
    before_ = stats();
  }

  static Stats stats() {
    auto s = kvd_->stats();
    EXPECT_TRUE(s.has_value()) << "kvd did not answer SIGUSR1";
    return s ? *s : Stats{};
  }
  std::int64_t moved(const std::string& name) {
    const Stats now = stats();
    EXPECT_EQ(now.count(name), 1u) << "kvd's stats have no " << name;
    if (now.count(name) == 0 || before_.count(name) == 0) return -1;
    return static_cast<std::int64_t>(now.at(name)) - static_cast<std::int64_t>(before_.at(name));
  }

  std::unique_ptr<RawClient> connect(bool grants) {
    auto c = std::make_unique<RawClient>(addr_, kvd_->port(), 8);
    if (grants) c->ask_features(proto::kFeatureGrants);
    EXPECT_TRUE(wait_until([&] { return c->established() || c->failed(); }, kStep, nap, {c.get()}));
    EXPECT_TRUE(c->established()) << c->failure();
    return c;
  }

  std::optional<RawReply> reply_to(RawClient& c, std::uint32_t req_id) {
    std::optional<RawReply> r;
    wait_until([&] { return (r = c.take_reply(req_id)).has_value() || c.disconnected(); }, kStep, nap, {&c});
    return r;
  }

  // A large SET by descriptor (kvd READs it): its reply.
  std::optional<RawReply> set_by_read(RawClient& c, const std::string& key, std::vector<std::byte>& value) {
    const auto& mr = c.register_memory(value, verbs::Access::remote_read);
    const std::uint32_t id = ++req_;
    EXPECT_EQ(c.send_request(proto::msg::set_request_rdv(id, key, {mr.addr(), mr.rkey(), proto::crc32c(value)},
                                                         value.size())),
              0);
    return reply_to(c, id);
  }

  // value | key | trailer, registered as a WRITE source, kept until the client goes.
  struct Written {
    std::vector<std::byte> bytes;
    std::uint32_t req_id = 0;
    std::uint32_t lkey = 0;
  };
  Written& build(RawClient& c, const std::string& key, const std::vector<std::byte>& value) {
    Written& w = written_.emplace_back();
    w.req_id = ++req_;
    w.bytes.resize(proto::granted_set_size(key.size(), value.size()));
    std::memcpy(w.bytes.data(), value.data(), value.size());
    std::memcpy(w.bytes.data() + value.size(), key.data(), key.size());
    proto::GrantedSet s;
    s.req_id = w.req_id;
    s.key = key;
    s.value = value;
    s.value_crc = proto::crc32c(value);
    proto::write_grant_trailer(std::span<std::byte>(w.bytes).last<proto::kGrantTrailerSize>(), s);
    w.lkey = c.register_memory(w.bytes, verbs::Access::none).lkey();
    return w;
  }
  static int write_into(RawClient& c, const Written& w, const proto::GrantDesc& g, std::uint32_t imm) {
    return c.post_write_imm(w.bytes, w.lkey, g.addr, g.rkey, imm);
  }

  // A SET of `value` under `key` written into grant `g` by `c`: answered
  // ok, and read back byte for byte. Its reply.
  std::optional<RawReply> set_by_grant(RawClient& c, const std::string& key, const std::vector<std::byte>& value,
                                       const proto::GrantDesc& g) {
    const Written& w = build(c, key, value);
    EXPECT_EQ(write_into(c, w, g, g.id), 0);
    auto r = reply_to(c, w.req_id);
    EXPECT_TRUE(r) << "no reply to the granted SET of " << key;
    if (r) {
      EXPECT_EQ(r->header.status, proto::Status::ok);
    }
    const auto got = get(c, key);
    EXPECT_TRUE(got) << key << " not found";
    if (got) {
      EXPECT_EQ(*got, value) << key << " not byte for byte";
    }
    return r;
  }
  // A SET of `value` under `key` written into grant `g` by `c`, which the
  // device must refuse (remote access error).
  void expect_refused(RawClient& c, const std::string& key, const std::vector<std::byte>& value,
                      const proto::GrantDesc& g, RawClient& other) {
    const Written& w = build(c, key, value);
    const std::size_t done = c.writes_completed();
    ASSERT_EQ(write_into(c, w, g, g.id), 0);
    ASSERT_TRUE(wait_until([&] { return c.writes_completed() > done; }, kStep, nap, {&c, &other}));
    ASSERT_FALSE(c.write_errors().empty()) << "the WRITE into " << key << "'s grant was not refused";
    EXPECT_EQ(c.write_errors().back().status, verbs::CompletionStatus::remote_access_error)
        << to_string(c.write_errors().back().status);
  }

  // The value under `key`, by message (pulled: READ from kvd, then RELEASE).
  std::optional<std::vector<std::byte>> get(RawClient& c, const std::string& key) {
    const std::uint32_t id = ++req_;
    if (c.send_request(proto::msg::get_request(id, key)) != 0) return std::nullopt;
    const auto r = reply_to(c, id);
    if (!r || !r->header.found()) return std::nullopt;
    if (!r->rdv) return std::vector<std::byte>(reinterpret_cast<const std::byte*>(r->value.data()),
                                                reinterpret_cast<const std::byte*>(r->value.data()) + r->value.size());
    auto& into = reads_.emplace_back(r->header.value_len);
    const auto& mr = c.register_memory(into, verbs::Access::local_write);
    const std::size_t done = c.reads_completed();
    EXPECT_EQ(c.post_read(into, mr.lkey(), r->rdv->addr, r->rdv->rkey), 0);
    EXPECT_TRUE(wait_until([&] { return c.reads_completed() > done; }, kStep, nap, {&c}));
    EXPECT_TRUE(c.read_errors().empty());
    EXPECT_EQ(c.send_request(proto::msg::release(id)), 0);
    return into;
  }

  static std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + i / 251) & 0xFF);
    return v;
  }

  static std::string addr_;
  static std::unique_ptr<KvdProcess> kvd_;
  Stats before_;
  std::uint32_t req_ = 0;
  std::deque<Written> written_;
  std::deque<std::vector<std::byte>> reads_;
  std::deque<std::vector<std::byte>> values_;
};
std::string GrantE2E::addr_;
std::unique_ptr<KvdProcess> GrantE2E::kvd_;

TEST_F(GrantE2E, ASetWrittenIntoAGrantIsStoredWithoutAReadAndReadBack) {
  auto c = connect(true);
  EXPECT_EQ(c->server_features(), proto::kFeatureGrants) << "kvd grants to a client that asks";
  auto& first = values_.emplace_back(pattern(kBig, 1));
  const auto r = set_by_read(*c, "g:first", first);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->header.status, proto::Status::ok);
  ASSERT_TRUE(r->grant) << "the reply to a large SET carries a grant";
  EXPECT_GE(r->header.value_len, proto::granted_set_size(7, kBig));

  const auto reads_before = stats().at("rdma_reads");
  auto& second = values_.emplace_back(pattern(kBig - 100, 2));
  const auto r2 = set_by_grant(*c, "g:second", second, *r->grant);
  ASSERT_TRUE(r2);
  EXPECT_TRUE(r2->grant) << "the next grant comes with its reply";
  EXPECT_TRUE(c->write_errors().empty());
  EXPECT_EQ(stats().at("rdma_reads"), reads_before) << "kvd READ nothing for it";
  EXPECT_EQ(moved("granted_sets"), 1);
  EXPECT_GE(moved("grants"), 2);
  const auto got_first = get(*c, "g:first");
  ASSERT_TRUE(got_first);
  EXPECT_EQ(*got_first, first);

  // The next grant takes the next SET the same way.
  auto& third = values_.emplace_back(pattern(1000, 3));
  ASSERT_TRUE(r2->grant);
  EXPECT_TRUE(set_by_grant(*c, "g:third", third, *r2->grant));
  EXPECT_EQ(moved("granted_sets"), 2);
  EXPECT_FALSE(c->disconnected());
}

TEST_F(GrantE2E, AClientThatDoesNotAskGetsNone) {
  auto c = connect(false);
  EXPECT_EQ(c->server_features(), 0u);
  auto& v = values_.emplace_back(pattern(kBig, 4));
  const auto r = set_by_read(*c, "g:plain", v);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header.status, proto::Status::ok);
  EXPECT_FALSE(r->grant);
  EXPECT_EQ(moved("grants"), 0);
}

// A grant is used once: its window is invalidated before the SET in it is
// checked, so writing through its key again (to change a stored value) is
// refused by the device, and the stored value stays what was acknowledged.
TEST_F(GrantE2E, AConsumedGrantsKeyWritesNothing) {
  auto bad = connect(true);
  auto good = connect(false);
  auto& v = values_.emplace_back(pattern(kBig, 5));
  const auto r = set_by_read(*bad, "g:once", v);
  ASSERT_TRUE(r && r->grant);
  auto& kept = values_.emplace_back(pattern(5000, 6));
  ASSERT_TRUE(set_by_grant(*bad, "g:kept", kept, *r->grant));
  auto& later = values_.emplace_back(pattern(5000, 7));
  expect_refused(*bad, "g:kept", later, *r->grant, *good);  // a consumed grant's key
  const auto got = get(*good, "g:kept");
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, kept) << "the acknowledged value, untouched";
}

TEST_F(GrantE2E, AnImmediateNamingNoGrantDropsOnlyThatClient) {
  auto bad = connect(true);
  auto good = connect(true);
  auto& v = values_.emplace_back(pattern(kBig, 8));
  const auto r = set_by_read(*bad, "g:imm", v);
  ASSERT_TRUE(r && r->grant);
  auto& x = values_.emplace_back(pattern(3000, 9));
  const Written& w = build(*bad, "g:imm2", x);
  ASSERT_EQ(write_into(*bad, w, *r->grant, r->grant->id + 7), 0);  // lands (the key is right), names nothing
  EXPECT_TRUE(wait_until([&] { return bad->disconnected(); }, kStep, nap, {bad.get(), good.get()}))
      << "kvd keeps a client whose immediate names no grant";
  EXPECT_EQ(moved("protocol_errors"), 1);
  EXPECT_EQ(moved("granted_sets"), 0);
  auto& y = values_.emplace_back(pattern(kBig, 10));
  const auto still = set_by_read(*good, "g:bystander", y);
  ASSERT_TRUE(still);
  EXPECT_EQ(still->header.status, proto::Status::ok);
  EXPECT_FALSE(get(*good, "g:imm2")) << "nothing stored";
}

// A window is bound to the connection it was granted to: another client's
// WRITE with its address and key is refused, and the grant still works for
// its own client afterwards.
TEST_F(GrantE2E, AnotherConnectionsGrantIsRefused) {
  auto owner = connect(true);
  auto thief = connect(true);
  auto& v = values_.emplace_back(pattern(kBig, 11));
  const auto r = set_by_read(*owner, "g:own", v);
  ASSERT_TRUE(r && r->grant);
  auto& stolen = values_.emplace_back(pattern(4000, 12));
  expect_refused(*thief, "g:stolen", stolen, *r->grant, *owner);
  auto& mine = values_.emplace_back(pattern(4000, 13));
  EXPECT_TRUE(set_by_grant(*owner, "g:mine", mine, *r->grant));
  EXPECT_FALSE(get(*owner, "g:stolen"));
}

}  // namespace
}  // namespace rkv::test::grant_e2e
