// leaderboard: a program that embeds the store's server with an operation of
// its own (docs/architecture.md "Handlers", docs/protocol.md "CALL").
//
//   leaderboard --bind ADDR [--port N]     (prints "leaderboard: listening on ADDR:PORT")
//
// CALL opcode 0x1000, TOPK_ADD: request = key_len u16 | key | score i64 |
// member (the rest), little-endian. The key's value is its board: up to 10
// lines "score member\n", highest score first (a member already on it keeps
// its higher score). The reply is the board after the add. The board is an
// ordinary value: GET (also one-sided) reads it, DEL drops it. Everything
// else is the stock server (SET/GET/DEL, rendezvous, the one-sided index).
//
// The handler runs on the server's reactor thread, reads and writes the Store
// only through StoreAccess and never blocks.
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kv/server/server.hpp"
#include "kv/store/store.hpp"
#include "reactor/reactor.hpp"

namespace {

using rkv::kv::server::ReplyWriter;
using rkv::kv::server::StoreAccess;

constexpr std::uint16_t kTopkAdd = 0x1000;
constexpr std::size_t kTop = 10;

struct Entry {
  std::int64_t score;
  std::string member;
};

std::uint64_t load_le(std::span<const std::byte> b, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint64_t>(b[i]);
  return v;
}

// "score member\n" lines; a line that does not parse ends the board.
std::vector<Entry> parse_board(std::string_view text) {
  std::vector<Entry> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto sp = text.find(' ');
    if (nl == std::string_view::npos || sp == std::string_view::npos || sp > nl) break;
    Entry e{};
    if (std::from_chars(text.data(), text.data() + sp, e.score).ec != std::errc{}) break;
    e.member.assign(text.substr(sp + 1, nl - sp - 1));
    out.push_back(std::move(e));
    text.remove_prefix(nl + 1);
  }
  return out;
}

void topk_add(std::span<const std::byte> req, ReplyWriter& reply, StoreAccess& store) {
  if (req.size() < 2) return reply.refuse();
  const std::size_t klen = load_le(req, 2);
  if (klen == 0 || req.size() < 2 + klen + 8) return reply.refuse();
  const std::string key(reinterpret_cast<const char*>(req.data()) + 2, klen);
  const auto score = static_cast<std::int64_t>(load_le(req.subspan(2 + klen), 8));
  const std::string member(reinterpret_cast<const char*>(req.data()) + 2 + klen + 8, req.size() - 2 - klen - 8);
  if (member.empty() || member.find('\n') != std::string::npos) return reply.refuse();

  std::vector<Entry> board;
  if (const auto cur = store.get(key)) board = parse_board(*cur);
  const auto it = std::find_if(board.begin(), board.end(), [&](const Entry& e) { return e.member == member; });
  if (it == board.end()) {
    board.push_back({score, member});
  } else {
    it->score = std::max(it->score, score);
  }
  std::stable_sort(board.begin(), board.end(), [](const Entry& a, const Entry& b) { return a.score > b.score; });
  if (board.size() > kTop) board.resize(kTop);
  std::string text;
  for (const auto& e : board) text += std::to_string(e.score) + " " + e.member + "\n";
  if (!store.set(key, text)) throw std::runtime_error("no memory for the board");
  reply.append(text);
}

}  // namespace

int main(int argc, char** argv) {
  std::string bind = "0.0.0.0";
  unsigned long port = 7471;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--bind" && i + 1 < argc) {
      bind = argv[++i];
    } else if (a == "--port" && i + 1 < argc) {
      port = std::strtoul(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: leaderboard [--bind ADDR] [--port N]\n");
      return 2;
    }
  }
  try {
    rkv::reactor::Reactor reactor;
    rkv::kv::store::Store store;
    rkv::kv::server::Server* server_ptr = nullptr;
    auto signals = reactor.on_signals({SIGINT, SIGTERM}, [&](int) {
      if (server_ptr == nullptr || server_ptr->shutting_down()) return reactor.stop();
      server_ptr->shutdown([&reactor] { reactor.stop(); });
    });
    rkv::kv::server::ServerOptions opt;
    opt.bind_address = bind;
    opt.port = static_cast<std::uint16_t>(port);
    rkv::kv::server::Server server(reactor, store, opt);
    server_ptr = &server;
    server.handle(kTopkAdd, topk_add);
    std::printf("leaderboard: listening on %s:%u\n", bind.c_str(), static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    reactor.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "leaderboard: %s\n", e.what());
    return 1;
  }
  return 0;
}
