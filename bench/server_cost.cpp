// bench/server_cost: what one small request costs kvd's CPU, natively
// (docs/performance.md, "Server CPU per operation"). No verbs, no guest: the
// server's protocol path -- ServerConn (kv/server) and the Store (kv/store),
// built with kvd's defaults (ServerOptions: credits, buffers, --reply-batch,
// the index and its arenas) -- is fed receive completions through the Link
// seam (bench/host_seams.hpp), as Server::service feeds it from a CQ drain:
// per client SEND one recv completion (the replies' SENDs that fill up on the
// way, every --reply-batch replies, are posted from inside it), one flush(),
// then the completions of those SENDs. The bench plays the client and the
// HCA: it copies pre-encoded requests into the posted receive buffer and
// checks every reply.
//
//   server_cost [--ops N] [--reps R] [--warmup N] [--keys K] [--value-size B]
//               [--op set,get] [--batch 32,1] [--index off,on] [--reply-batch N]
//               [--csv FILE]
//
// For each index mode (off: a Store of std::strings; on: kvd's default, the
// one-sided GET index attached, small values in arena blocks), each op and
// each batch size (requests per SEND: 32 is what a client at depth 32
// coalesces, 1 is depth 1), it runs --warmup ops, then --reps timed
// repetitions of --ops ops (steady_clock around each), and prints the median
// (and min, max) nanoseconds per op, and beside it the median of the
// thread's CPU time per op (CLOCK_THREAD_CPUTIME_ID: on a shared machine, a
// ns/op far above it means the bench was descheduled, not that the code got
// slower). The figures include the bench's own share (copying requests in,
// checking replies); bench/cpu runs the same binary under callgrind and
// splits instructions per op into the server's (server_path_*, below:
// ServerConn::on_completion and flush, inclusive) and the total.
//
// Checks, all of them, every run: every reply is decoded, in order, with
// the request's req_id, opcode and status ok; every SET's acknowledged
// version is remembered and every GET must return exactly those bytes; at
// the end every key in the Store holds its last acknowledged value and the
// server's counters match what was sent. Any mismatch: exit status 1.
// Speed is measured here, never asserted.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_seams.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/counters.hpp"
#include "kv/server/index_region.hpp"
#include "kv/server/server.hpp"
#include "kv/server/server_conn.hpp"
#include "kv/store/store.hpp"
#include "proto/crc32c.hpp"
#include "proto/encode.hpp"
#include "proto/endian.hpp"

