#pragma once
// The protocol suite's ServerConn fixture: a ServerConn over FakeLink with
// its pools, store and arena, and helpers to deliver requests and read the
// replies it posts (test_server_conn*.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "fake_registrar.hpp"
#include "server_request.hpp"
#include "wire_helpers.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/server_conn.hpp"
#include "proto/placement.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::server::conn_test {


using proto::Opcode;
using proto::Status;
using test::FakeLink;
using verbs::CompletionOpcode;
using verbs::CompletionStatus;
using verbs::WrId;
using verbs::WrKind;

constexpr std::uint16_t kCredits = 4;
constexpr std::uint32_t kGen = 7;

inline std::span<const std::byte> bytes_of(const std::string& s) { return proto::as_bytes(s); }

using test::pack;

inline std::vector<std::byte> raw_header(const proto::RawHeader& h) {
  std::vector<std::byte> out(proto::kHeaderSize);
  proto::write_raw_header(std::span<std::byte, proto::kHeaderSize>(out.data(), proto::kHeaderSize), h);
  return out;
}

struct Reply {
  proto::Header header;
  std::string value;
};

inline std::vector<Reply> decode_all(const std::vector<std::byte>& send) {
  std::vector<Reply> out;
  proto::Decoder dec(send);
  for (;;) {
    auto r = dec.next();
    if (std::holds_alternative<proto::EndOfBuffer>(r)) break;
    if (const auto* e = std::get_if<proto::DecodeError>(&r)) {
      ADD_FAILURE() << "server sent an undecodable reply: " << to_string(e->reason);
      break;
    }
    const auto& m = std::get<proto::MessageView>(r);
    out.push_back({m.header, std::string(m.value_text())});
  }
  return out;
}

// A ServerConn's configuration over these test objects: generation kGen,
// the peer's receives 8 KiB, `credits` growing up to `max_credits` (0: no growth).
inline ServerConnConfig fake_conn_config(std::uint16_t credits, std::uint16_t max_credits, const char* label,
                                         ServerCounters& counters, Store& store, LatencyHistograms& latency,
                                         ShardGate& gate) {
  ServerConnConfig cfg;
  cfg.credits = credits;
  cfg.max_credits = max_credits;
  cfg.generation = kGen;
  cfg.peer_recv_size = 8192;
  cfg.label = label;
  cfg.stats = test::stats_of(counters, store);
  cfg.latency = &latency;
  cfg.gate = &gate;
  return cfg;
}

class ServerConnTest : public ::testing::Test {
 protected:
  explicit ServerConnTest(std::uint32_t send_count = 8, std::size_t send_size = 8192)
      : recv_(kCredits, 8192), send_(send_count, send_size), arena_(reg_, {4096, 1u << 20, 64u << 20}) {}

  void SetUp() override { make(); }

  void make(std::uint32_t reply_batch = 0) {
    ServerConnConfig cfg = fake_conn_config(kCredits, 0, "fake-peer", counters_, store_, latency_, gate_);
    cfg.reply_batch = reply_batch;
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });  // as Server::make_pd
    conn_.reset();  // its buffers go back to the pools first
    conn_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, cfg);
    ASSERT_EQ(conn_->start(), Verdict::keep);
    ASSERT_EQ(link_.recvs.size(), kCredits);
    conn_->on_established();
  }

  // Delivers `bytes` into the oldest posted, not yet used receive.
  Verdict deliver(const std::vector<std::byte>& bytes) {
    EXPECT_LT(next_recv_, link_.recvs.size()) << "no receive posted for this SEND";
    return conn_->on_completion(FakeLink::deliver(link_.recvs.at(next_recv_++), bytes));
  }

  // Flushes and returns every reply of the SENDs posted since the last call.
  std::vector<Reply> flush_replies() {
    EXPECT_EQ(conn_->flush(), Verdict::keep);
    std::vector<Reply> all;
    for (; next_send_ < link_.sends.size(); ++next_send_) {
      auto r = decode_all(link_.sends[next_send_].bytes);
      all.insert(all.end(), r.begin(), r.end());
    }
    return all;
  }

  // One request alone: the status of its reply (its send buffer is given
  // back for the next).
  Status status_of(const proto::MessageSpec& m) {
    EXPECT_EQ(deliver(pack({m})), Verdict::keep);
    const auto r = flush_replies();
    EXPECT_EQ(r.size(), 1u);
    if (!link_.sends.empty()) complete_send(link_.sends.size() - 1);
    return r.empty() ? Status::internal : r[0].header.status;
  }

  void complete_send(std::size_t i) {
    EXPECT_EQ(conn_->on_completion(FakeLink::complete(link_.sends.at(i), CompletionOpcode::send)), Verdict::keep);
  }

  FakeLink link_;
  BufferPool recv_;
  BufferPool send_;
  Store store_;
  ServerCounters counters_;
  kv::server::LatencyHistograms latency_;
  kv::server::ShardGate gate_;  // open: a static list's server
  test::FakeRegistrar reg_;
  Arena arena_;
  std::unique_ptr<ServerConn> conn_;
  std::size_t next_recv_ = 0;
  std::size_t next_send_ = 0;
  std::size_t completed_ = 0;
};


}  // namespace rkv::kv::server::conn_test
