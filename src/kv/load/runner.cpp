// LoadRun and drive(): see runner.hpp.
#include "kv/load/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <span>
#include <utility>

#include "kv/load/await.hpp"
#include "proto/wire.hpp"  // kCallOpSize only

namespace rkv::kv::load {

using client::ShardSet;
using client::Status;

namespace {
// A failed SET's error text: the status name, and for no_memory what it means.
std::string set_status_text(Status s) {
  std::string t(to_string(s));
  if (s == Status::no_memory) t += ": the server's memory limit is reached (kvd --max-memory); nothing was stored";
  return t;
}
}  // namespace

std::string_view to_string(RunState s) noexcept {
  switch (s) {
    case RunState::idle: return "idle";
    case RunState::running: return "running";
    case RunState::finished: return "finished";
  }
  return "invalid";
}

LoadRun::LoadRun(Scheduler& scheduler, ShardSet& shards, const std::vector<Op>& ops, LoadOptions options)
    : scheduler_(&scheduler), shards_(&shards), ops_(&ops), options_(std::move(options)), gate_(scheduler) {
  options_.depth = std::clamp(options_.depth, 1u, kMaxDepth);
  report_.name = options_.name;
  report_.shards.resize(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) report_.shards[i].server = shards.server(i).id;
  if (options_.verify) {
    for (const Op& op : options_.expect) {
      switch (op.kind) {
        case Op::Kind::set: expected_.insert_or_assign(op.key, Expected{Expected::State::value, op.value}); break;
        case Op::Kind::del: expected_.insert_or_assign(op.key, Expected{Expected::State::missing, {}}); break;
        case Op::Kind::get:
        case Op::Kind::call:
        case Op::Kind::expire:
        case Op::Kind::ttl: break;
      }
    }
  }
}

void LoadRun::start() {
  if (state_ != RunState::idle) return;
  start_ = last_progress_ = Clock::now();
  state_ = RunState::running;
  const std::size_t n = std::min<std::size_t>(options_.depth, ops_->size());
  if (n == 0) {
    state_ = RunState::finished;
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    scheduler_->spawn([this] { worker(); });
    ++workers_;
  }
}

double LoadRun::elapsed_seconds() const noexcept {
  if (state_ == RunState::idle) return 0.0;
  if (state_ == RunState::finished) return report_.seconds;
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void LoadRun::worker() {
  struct Exit {  // runs on return and on cancellation alike
    LoadRun* run;
    ~Exit() {
      if (--run->workers_ == 0) {
        run->report_.seconds = std::chrono::duration<double>(Clock::now() - run->start_).count();
        run->state_ = RunState::finished;
      }
    }
  } exit{this};
  // SET values are built here and reused, so large ones stay registered in
  // the client's pin-down cache; forgotten before the memory goes.
  struct ValueBuffer {
    ShardSet* client;
    std::vector<std::byte> bytes;
    ~ValueBuffer() { client->forget(bytes); }
  } buf{shards_, {}};
  while (next_ < ops_->size()) {
    const Op& op = (*ops_)[next_++];
    // Earlier ops on this key are done. A CALL names no key: it waits for nothing.
    const KeyGate::Guard key = op.kind == Op::Kind::call ? KeyGate::Guard() : gate_.lock(op.key);
    // Its server: the key's, placed once here (a CALL's is server 0: run_call).
    const std::size_t shard = op.kind == Op::Kind::call  ? 0
                              : op.kind == Op::Kind::get ? shards_->read_shard_of(op.key)  // --read-from
                                                         : shards_->shard_of(op.key);
    switch (op.kind) {
      case Op::Kind::set:
      case Op::Kind::call: {
        const std::uint64_t size = value_size(op.value);
        if (size > buf.bytes.capacity()) {
          shards_->forget(buf.bytes);
          buf.bytes = std::vector<std::byte>();  // free before allocating the bigger one
        }
        buf.bytes.resize(size);
        if (op.kind == Op::Kind::set) {
          run_set(op, shard, buf.bytes);
        } else {
          run_call(op, buf.bytes);
        }
        break;
      }
      case Op::Kind::get: run_get(op, shard); break;
      case Op::Kind::del: run_del(op, shard); break;
      case Op::Kind::expire: run_expire(op, shard); break;
      case Op::Kind::ttl: run_ttl(op, shard); break;
    }
    ++done_;
  }
}

template <class Await>
LoadRun::Timed LoadRun::timed(Await&& await) {
  Timed t;
  t.t0 = Clock::now();
  begin_op();
  t.r = await();
  t.t1 = Clock::now();
  end_op(t.t1);
  t.ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.t1 - t.t0).count());
  t.ok = t.r.status == Status::ok;
  return t;
}

