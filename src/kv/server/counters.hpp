#pragma once
// ServerCounters and THE counter table: every server counter is declared
// once here, as a member and as a row (name, member, help) of
// kServerCounterTable. counter_rows() turns the table into StatRows, from
// which kvd's SIGUSR1/final line, the STATS reply and JSON are all formatted
// (kv/store/stats.hpp); Server::stats_rows() appends the gauges that are not
// counters (keys, bytes, arena, index, durability). The rows whose help
// says "now:" are gauges of the live connections (kind gauge): nothing bumps them,
// Server::counters() computes them when they are read, so no copy can drift
// from its source. A counter missing from
// the table would be printed nowhere: the static_asserts below refuse to
// compile unless every member is in it exactly once.
//
// Thread: the reactor's (plain integers, shared by every connection).

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kv/store/stats.hpp"

namespace rkv::kv::server {

struct ServerCounters {
  std::uint64_t connections = 0;
  std::uint64_t accepted = 0;
  std::uint64_t rejected = 0;
  std::uint64_t auth_failures = 0;
  std::uint64_t closed = 0;
  std::uint64_t connect_timeouts = 0;
  std::uint64_t transfer_timeouts = 0;
  std::uint64_t protocol_errors = 0;
  std::uint64_t credit_overruns = 0;
  std::uint64_t completion_errors = 0;
  std::uint64_t stale_completions = 0;
  std::uint64_t sends_received = 0;
  std::uint64_t sends_posted = 0;
  std::uint64_t post_calls = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t sets = 0;
  std::uint64_t gets = 0;
  std::uint64_t get_hits = 0;
  std::uint64_t dels = 0;
  std::uint64_t del_hits = 0;
  std::uint64_t expires = 0;
  std::uint64_t ttls = 0;
  std::uint64_t touches = 0;
  std::uint64_t stats = 0;
  std::uint64_t calls = 0;
  std::uint64_t calls_no_handler = 0;
  std::uint64_t calls_failed = 0;
  std::uint64_t error_replies = 0;
  std::uint64_t pauses = 0;
  std::uint64_t messages_received = 0;
  std::uint64_t replies_sent = 0;
  std::uint64_t large_sets = 0;
  std::uint64_t large_gets_written = 0;
  std::uint64_t large_gets_pulled = 0;
  std::uint64_t grants = 0;
  std::uint64_t granted_sets = 0;
  std::uint64_t grants_withheld = 0;
  std::uint64_t releases = 0;
  std::uint64_t rdma_reads = 0;
  std::uint64_t rdma_writes = 0;
  std::uint64_t too_large = 0;
  std::uint64_t not_owner = 0;
  std::uint64_t records_applied = 0;
  std::uint64_t backup_gets = 0;
  std::uint64_t no_memory = 0;
  std::uint64_t transfers_aborted = 0;
  std::uint64_t pinned = 0;
  std::uint64_t transfers = 0;
  std::uint64_t max_conn_outstanding = 0;
  std::uint64_t conn_bytes = 0;
  std::uint64_t conn_pool_bytes = 0;
  std::uint64_t credit_grows = 0;
  std::uint64_t credit_shrinks = 0;
  std::uint64_t completions = 0;
  std::uint64_t cq_wakeups = 0;
  std::uint64_t cq_polls = 0;
  std::uint64_t cq_arms = 0;
  std::uint64_t durable_waits = 0;
  std::uint64_t io_errors = 0;
  std::uint64_t device_events = 0;
};

struct CounterInfo {
  std::string_view name;
  std::uint64_t ServerCounters::*member;
  store::StatKind kind;  // gauge: the "now:" rows and the high-water mark; counter: the rest
  std::string_view help;
};

inline constexpr std::array kServerCounterTable{
    CounterInfo{"connections", &ServerCounters::connections, store::StatKind::gauge, "now: live connections (accepted, not yet destroyed)"},
    CounterInfo{"accepted", &ServerCounters::accepted, store::StatKind::counter, "connections accepted"},
    CounterInfo{"rejected", &ServerCounters::rejected, store::StatKind::counter, "connect requests rejected (bad parameters, auth, table full, setup failed)"},
    CounterInfo{"auth_failures", &ServerCounters::auth_failures, store::StatKind::counter, "connect requests rejected for a missing or wrong auth token (also in rejected)"},
    CounterInfo{"closed", &ServerCounters::closed, store::StatKind::counter, "connections torn down"},
    CounterInfo{"transfer_timeouts", &ServerCounters::transfer_timeouts, store::StatKind::counter, "connections dropped because their RDMA transfers made no progress for --transfer-timeout-ms (the peer stopped answering)"},
    CounterInfo{"connect_timeouts", &ServerCounters::connect_timeouts, store::StatKind::counter, "accepted connections dropped because the handshake did not finish within --connect-timeout-ms"},
    CounterInfo{"protocol_errors", &ServerCounters::protocol_errors, store::StatKind::counter, "clients dropped for a malformed or out-of-protocol message"},
    CounterInfo{"credit_overruns", &ServerCounters::credit_overruns, store::StatKind::counter, "clients dropped for sending more SENDs than credits granted"},
    CounterInfo{"completion_errors", &ServerCounters::completion_errors, store::StatKind::counter, "connections failed by an error completion"},
    CounterInfo{"stale_completions", &ServerCounters::stale_completions, store::StatKind::counter, "completions and acks for a slot or generation that moved on (dropped)"},
    CounterInfo{"sends_received", &ServerCounters::sends_received, store::StatKind::counter, "request SENDs received (one may pack several requests)"},
    CounterInfo{"sends_posted", &ServerCounters::sends_posted, store::StatKind::counter, "reply SENDs posted"},
    CounterInfo{"post_calls", &ServerCounters::post_calls, store::StatKind::counter,
                "posts of work requests (each one ibv_post_send: a chain of a pass's RDMA READs, WRITEs and reply SENDs)"},
    CounterInfo{"bytes_received", &ServerCounters::bytes_received, store::StatKind::counter, "bytes that came in: request SENDs received and values the server READ (rendezvous SETs)"},
    CounterInfo{"bytes_sent", &ServerCounters::bytes_sent, store::StatKind::counter, "bytes that went out: reply SENDs posted, values WRITTEN into offered buffers, and values offered to a pull (large GETs the client READs)"},
    CounterInfo{"sets", &ServerCounters::sets, store::StatKind::counter, "SET requests"},
    CounterInfo{"gets", &ServerCounters::gets, store::StatKind::counter, "GET requests by message"},
    CounterInfo{"get_hits", &ServerCounters::get_hits, store::StatKind::counter, "GET requests that found their key"},
    CounterInfo{"dels", &ServerCounters::dels, store::StatKind::counter, "DEL requests"},
    CounterInfo{"del_hits", &ServerCounters::del_hits, store::StatKind::counter, "DEL requests that found (and removed) their key"},
    CounterInfo{"expires", &ServerCounters::expires, store::StatKind::counter, "EXPIRE requests"},
    CounterInfo{"ttls", &ServerCounters::ttls, store::StatKind::counter, "TTL requests"},
    CounterInfo{"touches", &ServerCounters::touches, store::StatKind::counter, "keys named by TOUCH hints (one-sided reads the clients reported)"},
    CounterInfo{"stats", &ServerCounters::stats, store::StatKind::counter, "STATS requests"},
    CounterInfo{"calls", &ServerCounters::calls, store::StatKind::counter, "CALL requests (user-defined operations)"},
    CounterInfo{"calls_no_handler", &ServerCounters::calls_no_handler, store::StatKind::counter, "CALLs of an opcode with no handler (answered no_handler)"},
    CounterInfo{"calls_failed", &ServerCounters::calls_failed, store::StatKind::counter, "CALLs whose handler threw (answered handler_failed)"},
    CounterInfo{"error_replies", &ServerCounters::error_replies, store::StatKind::counter, "replies with a non-ok status"},
    CounterInfo{"pauses", &ServerCounters::pauses, store::StatKind::counter, "times a received buffer waited for a free send buffer or transfer"},
    CounterInfo{"messages_received", &ServerCounters::messages_received, store::StatKind::counter, "requests decoded and executed (RELEASE included; a granted SET from its trailer)"},
    CounterInfo{"replies_sent", &ServerCounters::replies_sent, store::StatKind::counter, "replies appended to SENDs"},
    CounterInfo{"large_sets", &ServerCounters::large_sets, store::StatKind::counter, "rendezvous SETs installed (by READ, or written into a grant: granted_sets)"},
    CounterInfo{"large_gets_written", &ServerCounters::large_gets_written, store::StatKind::counter, "large GETs served by RDMA WRITE into the offered buffer"},
    CounterInfo{"large_gets_pulled", &ServerCounters::large_gets_pulled, store::StatKind::counter, "large GETs answered with a descriptor the client READs"},
    CounterInfo{"grants", &ServerCounters::grants, store::StatKind::counter, "grants handed out with SET replies: landing space bound to one connection for its next large SET"},
    CounterInfo{"granted_sets", &ServerCounters::granted_sets, store::StatKind::counter, "SETs a client WROTE into a grant (one RDMA WRITE with immediate each, no READ by the server)"},
    CounterInfo{"grants_withheld", &ServerCounters::grants_withheld, store::StatKind::counter, "grants not made because every connection's unwritten grants held their share of the memory limit"},
    CounterInfo{"releases", &ServerCounters::releases, store::StatKind::counter, "RELEASE messages received"},
    CounterInfo{"rdma_reads", &ServerCounters::rdma_reads, store::StatKind::counter, "RDMA READs posted (large SET values)"},
    CounterInfo{"rdma_writes", &ServerCounters::rdma_writes, store::StatKind::counter, "RDMA WRITEs posted (large GET values)"},
    CounterInfo{"too_large", &ServerCounters::too_large, store::StatKind::counter, "requests refused for size before any allocation"},
    CounterInfo{"not_owner", &ServerCounters::not_owner, store::StatKind::counter, "requests refused not_owner: a cluster member asked for a key of a shard it is not the primary of (or a replication record of a shard it does not back at that epoch), or to write while its lease may have lapsed"},
    CounterInfo{"records_applied", &ServerCounters::records_applied, store::StatKind::counter, "replication records (SET, DEL, EXPIRE from a shard's primary) admitted as a backup"},
    CounterInfo{"backup_gets", &ServerCounters::backup_gets, store::StatKind::counter, "GETs answered as an in-sync backup of the key's shard (a client's --read-from backups)"},
    CounterInfo{"no_memory", &ServerCounters::no_memory, store::StatKind::counter, "SETs refused with no_memory (the memory limit, kvd --max-memory, or an allocation failure)"},
    CounterInfo{"transfers_aborted", &ServerCounters::transfers_aborted, store::StatKind::counter, "RDMA transfers dropped by an error or a disconnect"},
    CounterInfo{"pinned", &ServerCounters::pinned, store::StatKind::gauge, "now: large values held by transfers and pulls"},
    CounterInfo{"transfers", &ServerCounters::transfers, store::StatKind::gauge, "now: RDMA READ/WRITEs in flight"},
    CounterInfo{"max_conn_outstanding", &ServerCounters::max_conn_outstanding, store::StatKind::gauge, "most requests one connection had received and not yet answered"},
    CounterInfo{"conn_bytes", &ServerCounters::conn_bytes, store::StatKind::gauge, "now: send + receive buffer bytes the live connections hold"},
    CounterInfo{"conn_pool_bytes", &ServerCounters::conn_pool_bytes, store::StatKind::gauge, "now: registered bytes of the message buffer pools all connections share"},
    CounterInfo{"credit_grows", &ServerCounters::credit_grows, store::StatKind::counter, "receive buffers added to a connection that had spent every credit"},
    CounterInfo{"credit_shrinks", &ServerCounters::credit_shrinks, store::StatKind::counter, "receive buffers taken back from a connection that left half its credits unspent"},
    CounterInfo{"completions", &ServerCounters::completions, store::StatKind::counter, "work completions handled"},
    CounterInfo{"cq_wakeups", &ServerCounters::cq_wakeups, store::StatKind::counter, "completion events taken (a CQ armed before the loop slept)"},
    CounterInfo{"cq_polls", &ServerCounters::cq_polls, store::StatKind::counter, "poll passes over the poll list (CQs with traffic, while the loop spins)"},
    CounterInfo{"cq_arms", &ServerCounters::cq_arms, store::StatKind::counter, "CQs armed before the loop slept"},
    CounterInfo{"durable_waits", &ServerCounters::durable_waits, store::StatKind::gauge, "now: SET, DEL and CALL records whose reply waits for the log"},
    CounterInfo{"io_errors", &ServerCounters::io_errors, store::StatKind::counter, "SETs, DELs and CALLs answered io_error"},
    CounterInfo{"device_events", &ServerCounters::device_events, store::StatKind::counter, "asynchronous events of the RDMA device (a port down or up, the device failing, a QP or CQ error)"},
};

namespace detail {
consteval bool every_member_once() {
  for (std::size_t i = 0; i < kServerCounterTable.size(); ++i) {
    for (std::size_t j = i + 1; j < kServerCounterTable.size(); ++j) {
      if (kServerCounterTable[i].member == kServerCounterTable[j].member) return false;
      if (kServerCounterTable[i].name == kServerCounterTable[j].name) return false;
    }
  }
  return true;
}
// A "now:" row is a value of the moment: its kind must say so.
consteval bool now_rows_are_gauges() {
  for (const auto& info : kServerCounterTable) {
    if (info.help.starts_with("now:") && info.kind != store::StatKind::gauge) return false;
  }
  return true;
}
}  // namespace detail
static_assert(sizeof(ServerCounters) == kServerCounterTable.size() * sizeof(std::uint64_t),
              "every ServerCounters member needs its row in kServerCounterTable");
static_assert(detail::every_member_once(), "a ServerCounters member or name is in the table twice");
static_assert(detail::now_rows_are_gauges(), "a \"now:\" row of kServerCounterTable is not a gauge");

// One row per table entry, in table order.
[[nodiscard]] inline store::StatRows counter_rows(const ServerCounters& c) {
  store::StatRows rows;
  rows.reserve(kServerCounterTable.size());
  for (const auto& info : kServerCounterTable) rows.push_back({info.name, c.*info.member, info.kind, info.help});
  return rows;
}

}  // namespace rkv::kv::server
