// etcd's JSON gateway bodies: see etcd_wire.hpp.
#include "cluster/etcd_wire.hpp"

#include <array>
#include <charconv>
#include <nlohmann/json.hpp>

namespace rkv::cluster {

namespace {

using nlohmann::json;

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) noexcept {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// A body parsed as a JSON object, or nullopt (and why).
std::optional<json> object(std::string_view body, std::string& error) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    error = "etcd's reply is not JSON";
    return std::nullopt;
  }
  if (!j.is_object()) {
    error = "etcd's reply is not a JSON object";
    return std::nullopt;
  }
  return j;
}

// An int64 the gateway wrote as a decimal string (or, leniently, a number);
// absent: 0 (the gateway leaves default values out).
std::optional<std::int64_t> int64_field(const json& obj, const char* name, std::string& error) {
  const auto it = obj.find(name);
  if (it == obj.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (!s.empty() && ec == std::errc() && end == s.data() + s.size()) return v;
  }
  error = std::string("etcd's reply has a bad '") + name + "'";
  return std::nullopt;
}

// A base64 bytes field; absent: empty.
std::optional<std::string> bytes_field(const json& obj, const char* name, std::string& error) {
  const auto it = obj.find(name);
  if (it == obj.end()) return std::string();
  if (it->is_string()) {
    if (auto v = base64_decode(it->get_ref<const std::string&>())) return v;
  }
  error = std::string("etcd's reply has a bad '") + name + "' (not base64)";
  return std::nullopt;
}

std::optional<std::int64_t> header_revision(const json& obj, std::string& error) {
  const auto h = obj.find("header");
  if (h == obj.end() || !h->is_object()) {
    error = "etcd's reply has no header";
    return std::nullopt;
  }
  return int64_field(*h, "revision", error);
}

std::optional<Lease> lease_of(const json& obj, std::string& error) {
  const auto id = int64_field(obj, "ID", error);
  const auto ttl = int64_field(obj, "TTL", error);
  if (!id || !ttl) return std::nullopt;
  return Lease{*id, *ttl};
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto n = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                   static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    std::array<int, 4> v{};
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + static_cast<std::size_t>(k)];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v[static_cast<std::size_t>(k)] = 0;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      v[static_cast<std::size_t>(k)] = sextet(c);
      if (v[static_cast<std::size_t>(k)] < 0) return std::nullopt;
    }
    const unsigned n = (static_cast<unsigned>(v[0]) << 18) | (static_cast<unsigned>(v[1]) << 12) |
                       (static_cast<unsigned>(v[2]) << 6) | static_cast<unsigned>(v[3]);
    // Canonical: the bits padding leaves unused are zero ("Zh==" is not "Zg==").
    if ((pad == 2 && (n & 0xffff) != 0) || (pad == 1 && (n & 0xff) != 0)) return std::nullopt;
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // all 0xff: to the end of the keyspace
}

std::string grant_body(std::int64_t ttl_seconds, std::int64_t id) {
  json j{{"TTL", std::to_string(ttl_seconds)}};
  if (id != 0) j["ID"] = std::to_string(id);
  return j.dump();
}
std::string keepalive_body(std::int64_t lease) { return json{{"ID", std::to_string(lease)}}.dump(); }
std::string revoke_body(std::int64_t lease) { return json{{"ID", std::to_string(lease)}}.dump(); }

std::string put_body(std::string_view key, std::string_view value, std::int64_t lease) {
  json j{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j.dump();
}

std::string range_prefix_body(std::string_view prefix) {
  return json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}}.dump();
}

std::string delete_body(std::string_view key) { return json{{"key", base64_encode(key)}}.dump(); }

std::string watch_prefix_body(std::string_view prefix, std::int64_t start_revision) {
  return json{{"create_request",
               {{"key", base64_encode(prefix)},
                {"range_end", base64_encode(prefix_end(prefix))},
                {"start_revision", std::to_string(start_revision)}}}}
      .dump();
}

std::string put_if_body(std::string_view key, std::string_view value, std::int64_t mod_revision,
                        std::span<const std::string> absent) {
  const std::string k = base64_encode(key);
  // etcd compares a key that does not exist as mod_revision 0, and version 0.
  json compare = json::array({{{"key", k}, {"result", "EQUAL"}, {"target", "MOD"},
                               {"mod_revision", std::to_string(mod_revision)}}});
  for (const std::string& a : absent) {
    compare.push_back({{"key", base64_encode(a)}, {"result", "EQUAL"}, {"target", "VERSION"}, {"version", "0"}});
  }
  return json{{"compare", std::move(compare)},
              {"success", json::array({{{"request_put", {{"key", k}, {"value", base64_encode(value)}}}}})}}
      .dump();
}

std::optional<Lease> parse_grant(std::string_view body, std::string& error) {
  const auto j = object(body, error);
  if (!j) return std::nullopt;
  if (const auto e = j->find("error"); e != j->end() && e->is_string() && !e->get_ref<const std::string&>().empty()) {
    error = "etcd refused the lease: " + e->get<std::string>();
    return std::nullopt;
  }
  auto lease = lease_of(*j, error);
  if (lease && (lease->id == 0 || lease->ttl <= 0)) {
    error = "etcd's lease grant has no ID or TTL";
    return std::nullopt;
  }
  return lease;
}