void LoadRun::begin_op() {
  ++in_flight_;
  max_in_flight_ = std::max(max_in_flight_, in_flight_);
}

void LoadRun::end_op(Clock::time_point now) {
  --in_flight_;
  last_progress_ = now;
}

void LoadRun::record_shard(std::size_t shard, Status st, std::uint64_t ns) noexcept {
  // A cluster's member that joined during the run has a new shard index: its row.
  if (shard >= report_.shards.size() && shard < shards_->size()) {
    try {
      const std::size_t from = report_.shards.size();
      report_.shards.resize(shards_->size());
      for (std::size_t i = from; i < shards_->size(); ++i) report_.shards[i].server = shards_->server(i).id;
    } catch (...) {  // out of memory: the op counts in the totals, not in a row
    }
  }
  report_.record_shard(shard, st == Status::ok, st == Status::shard_down, ns);
}

void LoadRun::run_set(const Op& op, std::size_t shard, std::span<std::byte> value) {
  write_value(op.value, value);
  const auto [r, t0, t1, ns, ok] = timed(
      [&] { return await_set(*scheduler_, *shards_, shard, op.key, value, op.ttl_ms); });
  report_.record(Op::Kind::set, size_class(op.key.size(), value.size()), op.key.size() + value.size(), ns, ok);
  record_shard(shard, r.status, ns);
  if (options_.verify) {
    Expected e = ok ? Expected{Expected::State::value, op.value} : Expected{};
    if (ok && op.ttl_ms != 0) {
      e.expires_from = t0 + std::chrono::milliseconds(op.ttl_ms);
      e.expires_by = t1 + std::chrono::milliseconds(op.ttl_ms);
    }
    expected_.insert_or_assign(op.key, std::move(e));
  }
  if (ok && options_.on_set_ok) options_.on_set_ok(op, value);
  if (!ok) error_line(op, set_status_text(r.status));
}

void LoadRun::run_get(const Op& op, std::size_t shard) {
  const Expected* want = nullptr;  // --verify: what this run last did to the key (null: unchecked)
  if (options_.verify) {
    if (const auto it = expected_.find(op.key); it != expected_.end() && it->second.state != Expected::State::unknown) {
      want = &it->second;
    }
  }
  const ValueSpec* want_value = want != nullptr && want->state == Expected::State::value ? &want->value : nullptr;
  const auto [r, t0, t1, ns, ok] = timed(
      [&] { return await_get(*scheduler_, *shards_, shard, op.key, want_value != nullptr); });
  const std::uint64_t size = ok ? r.size : (want_value != nullptr ? value_size(*want_value) : 0);
  report_.record(Op::Kind::get, size_class(op.key.size(), size), op.key.size() + r.size,
                 ns, ok);
  record_shard(shard, r.status, ns);
  if (!ok) {
    error_line(op, std::string(to_string(r.status)));
    return;
  }
  report_.record_get_found(r.found);
  const Holds now = want_value != nullptr ? holds(*want, t0, t1) : Holds::value;
  if (want_value != nullptr && r.found && now == Holds::nothing) {
    ++report_.mismatches;
    error_line(op, "returned a value after its time to live ran out");
  } else if (want_value != nullptr && r.found && !matches(*want_value, r.value)) {
    ++report_.mismatches;
    error_line(op, "returned other bytes than were SET (" + std::to_string(r.size) + " bytes, expected " +
                       std::to_string(value_size(*want_value)) + ")");
  } else if (want_value != nullptr && !r.found && now == Holds::value) {
    ++report_.mismatches;
    error_line(op, want->expiring() ? "found nothing before its time to live ran out"
                                    : "found nothing, expected the value SET before");
  } else if (want != nullptr && want->state == Expected::State::missing && r.found) {
    ++report_.mismatches;
    error_line(op, "returned " + std::to_string(r.size) + " bytes, expected nothing (DELeted before)");
  }
}