namespace {

using rkv::bench::BenchLink;
using rkv::bench::HostRegistrar;
using rkv::kv::conn::BufferPool;
using rkv::kv::server::Arena;
using rkv::kv::server::IndexRegion;
using rkv::kv::server::ServerConn;
using rkv::kv::server::ServerConnConfig;
using rkv::kv::server::ServerCounters;
using rkv::kv::server::ServerOptions;
using rkv::kv::server::Verdict;
using rkv::kv::store::Store;
namespace proto = rkv::proto;

enum class Op : std::uint8_t { set, get };

struct Options {
  std::uint64_t ops = 200000;
  unsigned reps = 7;
  std::uint64_t warmup = 50000;
  std::uint32_t keys = 10000;
  std::size_t value_size = 32;
  std::vector<std::string> op_names{"set", "get"};
  std::vector<unsigned> batches{32, 1};
  std::vector<std::string> index_modes{"off", "on"};
  std::string csv;
  // kvd's defaults (ServerOptions), for a client announcing 32 credits (depth 32).
  ServerOptions kvd{};
  std::uint32_t reply_batch = kvd.reply_batch;
  std::uint16_t credits = kvd.credits;
  std::uint32_t send_buffers = std::min<std::uint32_t>(32, kvd.max_send_buffers);
  std::uint32_t buf_size = kvd.buf_size;
};

constexpr std::size_t kKeyLen = 10;  // "key" + 7 digits

std::string key_name(std::uint32_t k) {
  char b[16];
  std::snprintf(b, sizeof b, "key%07u", k);
  return b;
}

// The server's part of one client SEND, as Server::service runs it for a CQ
// drain: the recv completion (replies posted on the way included), then the
// flush; and a SEND completion. Never inlined and called only by the
// harness, so their inclusive cost in callgrind is exactly the server's
// instructions (bench/cpu sums server_path_*).
[[gnu::noipa]] Verdict server_path_recv(ServerConn& conn, const rkv::verbs::Completion& c) {
  const Verdict v = conn.on_completion(c);
  return v | conn.flush();
}
[[gnu::noipa]] Verdict server_path_sent(ServerConn& conn, const rkv::verbs::Completion& c) {
  return conn.on_completion(c);
}

// One server connection (ServerConn + Store as kvd builds them) and the
// client side that drives it.
class Harness {
 public:
  Harness(const Options& o, bool index)
      : o_(o),
        link_(o.credits + 1, 64),
        recv_(o.credits, o.buf_size),
        send_(o.send_buffers, o.buf_size),
        arena_(registrar_, o.kvd.arena),
        version_(o.keys, 0) {
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });  // as Server::make_pd
    if (index) {  // kvd's defaults: ServerOptions::index_buckets, small_arena
      small_ = std::make_unique<Arena>(registrar_, o.kvd.small_arena);
      index_ = std::make_unique<IndexRegion>(registrar_, o.kvd.index_buckets);
      store_.attach_index(index_->index(), [a = small_.get()](std::size_t n) { return a->allocate(n); });
    }
    ServerConnConfig cfg;  // as Server::on_connect_request fills it
    cfg.credits = o.credits;
    cfg.generation = 1;
    cfg.peer_recv_size = o.buf_size;
    cfg.limits.max_value = std::numeric_limits<std::uint64_t>::max();
    cfg.max_value = o.kvd.max_value;
    cfg.max_transfers = std::min<std::uint32_t>(32, o.kvd.max_transfers);
    cfg.max_pins = 32;
    cfg.reply_batch = o.reply_batch;
    cfg.label = "bench";
    cfg.stats = [] { return rkv::kv::store::StatRows{}; };  // no STATS in this bench
    cfg.latency = &latency_;
    cfg.gate = &gate_;  // open: a static list's server
    conn_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, std::move(cfg));
    if (conn_->start() != Verdict::keep) throw std::runtime_error("ServerConn::start failed");
    conn_->on_established();
    build_templates();
  }

  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  ~Harness() {
    conn_.reset();
    store_.detach();
  }

  // Runs `msgs` SENDs of `batch` requests each (keys in turn, cycling).
  void run(Op op, unsigned batch, std::uint64_t msgs) {
    for (std::uint64_t i = 0; i < msgs; ++i) one_message(op, batch);
  }

  // Every key must hold its last acknowledged value; the counters must match.
  void final_check() {
    for (std::uint32_t k = 0; k < o_.keys; ++k) {
      const auto hit = store_.get(key_name(k));
      if (!hit.found || !value_ok(k, proto::as_bytes(hit.value))) mismatch("store: key " + key_name(k) + " wrong");
    }
    if (counters_.sets != sets_sent_) mismatch("counters: sets != SETs sent");
    if (counters_.gets != gets_sent_ || counters_.get_hits != gets_sent_) mismatch("counters: gets/get_hits != GETs sent");
    if (counters_.replies_sent != sets_sent_ + gets_sent_) mismatch("counters: replies_sent != requests");
    if (counters_.pauses != 0) mismatch("counters: the server paused for lack of a send buffer");
    if (link_.unexpected_posts() != 0) mismatch("an RDMA READ/WRITE was posted");
  }

  [[nodiscard]] std::uint64_t mismatches() const noexcept { return mismatches_; }
  [[nodiscard]] std::uint64_t replies() const noexcept { return replies_; }
  [[nodiscard]] const std::string& first_mismatch() const noexcept { return first_; }

  // Preload: every key SET once (batches of 32), so GETs hit and SETs overwrite.
  void preload() { run(Op::set, 32, (o_.keys + 31) / 32); }

 private:
  struct Pending {
    std::uint32_t key;
    std::uint32_t req_id;
  };

  void build_templates() {
    set_size_ = proto::kHeaderSize + kKeyLen + o_.value_size;
    get_size_ = proto::kHeaderSize + kKeyLen;
    set_tmpl_.resize(set_size_ * o_.keys);
    get_tmpl_.resize(get_size_ * o_.keys);
    std::vector<std::byte> value(o_.value_size);
    for (std::uint32_t k = 0; k < o_.keys; ++k) {
      const std::string key = key_name(k);
      fill_value(value, k, 0);
      proto::Encoder s(std::span<std::byte>(set_tmpl_).subspan(k * set_size_, set_size_));
      proto::Encoder g(std::span<std::byte>(get_tmpl_).subspan(k * get_size_, get_size_));
      if (s.append(proto::msg::set_request(0, key, value)) != proto::EncodeStatus::ok ||
          g.append(proto::msg::get_request(0, key)) != proto::EncodeStatus::ok) {
        throw std::runtime_error("encoding a request template failed");
      }
    }
  }

  // A value: [version u64][key index u64][bytes that depend on the key].
  void fill_value(std::span<std::byte> v, std::uint32_t k, std::uint64_t version) const {
    proto::store_le<std::uint64_t>(v, 0, version);
    proto::store_le<std::uint64_t>(v, 8, k);
    for (std::size_t i = 16; i < v.size(); ++i) v[i] = static_cast<std::byte>((k * 131u + i * 7u) & 0xFFu);
  }
  [[nodiscard]] bool value_ok(std::uint32_t k, std::span<const std::byte> v) const noexcept {
    if (v.size() != o_.value_size) return false;
    if (proto::load_le<std::uint64_t>(v, 0) != version_[k] || proto::load_le<std::uint64_t>(v, 8) != k) return false;
    const std::size_t off = k * set_size_ + proto::kHeaderSize + kKeyLen + 16;
    return std::memcmp(v.data() + 16, set_tmpl_.data() + off, o_.value_size - 16) == 0;
  }

  void mismatch(const std::string& what) {
    if (mismatches_++ == 0) first_ = what;
  }

  void one_message(Op op, unsigned batch) {
    BenchLink::Recv r;
    if (!link_.pop_recv(r)) {
      mismatch("no receive posted for the next SEND");
      return;
    }
    // The client's SEND lands in the receive buffer (the HCA's copy).
    std::size_t len = 0;
    const std::size_t size = op == Op::set ? set_size_ : get_size_;
    const std::byte* tmpl = op == Op::set ? set_tmpl_.data() : get_tmpl_.data();
    for (unsigned j = 0; j < batch; ++j) {
      const std::uint32_t k = next_key_;
      next_key_ = next_key_ + 1 == o_.keys ? 0 : next_key_ + 1;
      const std::uint32_t id = ++req_id_;
      std::memcpy(r.buf.data() + len, tmpl + std::size_t{k} * size, size);
      const auto msg = r.buf.subspan(len, size);
      proto::store_le<std::uint32_t>(msg, proto::hdr_off::req_id, id);
      if (op == Op::set) proto::store_le<std::uint64_t>(msg, proto::kHeaderSize + kKeyLen, id);  // version
      pending_[j] = {k, id};
      len += size;
    }
    (op == Op::set ? sets_sent_ : gets_sent_) += batch;
    ++messages_;

    if (server_path_recv(*conn_, BenchLink::received(r, len)) != Verdict::keep) {
      mismatch("the server disconnected: " + conn_->disconnect_reason());
      return;
    }
    std::size_t next = 0;
    for (const auto& s : link_.sends()) next = check_replies(op, batch, s.bytes, next);
    if (next != batch) mismatch("replies missing");
    for (const auto& s : link_.sends()) {
      if (server_path_sent(*conn_, BenchLink::sent(s)) != Verdict::keep) mismatch("send completion refused");
    }
    link_.clear_sends();
  }

  // The replies of one SEND, parsed by hand (the layout of docs/protocol.md)
  // so the check costs little next to the server: each must be the reply to
  // the next pending request, status ok, and a GET's must carry exactly the
  // bytes of the key's last acknowledged SET.
  std::size_t check_replies(Op op, unsigned batch, std::span<const std::byte> bytes, std::size_t next) {
    const auto want = op == Op::set ? proto::Opcode::set_reply : proto::Opcode::get_reply;
    const std::uint16_t flags = op == Op::set ? 0 : proto::kFlagFound;
    const std::uint64_t vlen = op == Op::set ? 0 : o_.value_size;
    std::size_t pos = 0;
    while (pos < bytes.size()) {
      const auto h = bytes.subspan(pos);
      if (h.size() < proto::kHeaderSize || next >= batch) {
        mismatch(next >= batch ? "more replies than requests" : "truncated reply");
        return next;
      }
      ++replies_;
      const Pending p = pending_[next++];
      if (proto::load_le<std::uint16_t>(h, proto::hdr_off::magic) != proto::kMagic ||
          proto::load_le<std::uint8_t>(h, proto::hdr_off::version) != proto::kVersion ||
          proto::load_le<std::uint8_t>(h, proto::hdr_off::opcode) != static_cast<std::uint8_t>(want) ||
          proto::load_le<std::uint16_t>(h, proto::hdr_off::flags) != flags ||
          proto::load_le<std::uint16_t>(h, proto::hdr_off::status) != 0 ||
          proto::load_le<std::uint16_t>(h, proto::hdr_off::key_len) != 0 ||
          proto::load_le<std::uint32_t>(h, proto::hdr_off::req_id) != p.req_id ||
          proto::load_le<std::uint64_t>(h, proto::hdr_off::value_len) != vlen ||
          h.size() < proto::kHeaderSize + vlen) {
        mismatch(op == Op::set ? "bad SET_REPLY" : "bad GET_REPLY");
        return next;
      }
      if (op == Op::set) {
        version_[p.key] = p.req_id;  // acknowledged: GETs must see it from now on
      } else if (!value_ok(p.key, h.subspan(proto::kHeaderSize, vlen))) {
        mismatch("GET of " + key_name(p.key) + " returned other bytes");
      }
      pos += proto::kHeaderSize + vlen;
    }
    return next;
  }

  const Options& o_;
  HostRegistrar registrar_;
  BenchLink link_;
  BufferPool recv_;
  BufferPool send_;
  Arena arena_;                      // kvd's large-value arena (unused by 32 B requests)
  std::unique_ptr<Arena> small_;     // index on: small values in blocks
  std::unique_ptr<IndexRegion> index_;
  Store store_;
  ServerCounters counters_;
  rkv::kv::server::LatencyHistograms latency_;
  rkv::kv::server::ShardGate gate_;
  std::unique_ptr<ServerConn> conn_;

  std::size_t set_size_ = 0, get_size_ = 0;
  std::vector<std::byte> set_tmpl_, get_tmpl_;  // one encoded request per key, req_id 0, version 0
  std::vector<std::uint64_t> version_;          // per key: the last acknowledged SET's version
  Pending pending_[64]{};  // the requests of the SEND in flight, in order
  std::uint32_t next_key_ = 0;
  std::uint32_t req_id_ = 0;
  std::uint64_t sets_sent_ = 0, gets_sent_ = 0, messages_ = 0, replies_ = 0, mismatches_ = 0;
  std::string first_;
};

