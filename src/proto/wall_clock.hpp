#pragma once
// The wall clock key expiry is read against, on both sides of the wire: the
// server stores and withdraws by it (kv::store::wall_ms), a one-sided reader
// applies an index entry's expire_at by it (proto::expiry_verdict).
// CLOCK_REALTIME_COARSE in whole ms since the Unix epoch: a clock two
// machines can agree on (NTP, PTP), unlike a monotonic one.

#include <cstdint>
#include <ctime>

namespace rkv::proto {

[[nodiscard]] inline std::int64_t wall_ms() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace rkv::proto