void LoadRun::run_del(const Op& op, std::size_t shard) {
  Expected::State before = Expected::State::unknown;  // --verify: what the key should hold now
  if (options_.verify) {
    if (const auto it = expected_.find(op.key); it != expected_.end()) before = it->second.state;
  }
  const auto [r, t0, t1, ns, ok] = timed([&] { return await_del(*scheduler_, *shards_, shard, op.key); });
  report_.record(Op::Kind::del, SizeClass::eager, op.key.size(), ns, ok);
  record_shard(shard, r.status, ns);
  if (options_.verify) {
    if (before == Expected::State::value) {  // a value with a TTL may have expired meanwhile
      const Holds now = holds(expected_.find(op.key)->second, t0, t1);
      if (now == Holds::either) before = Expected::State::unknown;
      if (now == Holds::nothing) before = Expected::State::missing;  // it expired: a DEL finds nothing
    }
    if (ok && before == Expected::State::value && !r.found) {
      ++report_.mismatches;
      error_line(op, "found nothing to delete, expected the value SET before");
    } else if (ok && before == Expected::State::missing && r.found) {
      ++report_.mismatches;
      error_line(op, "deleted a value, expected none (DELeted before)");
    }
    expected_.insert_or_assign(op.key, ok ? Expected{Expected::State::missing, {}} : Expected{});
  }
  if (ok && options_.on_del_ok) options_.on_del_ok(op, r.found);
  if (!ok) error_line(op, std::string(to_string(r.status)));
}

LoadRun::Holds LoadRun::holds(const Expected& want, Clock::time_point t0, Clock::time_point t1) const noexcept {
  if (!want.expiring()) return Holds::value;
  // The server's clock reads whole ms, coarsely (CLOCK_REALTIME_COARSE: a
  // few ms): a margin on both sides of the window.
  constexpr auto kSlop = std::chrono::milliseconds(20);
  if (t1 + kSlop < want.expires_from) return Holds::value;  // answered before it could expire
  if (want.expires_by < Clock::time_point::max() - kSlop && t0 > want.expires_by + kSlop) {
    return Holds::nothing;  // asked after it surely expired (and was withdrawn)
  }
  return Holds::either;
}

void LoadRun::run_expire(const Op& op, std::size_t shard) {
  const auto [r, t0, t1, ns, ok] = timed(
      [&] { return await_expire(*scheduler_, *shards_, shard, op.key, op.ttl_ms); });
  report_.record(Op::Kind::expire, SizeClass::eager, op.key.size(), ns, ok);
  record_shard(shard, r.status, ns);
  if (!ok) error_line(op, std::string(to_string(r.status)));
  if (!options_.verify) return;
  const auto it = expected_.find(op.key);
  if (it == expected_.end()) return;  // not this run's key
  Expected& e = it->second;
  if (!ok) {
    e = Expected{};
    return;
  }
  if (e.state == Expected::State::value) {
    const Holds now = holds(e, t0, t1);
    if (!r.found && now == Holds::value) {
      ++report_.mismatches;
      error_line(op, "found no key, expected the value SET before");
    } else if (r.found && now == Holds::nothing) {
      ++report_.mismatches;
      error_line(op, "found the key after its time to live ran out");
    }
  } else if (e.state == Expected::State::missing && r.found) {
    ++report_.mismatches;
    error_line(op, "found a key, expected none (DELeted before)");
  }
  if (!r.found) {
    e = Expected{Expected::State::missing, {}};
  } else if (op.ttl_ms == 0) {  // it persists now
    e.expires_from = e.expires_by = Clock::time_point::max();
  } else {
    e.expires_from = t0 + std::chrono::milliseconds(op.ttl_ms);
    e.expires_by = t1 + std::chrono::milliseconds(op.ttl_ms);
  }
}