std::optional<Lease> parse_keepalive(std::string_view body, std::string& error) {
  const auto j = object(body, error);
  if (!j) return std::nullopt;
  const auto r = j->find("result");
  if (r == j->end() || !r->is_object()) {
    error = "etcd's keepalive reply has no result";
    return std::nullopt;
  }
  return lease_of(*r, error);
}

std::optional<RangeResult> parse_range(std::string_view body, std::string& error) {
  const auto j = object(body, error);
  if (!j) return std::nullopt;
  RangeResult out;
  const auto rev = header_revision(*j, error);
  if (!rev) return std::nullopt;
  out.revision = *rev;
  const auto kvs = j->find("kvs");
  if (kvs == j->end()) return out;  // no key in the range
  if (!kvs->is_array()) {
    error = "etcd's range reply has a bad 'kvs'";
    return std::nullopt;
  }
  for (const auto& e : *kvs) {
    if (!e.is_object()) {
      error = "etcd's range reply has a bad entry";
      return std::nullopt;
    }
    auto key = bytes_field(e, "key", error);
    auto value = bytes_field(e, "value", error);
    const auto lease = int64_field(e, "lease", error);
    const auto mod = int64_field(e, "mod_revision", error);
    if (!key || !value || !lease || !mod) return std::nullopt;
    out.kvs.push_back(KeyValue{std::move(*key), std::move(*value), *lease, *mod});
  }
  return out;
}

std::optional<WatchMessage> parse_watch(std::string_view line, std::string& error) {
  const auto j = object(line, error);
  if (!j) return std::nullopt;
  if (j->contains("error")) {
    error = "etcd ended the watch: " + error_message(line);
    return std::nullopt;
  }
  const auto r = j->find("result");
  if (r == j->end() || !r->is_object()) {
    error = "etcd's watch message has no result";
    return std::nullopt;
  }
  WatchMessage out;
  const auto rev = header_revision(*r, error);
  const auto compact = int64_field(*r, "compact_revision", error);
  if (!rev || !compact) return std::nullopt;
  out.revision = *rev;
  out.compact_revision = *compact;
  for (auto [name, flag] : {std::pair{"created", &out.created}, std::pair{"canceled", &out.canceled}}) {
    const auto f = r->find(name);
    if (f == r->end()) continue;
    if (!f->is_boolean()) {
      error = std::string("etcd's watch message has a bad '") + name + "'";
      return std::nullopt;
    }
    *flag = f->get<bool>();
  }
  if (const auto c = r->find("cancel_reason"); c != r->end() && c->is_string()) out.cancel_reason = c->get<std::string>();
  const auto events = r->find("events");
  if (events == r->end()) return out;
  if (!events->is_array()) {
    error = "etcd's watch message has a bad 'events'";
    return std::nullopt;
  }
  for (const auto& e : *events) {
    const auto kv = e.is_object() ? e.find("kv") : e.end();
    if (!e.is_object() || kv == e.end() || !kv->is_object()) {
      error = "etcd's watch message has a bad event";
      return std::nullopt;
    }
    WatchEvent ev;
    // The gateway leaves the default type (PUT) out.
    if (const auto t = e.find("type"); t != e.end()) {
      if (t->is_string() && t->get_ref<const std::string&>() == "DELETE") {
        ev.type = WatchEvent::Type::del;
      } else if (!(t->is_string() && t->get_ref<const std::string&>() == "PUT")) {
        error = "etcd's watch message has an event of an unknown type";
        return std::nullopt;
      }
    }
    auto key = bytes_field(*kv, "key", error);
    auto value = bytes_field(*kv, "value", error);
    const auto lease = int64_field(*kv, "lease", error);
    const auto mod = int64_field(*kv, "mod_revision", error);
    if (!key || !value || !lease || !mod) return std::nullopt;
    if (key->empty()) {
      error = "etcd's watch message has an event without a key";
      return std::nullopt;
    }
    ev.kv = KeyValue{std::move(*key), std::move(*value), *lease, *mod};
    out.events.push_back(std::move(ev));
  }
  return out;
}

std::optional<std::int64_t> parse_header_revision(std::string_view body, std::string& error) {
  const auto j = object(body, error);
  if (!j) return std::nullopt;
  return header_revision(*j, error);
}

std::optional<TxnResult> parse_txn(std::string_view body, std::string& error) {
  const auto j = object(body, error);
  if (!j) return std::nullopt;
  const auto rev = header_revision(*j, error);
  if (!rev) return std::nullopt;
  TxnResult out{*rev, false};
  if (const auto ok = j->find("succeeded"); ok != j->end()) {  // left out when false
    if (!ok->is_boolean()) {
      error = "etcd's txn reply has a bad 'succeeded'";
      return std::nullopt;
    }
    out.succeeded = ok->get<bool>();
  }
  return out;
}

std::string error_message(std::string_view body) {
  std::string ignored;
  if (const auto j = object(body, ignored)) {
    for (const char* field : {"message", "error"}) {
      if (const auto m = j->find(field); m != j->end() && m->is_string()) return m->get<std::string>();
    }
  }
  constexpr std::size_t kShown = 200;
  return std::string(body.substr(0, kShown));
}

}  // namespace rkv::cluster
