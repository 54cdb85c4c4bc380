// protocol suite: what makes ServerConn disconnect a peer: malformed
// buffers, reply opcodes from a client, a credit overrun; nothing of such a
// buffer is executed.
#include "server_conn_fixture.hpp"

namespace rkv::kv::server {
namespace {

using namespace conn_test;  // NOLINT(google-build-using-namespace)

struct Malformed {
  const char* name;
  std::vector<std::byte> bytes;
  proto::Reason reason;
};

std::vector<Malformed> malformed_cases() {
  std::vector<Malformed> v;
  const std::string val = "v";
  proto::RawHeader h;
  h.opcode = 0x01;
  h.key_len = 1;
  h.value_len = 1;
  auto with_payload = [](std::vector<std::byte> hdr, std::string_view payload) {
    for (char ch : payload) hdr.push_back(static_cast<std::byte>(ch));
    return hdr;
  };
  // `h` with one field changed by `edit`, then "kv".
  const auto forged = [&](const char* name, auto edit, proto::Reason reason) {
    auto x = h;
    edit(x);
    v.push_back({name, with_payload(raw_header(x), "kv"), reason});
  };
  forged("bad_magic", [](proto::RawHeader& x) { x.magic = 0x1234; }, proto::Reason::bad_magic);
  forged("unknown_opcode", [](proto::RawHeader& x) { x.opcode = 0x42; }, proto::Reason::unknown_opcode);
  forged("credits_in_request", [](proto::RawHeader& x) { x.credits = 3; }, proto::Reason::credits_in_request);
  forged("bad_key_len", [](proto::RawHeader& x) { x.key_len = 0; }, proto::Reason::bad_key_len);
  // value_len runs past the buffer
  forged("truncated_payload", [](proto::RawHeader& x) { x.value_len = 100; }, proto::Reason::truncated_payload);
  {
    auto x = raw_header(h);
    x.resize(10);
    v.push_back({"truncated_header", x, proto::Reason::truncated_header});
  }
  {
    // A valid SET followed by garbage: nothing of the buffer is executed.
    auto x = pack({proto::msg::set_request(1, "good", bytes_of(val))});
    auto bad = h;
    bad.version = 9;
    auto tail = with_payload(raw_header(bad), "kv");
    x.insert(x.end(), tail.begin(), tail.end());
    v.push_back({"valid_then_bad_version", x, proto::Reason::bad_version});
  }
  return v;
}

TEST_F(ServerConnTest, MalformedBufferDisconnectsAndStoresNothing) {
  for (const auto& m : malformed_cases()) {
    SCOPED_TRACE(m.name);
    link_ = FakeLink{};
    counters_ = {};
    next_recv_ = next_send_ = 0;
    make();
    ASSERT_EQ(deliver(m.bytes), Verdict::disconnect);
    EXPECT_EQ(conn_->state(), ConnState::draining);
    EXPECT_EQ(conn_->close_cause(), CloseCause::protocol_error);
    EXPECT_NE(conn_->disconnect_reason().find(to_string(m.reason)), std::string::npos) << conn_->disconnect_reason();
    EXPECT_EQ(store_.size(), 0u);
    EXPECT_EQ(conn_->flush(), Verdict::keep);
    EXPECT_TRUE(link_.sends.empty()) << "nothing is answered after a protocol error";
    EXPECT_EQ(link_.recvs.size(), kCredits) << "the bad buffer is not re-posted";
    EXPECT_EQ(counters_.protocol_errors, 1u);
  }
}

TEST_F(ServerConnTest, MalformedDelDisconnectsAndDeletesNothing) {
  const std::string value = "v";
  ASSERT_EQ(deliver(pack({proto::msg::set_request(1, "k", bytes_of(value))})), Verdict::keep);
  ASSERT_EQ(flush_replies().size(), 1u);
  auto bytes = pack({proto::msg::del_request(2, "k")});
  proto::RawHeader h;
  h.opcode = static_cast<std::uint8_t>(Opcode::del);
  h.key_len = 1;
  h.value_len = 1;
  const auto bad = raw_header(h);
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  bytes.push_back(std::byte{'k'});
  bytes.push_back(std::byte{'v'});
  ASSERT_EQ(deliver(bytes), Verdict::disconnect);
  EXPECT_EQ(conn_->close_cause(), CloseCause::protocol_error);
  EXPECT_NE(conn_->disconnect_reason().find(to_string(proto::Reason::value_not_allowed)), std::string::npos)
      << conn_->disconnect_reason();
  EXPECT_TRUE(store_.get("k").found);
  EXPECT_EQ(counters_.dels, 0u);
}

TEST_F(ServerConnTest, ReplyOpcodeFromClientDisconnects) {
  ASSERT_EQ(deliver(pack({proto::msg::set_reply(1, 0)})), Verdict::disconnect);
  EXPECT_EQ(conn_->close_cause(), CloseCause::protocol_error);
}

TEST_F(ServerConnTest, DelReplyFromClientDisconnects) {
  ASSERT_EQ(deliver(pack({proto::msg::del_reply(1, 0, true)})), Verdict::disconnect);
  EXPECT_EQ(conn_->close_cause(), CloseCause::protocol_error);
}

TEST_F(ServerConnTest, CreditOverrunDisconnects) {
  // kCredits SENDs, all handled (buffers re-posted) but no reply posted yet:
  // the client cannot have seen a returned credit, so a further SEND overruns.
  for (std::uint32_t i = 0; i < kCredits; ++i) {
    ASSERT_EQ(deliver(pack({proto::msg::get_request(i + 1, "k")})), Verdict::keep);
  }
  EXPECT_EQ(deliver(pack({proto::msg::get_request(99, "k")})), Verdict::disconnect);
  EXPECT_EQ(conn_->close_cause(), CloseCause::credit_overrun);
  EXPECT_EQ(counters_.credit_overruns, 1u);
}

TEST_F(ServerConnTest, SendAfterCreditsPostedIsNoOverrun) {
  for (std::uint32_t i = 0; i < kCredits; ++i) {
    ASSERT_EQ(deliver(pack({proto::msg::get_request(i + 1, "k")})), Verdict::keep);
  }
  (void)flush_replies();  // the returned credits are on the wire now
  for (std::uint32_t i = 0; i < kCredits; ++i) {
    ASSERT_EQ(deliver(pack({proto::msg::get_request(i + 10, "k")})), Verdict::keep);
  }
  EXPECT_EQ(conn_->state(), ConnState::established);
}

}  // namespace
}  // namespace rkv::kv::server
