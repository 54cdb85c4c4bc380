// key_table_seed (key_table.hpp).
#include "kv/store/key_table.hpp"

#include <sys/random.h>

#include <atomic>
#include <chrono>

#include "proto/index_format.hpp"

namespace rkv::kv::store {
namespace {

std::uint64_t process_seed() noexcept {
  std::uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    // No entropy yet (early boot): the clock and an address, still unknown to a remote writer.
    r = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        reinterpret_cast<std::uintptr_t>(&r);
  }
  return r;
}

}  // namespace

std::uint64_t key_table_seed() noexcept {
  static const std::uint64_t base = process_seed();
  static std::atomic<std::uint64_t> handed{0};
  return proto::fmix64(base + 0x9E3779B97F4A7C15ull * handed.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace rkv::kv::store
