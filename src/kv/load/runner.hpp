#pragma once
// LoadRun: one client's pipelined run of a parsed workload, the engine of
// `kvload --depth N`.
//
// start() spawns min(depth, ops) worker fibers on the given Scheduler. Each
// worker takes the next operation in file order, waits (KeyGate) until this
// run's earlier operations on the same key have completed, submits it to the
// ShardSet (its key's server) and parks until the reply: up to `depth` requests in flight, one per
// key at a time, so a GET after a SET of the same key in the file sees that
// SET (or a later write by another client). Operations on different keys
// overtake each other freely. Several LoadRuns (several ShardSets) may share one
// Scheduler and Reactor.
//
// Recording (kv::load::Report): latency is submit -> reply (time spent waiting for
// the key is not included); count/errors per (kind x size class). A GET's
// size class is that of the value it returned (of the value expected, if it
// failed; a DEL is recorded as eager). With `verify`, the keys this run SETs
// or DELs are its own: a GET of such a key must return exactly the value last
// SET, or nothing after a DEL, and a DEL must find the key iff it holds a
// value (mismatches counted); a SET or DEL that failed makes the key's state
// unknown (not checked until the next successful SET or DEL); keys this run
// never wrote are not checked. A key SET with a TTL (or given one by EXPIRE)
// must read as its value before its expiry and as missing after it; around
// the moment itself (the server's clock and the request's flight) either
// answer is right. One-sided GETs are held to the same: their reader applies
// the expiry by its clock (docs/protocol.md "Time to live"), the one this
// process times its requests by.
//
// Errors never hang a run: a refused submit (too_large, not_connected after a
// connection failure) completes the op at once with that status; a connection
// failure completes every pending op with an error; and check_stall() closes
// the connection when ops are pending but none completed for stall_timeout.
//
// Thread: the reactor's; fibers run between reactor iterations (drive()).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/shard_set.hpp"
#include "kv/load/await.hpp"
#include "kv/load/drive.hpp"
#include "kv/load/fiber.hpp"
#include "kv/load/key_gate.hpp"
#include "kv/load/report.hpp"
#include "kv/load/workload.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::load {

using client::ShardSet;

inline constexpr unsigned kDefaultDepth = 16;
inline constexpr unsigned kMaxDepth = 1024;

struct LoadOptions {
  unsigned depth = kDefaultDepth;  // operations in flight, 1..kMaxDepth
  bool verify = false;
  std::string name;                // the report's name and the prefix of error lines (the file)
  std::size_t max_error_lines = 10;  // per-op error/mismatch lines; later ones are only counted
  std::function<void(const std::string&)> on_error;  // one line, no newline; null: silent
  std::chrono::milliseconds stall_timeout{30'000};
  // Called for every SET the server acknowledged (status ok), with its bytes
  // (kvload --ack-log). Null: nothing.
  std::function<void(const Op&, std::span<const std::byte> value)> on_set_ok;
  // Called for every DEL the server acknowledged (status ok); found = the key existed.
  std::function<void(const Op&, bool found)> on_del_ok;
  // With verify: what the server holds before the run (kvload --expect). The
  // SETs and DELs among these ops are not sent; a GET of their key is checked
  // against the last of them (its value, or nothing after a DEL), as if this
  // run had done it. GETs are ignored.
  std::vector<Op> expect;
};

enum class RunState : std::uint8_t {
  idle,      // constructed, start() not called
  running,   // workers alive
  finished,  // every worker ended; report() is final
};

[[nodiscard]] std::string_view to_string(RunState s) noexcept;

class LoadRun {
 public:
  // `scheduler`, `shards` and `ops` must outlive the run. Each op goes to its
  // key's server (a CALL to the first: kvload refuses CALLs with several).
  LoadRun(Scheduler& scheduler, ShardSet& shards, const std::vector<Op>& ops, LoadOptions options);

  LoadRun(const LoadRun&) = delete;
  LoadRun& operator=(const LoadRun&) = delete;
  LoadRun(LoadRun&&) = delete;
  LoadRun& operator=(LoadRun&&) = delete;
  ~LoadRun() = default;  // destroy the Scheduler (or let the run finish) first if fibers are alive

