// churn_helper: connection churn for the churn_e2e test. One process, one
// thread, CLIENTS raw-verbs connections (raw_client.hpp) at a time, CONNECTS
// connections in all. Each connection, in turn:
//   - SETs its client's keys (eager values; one of 32 KiB by descriptor),
//     GETs them back and checks the bytes, up to 4 requests in flight;
//   - every 3rd connection leaves mid-operation: it disconnects with requests
//     in flight (sometimes with a pulled GET it never RELEASEd);
//   - the others RELEASE what they pulled and disconnect once every reply came.
// Client i of the process uses the keys churn-<FIRST+i>-<k> (k < 4), so every
// run of the helper writes the same keys (the store does not grow with the
// number of connects).
//
//   churn_helper ADDR PORT FIRST CLIENTS CONNECTS
//
// Prints "connects N" (stdout, flushed) after each connection is established;
// exits 0 when done, 1 on a failure (no connection, a wrong reply).
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "proto/encode.hpp"
#include "raw_client.hpp"

namespace {

using namespace std::chrono_literals;
using rkv::test::RawClient;
namespace msg = rkv::proto::msg;

constexpr std::size_t kLarge = 32u << 10;
constexpr int kKeys = 4;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "churn_helper: %s\n", why.c_str());
  std::exit(1);
}

enum class Phase : std::uint8_t { connecting, working, closing, idle };

struct Slot {
  int client = 0;  // FIRST + index: names the keys
  std::unique_ptr<RawClient> c;
  Phase phase = Phase::idle;
  int step = 0;           // next request of the script
  int in_flight = 0;      // requests sent, replies not taken
  bool leave_early = false;
  std::uint32_t next_req = 1;
  std::chrono::steady_clock::time_point since;
  std::vector<std::byte> large;  // the descriptor SET's source
  std::optional<std::uint32_t> pulled;  // a pulled GET not yet RELEASEd
};

std::string key_of(int client, int k) { return "churn-" + std::to_string(client) + "-" + std::to_string(k); }
std::string value_of(int client, int k) { return "v" + std::to_string(client * 31 + k) + std::string(40 + k * 100, 'c'); }

// The script of one connection: SET k (k < kKeys; k == 0 by descriptor), then GET k.
constexpr int kSteps = 2 * kKeys;

void send_step(Slot& s) {
  RawClient& c = *s.c;
  const std::uint32_t id = s.next_req++;
  int rc = 0;
  if (s.step < kKeys) {
    const int k = s.step;
    if (k == 0) {
      const auto& mr = c.register_memory(s.large, rkv::verbs::Access::remote_read);
      rc = c.send_request(msg::set_request_rdv(id, key_of(s.client, 0), {mr.addr(), mr.rkey(), 0}, kLarge));
    } else {
      const std::string v = value_of(s.client, k);
      rc = c.send_request(msg::set_request(id, key_of(s.client, k), rkv::proto::as_bytes(v)));
    }
  } else {
    rc = c.send_request(msg::get_request(id, key_of(s.client, s.step - kKeys)));
  }
  if (rc != 0) die("post failed: errno " + std::to_string(rc));
  ++s.step;
  ++s.in_flight;
}

// Takes every reply that came; checks it.
void take_replies(Slot& s) {
  RawClient& c = *s.c;
  for (std::uint32_t id = 1; id < s.next_req; ++id) {
    auto r = c.take_reply(id);
    if (!r) continue;
    --s.in_flight;
    if (r->header.status != rkv::proto::Status::ok) die("request " + std::to_string(id) + " failed");
    const int step = static_cast<int>(id) - 1;
    if (step >= kKeys) {
      const int k = step - kKeys;
      if (!r->header.found()) die("GET of " + key_of(s.client, k) + ": not found");
      if (k == 0) {
        if (!r->rdv || r->header.value_len != kLarge) die("GET of the large key: no descriptor");
        s.pulled = id;
      } else if (r->value != value_of(s.client, k)) {
        die("GET of " + key_of(s.client, k) + ": wrong bytes");
      }
    }
  }
}

