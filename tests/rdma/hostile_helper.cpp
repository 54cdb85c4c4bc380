// hostile_helper: a raw-verbs client process (raw_client.hpp) that the
// hostile_e2e tests SIGKILL in the middle of a rendezvous transfer. A process
// of its own, started by exec, so its verbs resources die with it (a forked
// child of a process that used verbs would share the parent's contexts).
//
//   hostile_helper ADDR PORT set KEY SIZE        SET of SIZE bytes by descriptor:
//       once the SET's SEND completed, the QP stops answering (to error), so
//       the server's RDMA READ of the value cannot finish; prints "go".
//   hostile_helper ADDR PORT get-write KEY SIZE  GET offering a SIZE-byte buffer:
//       once the server's RDMA WRITE has put the value's first byte there,
//       the QP stops answering, so the WRITE cannot finish; prints "go", or
//       "late" if the value's last byte had landed too (the WRITE finished
//       before the QP stopped: a busy guest let it win; the test tries again).
//   hostile_helper ADDR PORT get-pull KEY SIZE   GET without an offer: the
//       reply's descriptor is READ from the server (SIZE bytes); prints "go"
//       once the READ is posted.
// "go" is followed by this client's address ("go ADDR:PORT"), the peer
// address kvd logs when it drops the connection.
//
// Then it keeps polling until it is killed. Exit 1 (with a message on
// stderr) if a step fails. Single-threaded.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "proto/encode.hpp"
#include "raw_client.hpp"

namespace {

using namespace std::chrono_literals;
using rkv::test::RawClient;
using rkv::test::RawReply;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "hostile_helper: %s\n", why.c_str());
  std::exit(1);
}

void nap() { std::this_thread::sleep_for(200us); }

// "go ADDR:PORT": the transfer is under way; the address kvd knows this client by.
void go(const RawClient& c) {
  std::printf("go %s\n", c.local_address().c_str());
  std::fflush(stdout);
}

// Waits for the SEND of the one request sent so far to complete.
void wait_sent(RawClient& c) {
  if (!rkv::test::wait_until([&] { return c.sends_completed() >= 1; }, 60s, nap, {&c})) die("the SEND never completed");
  if (!c.send_errors().empty()) die("the SEND failed");
}

int run(const std::string& addr, std::uint16_t port, const std::string& mode, const std::string& key,
        std::size_t size) {
  RawClient c(addr, port, 8);
  if (!rkv::test::wait_until([&] { return c.established() || c.failed(); }, 60s, nap, {&c}) || !c.established()) {
    die("no connection: " + c.failure());
  }
  std::vector<std::byte> mem(size + 1, std::byte{0});
  const auto buf = std::span<std::byte>(mem).first(size);
  if (mode == "set") {
    std::memset(buf.data(), 'h', buf.size());
    const auto& mr = c.register_memory(buf, rkv::verbs::Access::remote_read);
    if (c.send_request(rkv::proto::msg::set_request_rdv(1, key, {mr.addr(), mr.rkey(), 0}, size)) != 0) {
      die("post of the SET failed");
    }
    wait_sent(c);
    if (c.stop_answering() != 0) die("to_error failed");
    go(c);
  } else if (mode == "get-write") {
    const auto& mr =
        c.register_memory(buf, rkv::verbs::Access::local_write | rkv::verbs::Access::remote_write);
    if (c.send_request(rkv::proto::msg::get_request_rdv(1, key, {mr.addr(), mr.rkey(), 0}, size)) != 0) {
      die("post of the GET failed");
    }
    // The WRITE is under way once its first byte (nonzero in the test's value) landed.
    volatile const std::byte* first = buf.data();
    if (!rkv::test::wait_until([&] { return *first != std::byte{0}; }, 60s, [] {}, {&c})) {
      die("the server's WRITE never started");
    }
    if (c.stop_answering() != 0) die("to_error failed");
    // rxe places a WRITE's packets in order: the last byte lands last.
    volatile const std::byte* last = buf.data() + buf.size() - 1;
    if (*last != std::byte{0}) {
      std::printf("late %s\n", c.local_address().c_str());
      std::fflush(stdout);
    } else {
      go(c);
    }
  } else if (mode == "get-pull") {
    const auto& mr = c.register_memory(buf, rkv::verbs::Access::local_write);
    if (c.send_request(rkv::proto::msg::get_request(1, key)) != 0) die("post of the GET failed");
    std::optional<RawReply> r;
    if (!rkv::test::wait_until([&] { return (r = c.take_reply(1)).has_value(); }, 60s, nap, {&c})) {
      die("no GET reply");
    }
    if (!r->rdv || r->header.value_len != size) die("the GET reply names no value of the expected size to pull");
    if (c.post_read(buf, mr.lkey(), r->rdv->addr, r->rdv->rkey) != 0) die("post of the READ failed");
    go(c);
  } else {
    die("unknown mode " + mode);
  }
  for (;;) {  // stay connected until SIGKILL
    c.poll();
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: hostile_helper ADDR PORT set|get-write|get-pull KEY SIZE\n");
    return 2;
  }
  try {
    return run(argv[1], static_cast<std::uint16_t>(std::stoul(argv[2])), argv[3], argv[4],
               static_cast<std::size_t>(std::stoull(argv[5])));
  } catch (const std::exception& e) {
    die(e.what());
  }
}