// Separate functions, never inlined, folded or left by a tail call: bench/cpu's
// callgrind pass collects inside measured_ops only (--toggle-collect), i.e.
// the timed repetitions.
[[gnu::noipa]] void measured_ops(Harness& h, Op op, unsigned batch, std::uint64_t msgs) {
  h.run(op, batch, msgs);
  asm volatile("" ::: "memory");
}
[[gnu::noipa]] void warm_up(Harness& h, Op op, unsigned batch, std::uint64_t msgs) {
  h.run(op, batch, msgs);
  asm volatile("" ::: "memory");
}

struct Row {
  std::string index;
  std::string op;
  unsigned batch;
  std::uint64_t ops;
  double median_ns, min_ns, max_ns;
  double cpu_median_ns;  // the thread's CPU time (CLOCK_THREAD_CPUTIME_ID)
};

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"server_cost: the server's CPU per 32 B request, natively (ServerConn + Store through the Link seam)"};
  app.add_option("--ops", o.ops, "operations per timed repetition")->capture_default_str();
  app.add_option("--reps", o.reps, "timed repetitions (the median is reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed operations before the repetitions")->capture_default_str();
  app.add_option("--keys", o.keys, "distinct keys (\"key\" + 7 digits), cycled in order")->capture_default_str();
  app.add_option("--value-size", o.value_size, "value bytes (16 .. 1000)")->capture_default_str();
  app.add_option("--op", o.op_names, "operations to measure: set, get")->delimiter(',')->capture_default_str();
  app.add_option("--batch", o.batches, "requests per SEND (1 .. 64)")->delimiter(',')->capture_default_str();
  app.add_option("--index", o.index_modes, "one-sided index: off, on (kvd's default)")->delimiter(',')->capture_default_str();
  app.add_option("--reply-batch", o.reply_batch, "replies per SEND before it is posted mid-batch (kvd's --reply-batch; 0: one SEND per pass)")
      ->capture_default_str();
  app.add_option("--csv", o.csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);
  if (o.keys == 0 || o.keys > 9999999 || o.value_size < 16 || o.value_size > 1000 || o.reps == 0) {
    std::fprintf(stderr, "server_cost: --keys 1..9999999, --value-size 16..1000, --reps >= 1\n");
    return 2;
  }
  for (const unsigned b : o.batches) {
    if (b == 0 || b > 64 || b * (proto::kHeaderSize + kKeyLen + o.value_size) > o.buf_size) {
      std::fprintf(stderr, "server_cost: --batch %u does not fit one %u-byte SEND\n", b, o.buf_size);
      return 2;
    }
  }
  for (const auto& s : o.op_names) {
    if (s != "set" && s != "get") return std::fprintf(stderr, "server_cost: --op set|get\n"), 2;
  }
  for (const auto& s : o.index_modes) {
    if (s != "off" && s != "on") return std::fprintf(stderr, "server_cost: --index off|on\n"), 2;
  }

  std::printf("# server_cost: ServerConn + Store through the Link seam (no verbs), %zu B values, %zu B keys, %u keys; "
              "median of %u x %llu ops after %llu warm-up; credits %u, send buffers %u x %u B, reply batch %u\n"
              "# crc32c: %.*s\n",
              o.value_size, kKeyLen, o.keys, o.reps, static_cast<unsigned long long>(o.ops),
              static_cast<unsigned long long>(o.warmup), o.credits, o.send_buffers, o.buf_size, o.reply_batch,
              static_cast<int>(rkv::proto::crc32c_implementation().size()), rkv::proto::crc32c_implementation().data());
  std::printf("%-5s %-3s %5s %10s %10s %10s %10s %8s %10s\n", "index", "op", "batch", "ops", "ns/op", "min", "max",
              "Mops/s", "cpu ns/op");
  std::vector<Row> rows;
  std::uint64_t mismatches = 0, replies = 0;
  for (const auto& mode : o.index_modes) {
    Harness h(o, mode == "on");
    h.preload();
    for (const auto& name : o.op_names) {
      const Op op = name == "set" ? Op::set : Op::get;
      for (const unsigned batch : o.batches) {
        const std::uint64_t msgs = (o.ops + batch - 1) / batch;
        warm_up(h, op, batch, (o.warmup + batch - 1) / batch);
        const auto n = static_cast<double>(msgs * batch);
        std::vector<double> ns, cpu;
        for (unsigned r = 0; r < o.reps; ++r) {
          const double c0 = thread_cpu_ns();
          const auto t0 = std::chrono::steady_clock::now();
          measured_ops(h, op, batch, msgs);
          const auto t1 = std::chrono::steady_clock::now();
          const double c1 = thread_cpu_ns();
          ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
          cpu.push_back((c1 - c0) / n);
        }
        const double med = median(ns);
        const double cpu_med = median(cpu);
        const auto [lo, hi] = std::minmax_element(ns.begin(), ns.end());
        rows.push_back({mode, name, batch, msgs * batch, med, *lo, *hi, cpu_med});
        std::printf("%-5s %-3s %5u %10llu %10.1f %10.1f %10.1f %8.2f %10.1f\n", mode.c_str(), name.c_str(), batch,
                    static_cast<unsigned long long>(msgs * batch), med, *lo, *hi, 1e3 / med, cpu_med);
        std::fflush(stdout);
      }
    }
    h.final_check();
    mismatches += h.mismatches();
    replies += h.replies();
    if (h.mismatches() != 0) {
      std::fprintf(stderr, "server_cost: index %s: %llu mismatch(es), first: %s\n", mode.c_str(),
                   static_cast<unsigned long long>(h.mismatches()), h.first_mismatch().c_str());
    }
  }
  std::printf("# checked %llu replies: %llu mismatch(es)\n", static_cast<unsigned long long>(replies),
              static_cast<unsigned long long>(mismatches));
  if (!o.csv.empty()) {
    FILE* f = std::fopen(o.csv.c_str(), "w");
    if (f == nullptr) {
      std::perror(o.csv.c_str());
      return 2;
    }
    std::fprintf(f, "index,op,batch,value_size,ops,ns_per_op_median,ns_per_op_min,ns_per_op_max,reps,cpu_ns_per_op_median\n");
    for (const auto& r : rows) {
      std::fprintf(f, "%s,%s,%u,%zu,%llu,%.1f,%.1f,%.1f,%u,%.1f\n", r.index.c_str(), r.op.c_str(), r.batch,
                   o.value_size, static_cast<unsigned long long>(r.ops), r.median_ns, r.min_ns, r.max_ns, o.reps,
                   r.cpu_median_ns);
    }
    std::fclose(f);
  }
  return mismatches == 0 ? 0 : 1;
}