int run(const std::string& addr, std::uint16_t port, int first, int clients, int connects, bool polite) {
  std::vector<Slot> slots(static_cast<std::size_t>(clients));
  int started = 0;
  int established = 0;
  auto start = [&](Slot& s) {
    s.c = std::make_unique<RawClient>(addr, port, 4, rkv::test::Handshake::complete, 8);
    s.phase = Phase::connecting;
    s.step = 0;
    s.in_flight = 0;
    s.next_req = 1;
    s.pulled.reset();
    s.leave_early = !polite && started % 3 == 2;
    s.since = std::chrono::steady_clock::now();
    ++started;
  };
  for (int i = 0; i < clients; ++i) {
    slots[static_cast<std::size_t>(i)].client = first + i;
    slots[static_cast<std::size_t>(i)].large.assign(kLarge, std::byte{static_cast<unsigned char>('A' + i % 26)});
    if (started < connects) start(slots[static_cast<std::size_t>(i)]);
  }
  for (;;) {
    bool busy = false;
    for (auto& s : slots) {
      if (s.phase == Phase::idle) continue;
      busy = true;
      s.c->poll();
      if (std::chrono::steady_clock::now() - s.since > 120s) die("a connection made no progress for 120 s");
      switch (s.phase) {
        case Phase::connecting:
          if (s.c->failed()) die("connect failed: " + s.c->failure());
          if (!s.c->established()) break;
          std::printf("connects %d\n", ++established);
          std::fflush(stdout);
          s.phase = Phase::working;
          s.since = std::chrono::steady_clock::now();
          [[fallthrough]];
        case Phase::working: {
          if (s.c->disconnected() || s.c->failed()) die("kvd dropped a well-behaved connection");
          take_replies(s);
          while (s.step < kSteps && s.in_flight < 3 && s.c->credits() > 1) send_step(s);
          const bool mid = s.leave_early && s.step >= kKeys + 1;  // requests (maybe a pull) in flight
          const bool done = s.step == kSteps && s.in_flight == 0;
          if (!mid && !done) break;
          if (done && s.pulled) {  // a polite client gives the pin back
            if (s.c->send_request(msg::release(*s.pulled)) != 0) die("RELEASE failed");
          }
          s.c->disconnect();
          s.phase = Phase::closing;
          s.since = std::chrono::steady_clock::now();
          break;
        }
        case Phase::closing:
          if (!s.c->disconnected() && std::chrono::steady_clock::now() - s.since < 5s) break;
          s.c.reset();
          s.phase = Phase::idle;
          if (started < connects) start(s);
          break;
        case Phase::idle: break;
      }
    }
    if (!busy) break;
    // Sleep until a CM event, or 5 ms (replies are found by the next CQ poll):
    // 8 processes of these share the guest's 2 vCPUs with kvd, and a
    // non-blocking poll loop would take most of them.
    std::vector<pollfd> fds;
    for (const auto& s : slots) {
      if (s.c) fds.push_back({s.c->cm_fd(), POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 5) < 0 && errno != EINTR) die("poll failed");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // "polite": no connection leaves mid-operation, so every key is written
  // (the test's warm-up: a client leaving during its large SET's READ would
  // leave that key unwritten, and a later round would then add it).
  const bool polite = argc == 7 && std::string_view(argv[6]) == "polite";
  if (argc != 6 && !polite) {
    std::fprintf(stderr, "usage: churn_helper ADDR PORT FIRST CLIENTS CONNECTS [polite]\n");
    return 2;
  }
  try {
    return run(argv[1], static_cast<std::uint16_t>(std::stoul(argv[2])), std::stoi(argv[3]), std::stoi(argv[4]),
               std::stoi(argv[5]), polite);
  } catch (const std::exception& e) {
    die(e.what());
  }
}
