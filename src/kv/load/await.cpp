// await_set/await_get/await_del/await_expire/await_ttl/await_call: see await.hpp.
#include "kv/load/await.hpp"

#include <chrono>
#include <memory>
#include <utility>

namespace rkv::kv::load {

using client::ShardSet;
using client::Status;

namespace {

// Shared by the waiting fiber and the op's callback.
struct Pending {
  Scheduler* scheduler;  // null once the fiber stopped waiting (cancelled)
  FiberId fiber;
  bool keep_value = false;
  bool done = false;
  OpResult result;

  void complete(Status st, bool found, std::span<const std::byte> value) noexcept {
    result.status = st;
    result.found = found;
    result.size = value.size();
    if (keep_value) {
      try {
        result.value.assign(value.begin(), value.end());
      } catch (...) {  // out of memory here: the bytes cannot be checked
        result.status = Status::no_memory;
      }
    }
    done = true;
    if (scheduler != nullptr) scheduler->wake(fiber);
  }
};

OpResult wait_for(Scheduler& s, const std::shared_ptr<Pending>& p) {
  try {
    while (!p->done) s.suspend();
  } catch (...) {
    p->scheduler = nullptr;
    throw;
  }
  return std::move(p->result);
}

// Submits with a callback that completes `p`, then waits; a refused submit returns at once.
template <class Submit>
OpResult submit_and_wait(Scheduler& s, bool keep_value, Submit&& submit) {
  auto p = std::make_shared<Pending>(Pending{&s, s.current(), keep_value, false, {}});
  const Status st = submit([p](Status r, bool found, std::span<const std::byte> v) { p->complete(r, found, v); });
  if (st != Status::ok) return OpResult{st, false, 0, {}};
  return wait_for(s, p);
}

// A fiber's pause of `d` on the ShardSet's reactor (other fibers and the loop run meanwhile).
void pause(Scheduler& s, ShardSet& c, std::chrono::milliseconds d) {
  const FiberId self = s.current();
  bool due = false;
  const reactor::Timer t = c.reactor().after(d, [&s, self, &due] {
    due = true;
    s.wake(self);
  });
  while (!due) s.suspend();
}

// submit_and_wait on the key's shard, placed again after not_owner, or
// after its primary went down in a cluster (ShardSet::place_again: every op
// here may run twice) (await.hpp).
template <class Submit>
OpResult placed(Scheduler& s, ShardSet& c, std::string_view key, std::size_t& shard, bool keep_value, Submit&& submit,
                bool read = false) {
  OpResult r = submit_and_wait(s, keep_value, [&](client::Callback cb) { return submit(shard, std::move(cb)); });
  if (r.status == Status::ok || !c.place_again(r.status, true)) return r;  // the common case reads no clock
  const auto first = reactor::Reactor::Clock::now();
  for (unsigned n = 0; r.status != Status::ok && c.place_again(r.status, true); ++n) {
    const auto d = c.not_owner_pause(n, first);
    if (!d) break;
    pause(s, c, *d);
    shard = read ? c.read_shard_of(key) : c.shard_of(key);
    r = submit_and_wait(s, keep_value, [&](client::Callback cb) { return submit(shard, std::move(cb)); });
  }
  return r;
}

}  // namespace

OpResult await_set(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key,
                   std::span<const std::byte> value, std::uint64_t ttl_ms) {
  return placed(s, c, key, shard, false, [&](std::size_t at, client::Callback cb) {
    return c.set(at, key, value, std::move(cb), nullptr, ttl_ms);
  });
}

OpResult await_get(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key, bool keep_value) {
  return placed(
      s, c, key, shard, keep_value, [&](std::size_t at, client::Callback cb) { return c.get(at, key, std::move(cb)); },
      true);
}

OpResult await_del(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key) {
  return placed(s, c, key, shard, false, [&](std::size_t at, client::Callback cb) { return c.del(at, key, std::move(cb)); });
}

OpResult await_expire(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key, std::uint64_t ttl_ms) {
  return placed(s, c, key, shard, false,
                [&](std::size_t at, client::Callback cb) { return c.expire(at, key, ttl_ms, std::move(cb)); });
}

OpResult await_ttl(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key) {
  return placed(s, c, key, shard, true, [&](std::size_t at, client::Callback cb) { return c.ttl(at, key, std::move(cb)); });
}

OpResult await_call(Scheduler& s, ShardSet& c, std::size_t shard, std::uint16_t op,
                    std::span<const std::byte> request) {
  return submit_and_wait(s, true, [&](client::Callback cb) { return c.call(shard, op, request, std::move(cb)); });
}

}  // namespace rkv::kv::load
