#pragma once
// The text of a STATS reply (docs/protocol.md): "name value\n" per row of
// kvd's statistics. Parsed here for `rkv stats` (prints them) and `rkv top`
// (rates from two of them).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kv/client/client.hpp"

namespace rkv::apps {

struct StatsRow {
  std::string name;
  std::uint64_t value = 0;
};

// Every line "name value" (name [a-z0-9_]{1,64}, value a decimal u64, each
// line ending in a newline); false (and `bad` set to the offending line) on
// anything else.
[[nodiscard]] bool parse_stats_reply(std::string_view text, std::vector<StatsRow>& out, std::string& bad);

// The options of a client that only asks for statistics: one request at a
// time, no landing buffers, no spinning between its requests.
[[nodiscard]] kv::client::ClientOptions stats_client_options(const std::string& auth_token);
// A STATS request on `client` and its parsed rows; false, and why (the
// status and the connection's failure, or the malformed line), otherwise.
[[nodiscard]] bool ask_stats(kv::client::Client& client, std::vector<StatsRow>& rows, std::string& why);

}  // namespace rkv::apps