void LoadRun::run_ttl(const Op& op, std::size_t shard) {
  const auto [r, t0, t1, ns, ok] = timed([&] { return await_ttl(*scheduler_, *shards_, shard, op.key); });
  report_.record(Op::Kind::ttl, SizeClass::eager, op.key.size(), ns, ok);
  record_shard(shard, r.status, ns);
  if (!ok) {
    error_line(op, std::string(to_string(r.status)));
    return;
  }
  if (!options_.verify) return;
  const auto it = expected_.find(op.key);
  if (it == expected_.end() || it->second.state == Expected::State::unknown) return;
  const Expected& e = it->second;
  const std::int64_t left = r.found ? client::ClientConn::ttl_of(r.value) : -2;
  const Holds now = e.state == Expected::State::value ? holds(e, t0, t1) : Holds::nothing;
  if (r.found && now == Holds::nothing) {
    ++report_.mismatches;
    error_line(op, "found the key, expected none");
  } else if (!r.found && now == Holds::value) {
    ++report_.mismatches;
    error_line(op, "found no key, expected the value SET before");
  } else if (r.found && (e.expiring() ? left < 0 : left != -1)) {
    ++report_.mismatches;
    error_line(op, e.expiring() ? "says the key has no expiry, expected a time to live"
                                : "says the key expires in " + std::to_string(left) + " ms, expected no expiry");
  }
}

// A CALL's reply is not checked (--verify refuses workloads with CALLs: a
// handler may write any key); a non-ok status is an error line.
void LoadRun::run_call(const Op& op, std::span<std::byte> request) {
  write_value(op.value, request);
  const auto [r, t0, t1, ns, ok] = timed([&] { return await_call(*scheduler_, *shards_, 0, op.call_op, request); });
  report_.record(Op::Kind::call, size_class(proto::kCallOpSize, request.size()), request.size() + r.size,
                 ns, ok);
  record_shard(0, r.status, ns);
  if (!ok) error_line(op, std::string(to_string(r.status)));
}

void LoadRun::error_line(const Op& op, const std::string& what) {
  ++error_lines_;
  if (!options_.on_error || error_lines_ > options_.max_error_lines + 1) return;
  if (error_lines_ == options_.max_error_lines + 1) {
    options_.on_error(options_.name + ": more errors; not shown");
    return;
  }
  const std::string target = op.kind == Op::Kind::call ? fmt::format("{:#06x}", op.call_op) : op.key;
  options_.on_error(options_.name + ":" + std::to_string(op.line) + ": " + std::string(to_string(op.kind)) + " " +
                    target + ": " + what);
}

void LoadRun::check_stall(Clock::time_point now) {
  if (state_ != RunState::running || stalled_ || in_flight_ == 0) return;
  if (now - last_progress_ < options_.stall_timeout) return;
  stalled_ = true;
  if (options_.on_error) {
    options_.on_error(options_.name + ": no reply for " + std::to_string(options_.stall_timeout.count()) +
                      " ms with " + std::to_string(in_flight_) + " requests in flight; closing the connection");
  }
  shards_->close();  // every pending op completes with Status::closed; later submits are refused
}

}  // namespace rkv::kv::load
