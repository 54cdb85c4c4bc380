// Writes the seed corpus of the fuzz targets (docs/fuzzing.md) from the real
// encoders, so the seeds are valid inputs the mutations start from:
//   fuzz_make_seeds DIR     (DIR = tests/fuzz/corpus; writes DIR/<target>/seed-*)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cluster/keyspace.hpp"
#include "cluster/shard_map.hpp"
#include "durable/files.hpp"
#include "durable/record.hpp"
#include "proto/auth.hpp"
#include "proto/connect_params.hpp"
#include "proto/crc32c.hpp"
#include "proto/encode.hpp"
#include "proto/grant.hpp"
#include "proto/index_format.hpp"

namespace {

namespace fs = std::filesystem;
using namespace rkv;
using Bytes = std::vector<std::byte>;

fs::path g_root;

void put(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(g_root / target);
  std::ofstream(g_root / target / ("seed-" + name), std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void put_text(const std::string& target, const std::string& name, const std::string& s) {
  put(target, name, Bytes(reinterpret_cast<const std::byte*>(s.data()),
                          reinterpret_cast<const std::byte*>(s.data()) + s.size()));
}
std::span<const std::byte> sb(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }
void append(Bytes& out, std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); }
void u8(Bytes& out, std::uint8_t v) { out.push_back(std::byte{v}); }
void u16(Bytes& out, std::uint16_t v) {
  u8(out, static_cast<std::uint8_t>(v));
  u8(out, static_cast<std::uint8_t>(v >> 8));
}

Bytes messages(std::initializer_list<proto::MessageSpec> specs, const proto::Limits& limits = {}) {
  Bytes buf(1 << 16);
  proto::Encoder enc(buf, 0, limits);
  for (const auto& s : specs) {
    if (enc.append(s) != proto::EncodeStatus::ok) throw std::runtime_error("seed message refused");
  }
  buf.resize(enc.size());
  return buf;
}

void wire() {
  using namespace proto::msg;
  const std::string v(100, 'v');
  const proto::RdvDesc d{0x7f0012345000, 0x1234};
  const proto::Limits server{proto::kMaxKey, UINT64_MAX};
  put("wire", "set", messages({set_request(1, "key", sb(v))}));
  put("wire", "get-del-stats", messages({get_request(2, "key"), del_request(3, "key"), stats_request(4)}));
  put("wire", "rdv-requests", messages({set_request_rdv(5, "big", d, 1 << 20), get_request_rdv(6, "big", d, 1 << 20),
                                        release(7)}, server));
  put("wire", "replies", messages({set_reply(1, 4), get_reply_found(2, 0, sb(v)), get_reply_missing(3, 1),
                                   del_reply(4, 0, true), stats_reply(5, 2, "keys 1\nbytes 3\n")}));
  put("wire", "rdv-replies", messages({get_reply_pull(8, 1, d, 8192), get_reply_pull(9, 1, d, 1 << 20)}));
  put("wire", "errors", messages({error_reply(proto::Opcode::set, 1, 1, proto::Status::no_memory),
                                  error_reply(proto::Opcode::get, 2, 0, proto::Status::too_large)}));
  auto set_ttl = set_request(1, "key", sb(v));
  set_ttl.ttl = 500;
  const std::string keys("\x03\x00key\x01\x00k", 8);
  put("wire", "ttl", messages({set_ttl, expire_request(2, "key", 0), ttl_request(3, "key"), touch(4, sb(keys))}));
  put("wire", "ttl-replies", messages({expire_reply(2, 1, true), ttl_reply(3, 0, proto::kNoTtl),
                                       ttl_reply(4, 0, 1234), ttl_reply(5, 0, std::nullopt), touch_reply(6, 1)}));
  // Replication records: a SET with TTL and epoch, a large one, a DEL, an EXPIRE.
  auto rec_set = set_ttl;
  rec_set.epoch = 7;
  auto rec_rdv = set_request_rdv(2, "big", d, 1 << 20);
  rec_rdv.epoch = 7;
  auto rec_del = del_request(3, "key");
  rec_del.epoch = 8;
  auto rec_expire = expire_request(4, "key", 1000);
  rec_expire.epoch = 8;
  put("wire", "records", messages({rec_set, rec_rdv, rec_del, rec_expire}));
  // Reads from backups: GETs carrying BACKUP_READ, eager and offering a buffer.
  auto backup_get = get_request(1, "key");
  backup_get.backup_read = true;
  auto backup_get_rdv = get_request_rdv(2, "big", d, 1 << 20);
  backup_get_rdv.backup_read = true;
  put("wire", "backup-reads", messages({backup_get, backup_get_rdv}));
  Bytes cut = messages({set_request(1, "key", sb(v))});
  cut.resize(cut.size() - 7);
  put("wire", "truncated", cut);
  // Grants (docs/protocol.md "SET by grant"): ok SET_REPLYs carrying one, and
  // a SET as written into one (value | key | trailer: read_granted_set).
  put("wire", "grants", messages({set_reply_grant(1, 2, {0x7f0012346000, 0x5501, 1}, 8192),
                                  set_reply_grant(2, 0, {0x7f0012348000, 0x5602, 2}, 1 << 20)}));
  proto::GrantedSet g;
  g.req_id = 3;
  g.key = "big";
  g.value = sb(v);
  g.value_crc = proto::crc32c(g.value);
  g.ttl = 500;
  Bytes written;
  append(written, g.value);
  append(written, sb(g.key));
  written.resize(written.size() + proto::kGrantTrailerSize);
  proto::write_grant_trailer(std::span<std::byte>(written).last<proto::kGrantTrailerSize>(), g);
  put("wire", "granted-set", written);
}

void connect_params() {
  proto::ConnectParams c;
  c.role = proto::Role::client;
  c.credits = 32;
  c.recv_buf_size = 8192;
  const auto cb = proto::encode_connect_params(c);
  put("connect_params", "client", Bytes(cb.begin(), cb.end()));
  proto::ConnectParams s;
  s.role = proto::Role::server;
  s.credits = 64;
  s.recv_buf_size = 8192;
  s.max_value = 1 << 28;
  const auto plain = proto::encode_connect_params(s);
  put("connect_params", "server-no-index", Bytes(plain.begin(), plain.end()));
  s.index_addr = 0x7f0000000000;
  s.index_rkey = 77;
  s.index_buckets = 1 << 18;
  s.index_layout = proto::kIndexLayout;
  const auto ix = proto::encode_connect_params(s);
  Bytes padded(ix.begin(), ix.end());
  put("connect_params", "server-index", padded);
  padded.resize(proto::kMaxConnectPrivateData, std::byte{0});
  put("connect_params", "server-index-padded", padded);
  // The same target reads a REJECT's private data (decode_reject).
  const auto rej = proto::encode_reject(proto::RejectReason::auth_failed);
  Bytes reject(rej.begin(), rej.end());
  reject.resize(proto::kMaxConnectPrivateData, std::byte{0});  // rdma_cm pads it
  put("connect_params", "reject-auth-failed-padded", reject);
}

// ctl | max_value selector | key_len | key | neighborhood | block
Bytes index_input(std::uint8_t ctl, std::string_view key, std::string_view value, std::size_t slot,
                  std::uint32_t flags, bool torn = false) {
  Bytes out;
  u8(out, ctl);
  u8(out, 0);
  u16(out, static_cast<std::uint16_t>(key.size() - 1));
  append(out, sb(key));
  Bytes hood(proto::kNeighborhoodBytes, std::byte{0});
  proto::IndexEntry e;
  e.version = 42;
  e.key_hash = proto::hash64(key);
  e.addr = 0x7f0000100000;
  e.rkey = 9;
  e.key_len = static_cast<std::uint32_t>(key.size());
  e.value_len = static_cast<std::uint32_t>(value.size());
  e.data_crc = proto::crc32c_extend(proto::crc32c(value), key.data(), key.size());
  e.flags = flags;
  const std::string data = std::string(value) + std::string(key);
  if (e.inlined()) e.addr = e.rkey = 0;
  const auto enc = proto::encode_entry(e, e.inlined() ? sb(data) : std::span<const std::byte>{});
  std::copy(enc.begin(), enc.end(), hood.begin() + static_cast<std::ptrdiff_t>(slot * proto::kBucketSize));
  proto::IndexEntry other = e;
  other.key_hash ^= 1;
  const auto enc2 = proto::encode_entry(other, other.inlined() ? sb(data) : std::span<const std::byte>{});
  std::copy(enc2.begin(), enc2.end(), hood.begin() + static_cast<std::ptrdiff_t>(((slot + 1) % 8) * proto::kBucketSize));
  if (torn) hood[slot * proto::kBucketSize + 3] ^= std::byte{1};
  append(out, hood);
  append(out, sb(value));
  append(out, sb(key));
  return out;
}

void index() {
  put("index", "hit", index_input(0, "key:1", "value bytes", 0, proto::kFlagUsed));
  put("index", "hit-slot5", index_input(0, "key:2", std::string(300, 'x'), 5, proto::kFlagUsed | proto::kFlagOverflow));
  put("index", "overflow-miss", index_input(0, "key:3", "v", 0, proto::kFlagOverflow));
  put("index", "rpc-only", index_input(0, "key:4", "v", 2, proto::kFlagUsed | proto::kFlagRpcOnly));
  put("index", "torn", index_input(0, "key:5", "v", 1, proto::kFlagUsed, true));
  put("index", "fixups", index_input(0x3f, "key:6", "value", 3, proto::kFlagUsed));
  put("index", "inline-hit", index_input(0, "key:7", "inline value", 4, proto::kFlagUsed | proto::kFlagInline));
  put("index", "inline-fixups", index_input(0xbf, "key:8", "value", 3, proto::kFlagUsed | proto::kFlagInline));
}

void workload() {
  put_text("workload", "basic", "# a workload\nSET a hello world\nGET a\nDEL a\nset b @4k:7\nGet b\n");
  put_text("workload", "values", "SET k @@literal\nSET e \nSET g @1m\nSET h @64k:3  \n\n   # comment\nGET h\r\n");
  put_text("workload", "errors", "SET\nGET\nFOO bar\nSET k @12x\nSET k @99999999999999999999\nGET a b\nDEL\n");
  put_text("workload", "ttl", "SET a v PX 500\nSET b @4k:2 px 7\nEXPIRE a 0\nTTL a\nSET c x PX 0\nEXPIRE b\n");
  put_text("workload", "tight", "\x01SET a @64\nSET abcdefghijklmnopq x\n");
}

std::string record(std::string_view key, std::string_view value, std::uint64_t seq) {
  std::string out(durable::kHeaderSize, '\0');
  durable::encode_header(std::as_writable_bytes(std::span(out.data(), out.size())),
                         durable::set_header(sb(key), sb(value), seq));
  return out + std::string(key) + std::string(value);
}
std::string record_ttl(std::string_view key, std::string_view value, std::uint64_t seq, std::int64_t at) {
  std::string out(durable::kHeaderSize, '\0');
  durable::encode_header(std::as_writable_bytes(std::span(out.data(), out.size())),
                         durable::set_header(sb(key), sb(value), seq, at));
  const auto a = durable::expire_bytes(at);
  return out + std::string(key) + std::string(reinterpret_cast<const char*>(a.data()), a.size()) + std::string(value);
}
std::string expire_record(std::string_view key, std::uint64_t seq, std::int64_t at) {
  std::string out(durable::kHeaderSize, '\0');
  durable::encode_header(std::as_writable_bytes(std::span(out.data(), out.size())),
                         durable::expire_header(sb(key), at, seq));
  const auto a = durable::expire_bytes(at);
  return out + std::string(key) + std::string(reinterpret_cast<const char*>(a.data()), a.size());
}
std::string tombstone(std::string_view key, std::uint64_t seq) {
  std::string out(durable::kHeaderSize, '\0');
  durable::encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), durable::del_header(sb(key), seq));
  return out + std::string(key);
}
std::string snapshot_end(std::uint64_t count, std::uint64_t seq) {
  const auto r = durable::snapshot_end_record(count, seq);
  return {reinterpret_cast<const char*>(r.data()), r.size()};
}