  // Spawns the workers (they run at the next Scheduler::run_ready()) and
  // starts the clock. Throws std::bad_alloc / std::system_error (stacks).
  void start();
  // From the main context between reactor iterations: fails the connection
  // when ops are in flight and none completed for stall_timeout.
  void check_stall(reactor::Reactor::Clock::time_point now);

  [[nodiscard]] RunState state() const noexcept { return state_; }
  [[nodiscard]] bool finished() const noexcept { return state_ == RunState::finished; }
  // Final once finished() (seconds = start() to the last completion).
  [[nodiscard]] const Report& report() const noexcept { return report_; }
  [[nodiscard]] std::uint64_t total() const noexcept { return ops_->size(); }
  [[nodiscard]] std::uint64_t done() const noexcept { return done_; }
  [[nodiscard]] std::uint64_t errors() const noexcept { return report_.errors(); }
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }
  [[nodiscard]] std::size_t max_in_flight() const noexcept { return max_in_flight_; }  // most at once
  [[nodiscard]] double elapsed_seconds() const noexcept;
  [[nodiscard]] bool stalled() const noexcept { return stalled_; }

 private:
  using Clock = reactor::Reactor::Clock;

  void worker();
  // `shard`: the op's key's (ShardSet::shard_of), computed once in worker().
  void run_set(const Op& op, std::size_t shard, std::span<std::byte> value);
  void run_get(const Op& op, std::size_t shard);
  void run_del(const Op& op, std::size_t shard);
  void run_expire(const Op& op, std::size_t shard);
  void run_ttl(const Op& op, std::size_t shard);
  void run_call(const Op& op, std::span<std::byte> request);
  void error_line(const Op& op, const std::string& what);
  // One operation in flight (begin_op .. end_op) and what it came to: its
  // result, submit and reply times, latency, and whether it succeeded.
  struct Timed {
    OpResult r;
    Clock::time_point t0, t1;
    std::uint64_t ns = 0;
    bool ok = false;
  };
  template <class Await>
  Timed timed(Await&& await);
  void begin_op();
  void end_op(Clock::time_point now);
  void record_shard(std::size_t shard, client::Status st, std::uint64_t ns) noexcept;

  Scheduler* scheduler_;
  ShardSet* shards_;
  const std::vector<Op>* ops_;
  LoadOptions options_;
  KeyGate gate_;
  RunState state_ = RunState::idle;
  Report report_;
  std::size_t next_ = 0;     // next op to take, in file order
  std::size_t workers_ = 0;  // alive
  std::uint64_t done_ = 0;
  std::size_t in_flight_ = 0;
  std::size_t max_in_flight_ = 0;
  std::size_t error_lines_ = 0;
  bool stalled_ = false;
  Clock::time_point start_{};
  Clock::time_point last_progress_{};
  // --verify: what this run last did to a key.
  struct Expected {
    enum class State : std::uint8_t {
      unknown,  // the last SET or DEL failed: the key may hold anything
      value,    // SET: holds `value`
      missing,  // DEL: holds nothing
    };
    State state = State::unknown;
    ValueSpec value;
    // A value with a TTL: the server stored it between two moments of our
    // clock (the request's submit and its reply), so it expires between
    // those plus the TTL (max: no expiry).
    Clock::time_point expires_from = Clock::time_point::max();
    Clock::time_point expires_by = Clock::time_point::max();
    [[nodiscard]] bool expiring() const noexcept { return expires_from != Clock::time_point::max(); }
  };
  // What --verify expects of an answer given between t0 (submit) and t1
  // (reply): the key surely still holds `want`'s value, surely holds nothing
  // (expired), or either (the answer fell in its expiry window).
  enum class Holds : std::uint8_t { value, nothing, either };
  [[nodiscard]] Holds holds(const Expected& want, Clock::time_point t0, Clock::time_point t1) const noexcept;
  std::unordered_map<std::string, Expected> expected_;
};

}  // namespace rkv::kv::load
