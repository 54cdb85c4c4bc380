#pragma once
// KvdTest: the gtest fixture of the rdma suites that drive a kvd child
// process (kvd_process.hpp) on $SOFTROCE_ADDR with in-process clients on one
// reactor. start() launches kvd (extra flags allowed, again after a stop to
// restart it); TearDown checks that kvd exits cleanly on SIGTERM.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kv/client/client.hpp"
#include "kvd_process.hpp"
#include "loopback.hpp"
#include "reactor/reactor.hpp"

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif

namespace rkv::test {

class KvdTest : public ::testing::Test {
 protected:
  void SetUp() override { addr_ = verbs::test::softroce_addr(); }
  void TearDown() override {
    if (kvd_) {
      EXPECT_EQ(kvd_->stop(), 0) << "kvd did not exit cleanly on SIGTERM";
    }
  }
  void start(std::vector<std::string> extra = {}) {
    kvd_ = std::make_unique<KvdProcess>(RKV_KVD_PATH, addr_, std::move(extra));
  }
  std::unique_ptr<kv::client::Client> open(const kv::client::ClientOptions& options = {}) {
    return kv::client::Client::connect(reactor_, addr_, kvd_->port(), options);
  }
  // kvd's counters (SIGUSR1); an empty map (and a failure) if it did not answer.
  std::map<std::string, std::uint64_t> kvd_stats() {
    auto s = kvd_->stats();
    EXPECT_TRUE(s.has_value()) << "kvd did not print its stats";
    return s.value_or(std::map<std::string, std::uint64_t>{});
  }

  std::string addr_;
  std::unique_ptr<KvdProcess> kvd_;
  reactor::Reactor reactor_;
};

}  // namespace rkv::test