// opts | (sel | len u16 | bytes)...
void recovery_input(const std::string& name, std::uint8_t opts,
                    std::initializer_list<std::pair<std::uint8_t, std::string>> files) {
  Bytes out;
  u8(out, opts);
  for (const auto& [sel, bytes] : files) {
    u8(out, sel);
    u16(out, static_cast<std::uint16_t>(bytes.size()));
    append(out, sb(bytes));
  }
  put("recovery", name, out);
}

void recovery() {
  constexpr std::uint8_t log1 = 0, log2 = 4, snap1 = 1, snap2 = 5, tmp2 = 6;
  const std::string log = record("a", "one", 1) + record("b", "two", 2) + tombstone("a", 3) + record("c", "3", 4);
  recovery_input("log", 0, {{log1, log}});
  recovery_input("torn-tail", 0, {{log1, log + record("d", "four", 5).substr(0, 40)}});
  std::string mid = log;
  mid[durable::kHeaderSize + 1] ^= 0x20;  // the first record's key: body CRC fails, good records follow
  recovery_input("middle", 0, {{log1, mid}});
  const std::string snap = record("a", "one", 0) + record("b", "two", 0) + snapshot_end(2, 2);
  recovery_input("snapshot-log", 0, {{snap2, snap}, {log2, record("c", "x", 3) + tombstone("b", 4)}, {log1, log}});
  // Expiry times: one long past, one far ahead, an EXPIRE that persists a key in time.
  recovery_input("ttl", 0, {{log1, record_ttl("a", "one", 1, 1) + record_ttl("b", "two", 2, INT64_C(4102444800000)) +
                                       record_ttl("c", "3", 3, 5) + expire_record("c", 4, 0) +
                                       expire_record("b", 5, 7)}});
  recovery_input("snapshot-no-end", 1, {{snap1, snap.substr(0, snap.size() - 10)}, {tmp2, "junk"}});
}

}  // namespace

