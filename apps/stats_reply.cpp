// parse_stats_reply: see stats_reply.hpp.
#include "stats_reply.hpp"

#include <chrono>
#include <charconv>

namespace rkv::apps {

namespace {
bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (const char ch : n) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  }
  return true;
}
}  // namespace

bool parse_stats_reply(std::string_view text, std::vector<StatsRow>& out, std::string& bad) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    if (nl == std::string_view::npos) {
      bad.assign(text);
      return false;  // every line ends with a newline
    }
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    const auto sp = line.find(' ');
    StatsRow row;
    const std::string_view name = line.substr(0, sp);
    const std::string_view num = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), row.value);
    if (!valid_name(name) || num.empty() || ec != std::errc{} || ptr != num.data() + num.size()) {
      bad.assign(line);
      return false;
    }
    row.name.assign(name);
    out.push_back(std::move(row));
  }
  return true;
}

kv::client::ClientOptions stats_client_options(const std::string& auth_token) {
  kv::client::ClientOptions o;
  o.max_in_flight = 1;
  o.send_count = 1;
  o.rdv.landing_spares = 0;
  o.poll = std::chrono::microseconds{0};
  o.auth_token = auth_token;
  return o;
}

bool ask_stats(kv::client::Client& client, std::vector<StatsRow>& rows, std::string& why) {
  std::string text;
  if (const auto st = client.stats_sync(text); st != kv::client::Status::ok) {
    why = std::string(kv::client::to_string(st)) + (client.failure().empty() ? "" : ": " + client.failure());
    return false;
  }
  std::string bad;
  if (!parse_stats_reply(text, rows, bad)) {
    why = "malformed reply: line \"" + bad + "\"";
    return false;
  }
  return true;
}

}  // namespace rkv::apps
