#pragma once
// The value-size mix of `kvload gen --sizes`: a comma-separated list of
// SIZE[:WEIGHT], SIZE in bytes with an optional k/K (1024) or m/M (1024*1024)
// suffix, WEIGHT a positive integer (default 1). Example: `64:8,4k:2,1m:1`
// draws 64-byte values 8 times as often as 1 MiB ones.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/load/workload.hpp"

namespace rkv::kv::load {

// A size such as 4096, 4k, 1M; nullopt if malformed or above 2^63.
[[nodiscard]] std::optional<std::uint64_t> parse_size(std::string_view text) noexcept;

// The whole list; on error nullopt and `error` says which entry and why.
[[nodiscard]] std::optional<std::vector<SizeWeight>> parse_size_mix(std::string_view text, std::string& error);

}  // namespace rkv::kv::load