// etcd's replies as etcd 3.4's gateway writes them (selector 0), base64 (1),
// member records (2), cluster addresses (3), shard maps (4): fuzz_etcd.cpp.
void etcd() {
  const auto seed = [](char selector, const std::string& name, const std::string& text) {
    put_text("etcd", name, std::string(1, selector) + text);
  };
  seed(0, "grant", R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"1","raft_term":"2"},"ID":"7587899191178280710","TTL":"5"})");
  seed(0, "keepalive", R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"1","raft_term":"2"},"ID":"7587899191183823621","TTL":"3"}})");
  seed(0, "range", R"({"header":{"revision":"2"},"kvs":[{"key":"L3Jrdi9jL21lbWJlcnMvYg==","create_revision":"2","mod_revision":"2","version":"1","value":"eyJob3N0IjoiMTAuMC4wLjEiLCJwb3J0Ijo3NDcxfQ==","lease":"9"}],"count":"1"})");
  seed(0, "error", R"({"error":"etcdserver: requested lease not found","code":5,"message":"etcdserver: requested lease not found"})");
  seed(0, "watch_put", R"({"result":{"header":{"cluster_id":"1","member_id":"2","revision":"2","raft_term":"2"},"events":[{"kv":{"key":"L3Jrdi90L21lbWJlcnMvYTox","create_revision":"2","mod_revision":"2","version":"1","value":"eyJ4IjoxfQ=="}}]}})");
  seed(0, "watch_delete", R"({"result":{"header":{"revision":"4"},"events":[{"type":"DELETE","kv":{"key":"L3Jrdi90L21lbWJlcnMvYTox","mod_revision":"4"}}]}})");
  seed(0, "watch_canceled", R"({"result":{"header":{"raft_term":"2"},"canceled":true,"compact_revision":"4"}})");
  seed(1, "b64", "L3Jrdi9jL21lbWJlcnMvYg==");
  seed(2, "member", cluster::member_value({"10.0.2.15", 7471, 1u << 30}));
  seed(3, "address", "etcd://127.0.0.1:2379/prod-1");
  seed(3, "address6", "etcd://[::1]/c");
  seed(3, "addresses", "etcd://e1:2381,10.0.0.2,[::1]:2390/c");
  seed(0, "txn_won", R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"2","raft_term":"2"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"2"}}}]})");
  seed(0, "txn_lost", R"({"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"2","raft_term":"2"}})");
  const std::vector<std::string> ids = {"10.0.0.1:7471", "10.0.0.2:7471", "10.0.0.3:7471"};
  const std::vector<std::int64_t> leases = {0x694d7a1b2c3d4e01, 0x694d7a1b2c3d4e02, 0x694d7a1b2c3d4e03};
  const auto map = *cluster::plan_map(std::nullopt, ids, leases, cluster::MapShape{8, 1});
  seed(4, "map", cluster::map_value(map));
  // A 4th member joins: it is the taker (an extra owner, not in sync) of 2 shards.
  std::vector<std::string> four = ids;
  four.push_back("10.0.0.4:7471");
  std::vector<std::int64_t> four_leases = leases;
  four_leases.push_back(0x694d7a1b2c3d4e04);
  seed(4, "map_taking", cluster::map_value(*cluster::plan_map(map, four, four_leases, cluster::MapShape{})));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  wire();
  connect_params();
  index();
  workload();
  recovery();
  etcd();
  return 0;
}
