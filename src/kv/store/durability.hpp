#pragma once
// Durability: the seam between the server's SET and DEL paths (ServerConn)
// and the durability log (src/durable/log.hpp), so the protocol suite can
// drive ServerConn with a fake. Header only.
//
// ServerConn applies a SET (DEL, EXPIRE) to the Store first, then calls
// record_set() (record_del(), record_expire()). A key that expires is not
// recorded: its records carry the absolute expiry time, and recovery drops
// what has expired. The answer says when the client may be told "ok":
//   now     acknowledge at once (fsync batch/never while the disk is healthy)
//   later   the reply waits: the implementation calls the sink given to the
//           owner (Server::on_durable, wired by kvd) with (conn_token, wait,
//           status) once the record is durable (ok) or failed (io_error).
//           The token is the connection's slot + generation, `wait` the
//           connection's key of the waiting request (its pending entry's
//           slot + generation), never pointers: an acknowledgement for a
//           connection or a request that has gone is dropped by its owner.
//   failed  answer io_error at once (nothing was queued)
// Key and value are copied (small) or pinned through `large` (the value's
// arena block, written to disk straight from that memory) before it returns.
//
// Thread: the reactor's.

#include <cstdint>
#include <string>
#include <string_view>

#include "kv/store/stats.hpp"
#include "kv/store/store.hpp"

namespace rkv::kv::store {

enum class DurableAck : std::uint8_t { now, later, failed };

[[nodiscard]] constexpr std::string_view to_string(DurableAck a) noexcept {
  switch (a) {
    case DurableAck::now: return "now";
    case DurableAck::later: return "later";
    case DurableAck::failed: return "failed";
  }
  return "invalid";
}

class Durability {
 public:
  Durability() = default;
  Durability(const Durability&) = delete;
  Durability& operator=(const Durability&) = delete;
  Durability(Durability&&) = delete;
  Durability& operator=(Durability&&) = delete;
  virtual ~Durability() = default;

  // `large` is set iff the value lives in the arena (value == large->view()).
  // expire_at: the key's absolute expiry (kNoExpiry: none), as the Store has it.
  [[nodiscard]] virtual DurableAck record_set(std::string_view key, std::string_view value, const LargeRef& large,
                                              ExpireAt expire_at, std::uint64_t conn_token,
                                              std::uint32_t wait) noexcept = 0;
  // The key's expiry changed (EXPIRE; kNoExpiry: it persists now). Answered as record_set.
  [[nodiscard]] virtual DurableAck record_expire(std::string_view key, ExpireAt expire_at, std::uint64_t conn_token,
                                                 std::uint32_t wait) noexcept = 0;
  // A DEL of `key` (a tombstone), whether or not the key existed: its
  // acknowledgement means "absent, durably", which a tombstone written behind
  // every earlier record of the key guarantees. Answered as record_set.
  [[nodiscard]] virtual DurableAck record_del(std::string_view key, std::uint64_t conn_token,
                                              std::uint32_t wait) noexcept = 0;
  // A key the Store evicted (kvd --eviction): a tombstone no reply waits
  // for, written with the records around it, so a restart does not bring the
  // key back. Never answers `later`; a failure is counted by the log, and
  // the key is gone from memory either way.
  virtual void record_eviction(std::string_view key) noexcept = 0;
  // End of one batch of request processing (the server calls it after each
  // CQ drain): queued records may be submitted now, together.
  virtual void flush() noexcept = 0;
  // Its rows of the server's statistics (kv/store/stats.hpp).
  virtual void append_stats(StatRows& rows) const = 0;
  // Its Prometheus histogram families (HELP, TYPE and samples), appended
  // after the rows' exposition (kvd --metrics).
  virtual void append_histograms(std::string& out) const = 0;
};

}  // namespace rkv::kv::store
