// The C API (kv.h) over CHandle (c_handle.hpp: the handle's Reactor and
// Client, the per-key lines, the completions, kv_fd). kv_open creates the
// handle on the calling thread, which owns it from then on; every call with a
// handle asserts (debug builds) that it runs there. Here: argument checks and
// messages. Nothing here throws across the C boundary.
#include "kv/client/kv.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/client/c_handle.hpp"
#include "kv/conn/auth_token.hpp"
#include "kv/client/client.hpp"
#include "kv/client/server_list.hpp"
#include "proto/call_ops.hpp"
#include "proto/placement.hpp"
#include "reactor/reactor.hpp"

namespace {

using rkv::kv::client::CHandle;
using rkv::kv::client::OpKind;
using rkv::kv::client::OpResult;

thread_local std::string t_last_error;

CHandle* handle_of(void* kv_handle) noexcept {
  auto* h = static_cast<CHandle*>(kv_handle);
  if (h != nullptr) h->assert_owner();
  return h;
}

// With no handle: the calling thread's last error.
int set_error(CHandle* h, int code, std::string_view msg) noexcept {
  if (h != nullptr) return h->set_error(code, msg);
  try {
    t_last_error.assign(msg);
  } catch (...) {
  }
  return code;
}

// An exception that reached the boundary: ENOMEM or EIO with its message.
int exception_error(CHandle* h, const char* what) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return set_error(h, ENOMEM, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    try {
      return set_error(h, EIO, std::string(what) + ": " + e.what());
    } catch (...) {
      return set_error(h, EIO, what);
    }
  } catch (...) {
    return set_error(h, EIO, what);
  }
}

// Runs a C call's body; an exception that reaches the C boundary becomes its
// code and message there (exception_error), so no call lets one escape.
template <typename Body>
int guarded(CHandle* h, const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return exception_error(h, what);
  }
}

std::span<const std::byte> bytes_of(const void* p, std::size_t n) noexcept {
  static const std::byte kNone{};
  return {p != nullptr ? static_cast<const std::byte*>(p) : &kNone, p != nullptr ? n : 0};
}

std::string_view key_of(const void* key, std::size_t key_len) noexcept {
  return {static_cast<const char*>(key), key_len};
}

// A decimal count 0..max and nothing else (no sign, no space, no suffix).
bool parse_count(const char* text, unsigned long long max, std::int64_t& out) noexcept {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v > max) return false;
  out = static_cast<std::int64_t>(v);
  return true;
}

// RKV_POLL_US: the spin budget in microseconds, or "busy" (never sleep).
bool parse_poll_budget(const char* text, std::chrono::microseconds& out) noexcept {
  if (std::strcmp(text, "busy") == 0) {
    out = rkv::reactor::kSpinForever;
    return true;
  }
  std::int64_t v = 0;
  if (!parse_count(text, 10'000'000ull, v)) return false;
  out = std::chrono::microseconds(v);
  return true;
}

// RKV_TIMEOUT_MS: the op timeout in milliseconds (0: none), at most a day.
bool parse_timeout_ms(const char* text, std::chrono::milliseconds& out) noexcept {
  std::int64_t v = 0;
  if (!parse_count(text, 86'400'000ull, v)) return false;
  out = std::chrono::milliseconds(v);
  return true;
}

// "<what>: <msg>" as the last error.
int arg_error(CHandle* h, int code, const char* what, const char* msg) noexcept {
  try {
    return set_error(h, code, std::string(what) + ": " + msg);
  } catch (...) {
    return set_error(h, code, msg);
  }
}

// The argument checks every key/value call makes before anything is queued.
// `shard`: the key's (CHandle::shard_for), decided here once for the operation.
int check_args(CHandle* h, const void* key, std::size_t key_len, bool has_value, const void* value,
               std::size_t value_len, const char* what, std::size_t& shard, bool read = false) noexcept {
  if (h == nullptr) return arg_error(nullptr, EINVAL, what, "handle is NULL");
  if (key == nullptr) return arg_error(h, EINVAL, what, "key is NULL");
  if (has_value && value == nullptr && value_len != 0) return arg_error(h, EINVAL, what, "value is NULL");
  shard = h->shard_for(key_of(key, key_len), read);
  return h->check(key_of(key, key_len), shard, value_len, what);
}

// A CALL of kvd's op on `key`'s line (on its shard); its reply bytes go to `parse` (then freed).
template <typename Parse>
int keyed_call(CHandle* h, std::uint16_t op, std::size_t shard, std::string_view key, const std::string& request,
               const char* what, Parse&& parse) {
  OpResult r;
  if (int rc = h->run(OpKind::call, shard, key, rkv::proto::as_bytes(request), r, what, {}, op); rc != 0) return rc;
  const bool ok = parse(std::span<const std::byte>(static_cast<const std::byte*>(r.value), r.value_len));
  rkv::kv::client::release_value(r.value);
  if (!ok) return arg_error(h, EIO, what, "the server's reply is not one of this operation");
  return 0;
}

}  // namespace

extern "C" {

int kv_open(char* servername, void** kv_handle) { return kv_open_opts(servername, nullptr, nullptr, kv_handle); }

int kv_open_opts(char* servername, const char* get_mode, const char* poll_us, void** kv_handle) {
  if (kv_handle == nullptr) return set_error(nullptr, EINVAL, "kv_open: kv_handle is NULL");
  if (servername == nullptr) return set_error(nullptr, EINVAL, "kv_open: servername is NULL");
  try {
    // One server, several separated by commas (placement: docs/protocol.md "Several servers"), or a
    // cluster's members (etcd://HOST:PORT/NAME, docs/cluster.md).
    std::vector<rkv::proto::ServerAddr> servers;
    std::optional<rkv::cluster::ClusterView> cluster;  // a cluster's handle follows its members
    std::string why;
    if (const int rc = rkv::kv::client::resolve_servers(servername, KV_DEFAULT_PORT, servers, why, &cluster)) {
      return set_error(nullptr, rc, std::string("kv_open: server name '") + servername + "': " + why);
    }
    rkv::kv::client::ClientOptions opt;
    // An option given here, else its environment variable.
    const bool own_mode = get_mode != nullptr && *get_mode != '\0';
    const char* mode = own_mode ? get_mode : std::getenv("RKV_GET_MODE");
    if (mode != nullptr && *mode != '\0') {
      if (!rkv::kv::client::parse_get_mode(mode, opt.get_mode)) {
        return set_error(nullptr, EINVAL, std::string(own_mode ? "kv_open: get_mode '" : "kv_open: RKV_GET_MODE='") +
                                              mode + "' is not valid (expected rpc or read)");
      }
    }
    const bool own_poll = poll_us != nullptr && *poll_us != '\0';
    const char* poll = own_poll ? poll_us : std::getenv("RKV_POLL_US");
    if (poll != nullptr && *poll != '\0') {
      if (!parse_poll_budget(poll, opt.poll)) {
        return set_error(nullptr, EINVAL, std::string(own_poll ? "kv_open: poll_us '" : "kv_open: RKV_POLL_US='") +
                                              poll + "' is not valid (expected microseconds 0..10000000, or 'busy')");
      }
    }
    if (const char* t = std::getenv("RKV_TIMEOUT_MS"); t != nullptr && *t != '\0' && !parse_timeout_ms(t, opt.op_timeout)) {
      return set_error(nullptr, EINVAL, std::string("kv_open: RKV_TIMEOUT_MS='") + t +
                                            "' is not valid (expected milliseconds 0..86400000)");
    }
    if (const char* file = std::getenv("RKV_AUTH_TOKEN_FILE"); file != nullptr && *file != '\0') {
      try {
        opt.auth_token = rkv::kv::conn::read_auth_token_file(file).token;
      } catch (const rkv::kv::conn::AuthTokenError& e) {
        return set_error(nullptr, EINVAL, std::string("kv_open: RKV_AUTH_TOKEN_FILE: ") + e.what());
      }
    }
    bool read_from_backups = false;
    if (const char* r = std::getenv("RKV_READ_FROM"); r != nullptr && *r != '\0') {
      const std::string_view v(r);
      if (v != "primary" && v != "backups") {
        return set_error(nullptr, EINVAL, std::string("kv_open: RKV_READ_FROM='") + r +
                                              "' is not valid (expected primary or backups)");
      }
      read_from_backups = v == "backups";
    }
    *kv_handle = CHandle::open(std::move(servers), opt, std::move(cluster), read_from_backups).release();
    t_last_error.clear();
    return 0;
  } catch (const rkv::kv::client::ConnectError& e) {
    return set_error(nullptr, e.code() > 0 ? e.code() : EIO, e.what());
  } catch (...) {
    return exception_error(nullptr, "kv_open");
  }
}

int kv_set(void* kv_handle, const char* key, const char* value) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && value == nullptr) return arg_error(h, EINVAL, "kv_set", "value is NULL");
  const std::size_t value_len = value != nullptr ? std::strlen(value) : 0;
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key != nullptr ? std::strlen(key) : 0, true, value, value_len, "kv_set", shard);
      rc != 0) {
    return rc;
  }
  return guarded(h, "kv_set", [&] {
    OpResult r;
    return h->run(OpKind::set, shard, key, bytes_of(value, value_len), r, "kv_set");
  });
}

int kv_get(void* kv_handle, const char* key, char** value) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && value == nullptr) return arg_error(h, EINVAL, "kv_get", "value pointer is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key != nullptr ? std::strlen(key) : 0, false, nullptr, 0, "kv_get", shard, true);
      rc != 0) {
    return rc;
  }
  return guarded(h, "kv_get", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::get, shard, key, {}, r, "kv_get"); rc != 0) return rc;
    if (r.value == nullptr) {  // a missing key: ""
      r.value = rkv::kv::client::copy_value({});
      if (r.value == nullptr) return arg_error(h, ENOMEM, "kv_get", "out of memory");
    }
    *value = static_cast<char*>(r.value);
    return 0;
  });
}

int kv_set_bin(void* kv_handle, const void* key, size_t key_len, const void* value, size_t value_len) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, true, value, value_len, "kv_set_bin", shard); rc != 0) return rc;
  return guarded(h, "kv_set_bin", [&] {
    OpResult r;
    return h->run(OpKind::set, shard, key_of(key, key_len), bytes_of(value, value_len), r, "kv_set_bin");
  });
}

int kv_get_bin(void* kv_handle, const void* key, size_t key_len, void** value, size_t* value_len) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && (value == nullptr || value_len == nullptr)) {
    return arg_error(h, EINVAL, "kv_get_bin", value == nullptr ? "value pointer is NULL" : "value_len pointer is NULL");
  }
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_get_bin", shard, true); rc != 0) return rc;
  return guarded(h, "kv_get_bin", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::get, shard, key_of(key, key_len), {}, r, "kv_get_bin"); rc != 0) return rc;
    if (!r.found) return arg_error(h, ENOENT, "kv_get_bin", "no such key");
    *value = r.value;
    *value_len = r.value_len;
    return 0;
  });
}

int kv_del(void* kv_handle, const void* key, size_t key_len) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_del", shard); rc != 0) return rc;
  return guarded(h, "kv_del", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::del, shard, key_of(key, key_len), {}, r, "kv_del"); rc != 0) return rc;
    if (!r.found) return arg_error(h, ENOENT, "kv_del", "no such key");
    return 0;
  });
}

namespace {
// A TTL argument over the largest the protocol takes: EINVAL, said here.
int check_ttl(CHandle* h, std::uint64_t ttl_ms, const char* what) noexcept {
  if (ttl_ms <= rkv::proto::kMaxTtlMs) return 0;
  return arg_error(h, EINVAL, what, "ttl_ms is over the largest time to live (about 100 years)");
}
}  // namespace

int kv_set_ttl(void* kv_handle, const void* key, size_t key_len, const void* value, size_t value_len,
               uint64_t ttl_ms) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, true, value, value_len, "kv_set_ttl", shard); rc != 0) return rc;
  if (int rc = check_ttl(h, ttl_ms, "kv_set_ttl"); rc != 0) return rc;
  return guarded(h, "kv_set_ttl", [&] {
    OpResult r;
    return h->run(OpKind::set, shard, key_of(key, key_len), bytes_of(value, value_len), r, "kv_set_ttl", {}, 0,
                  ttl_ms);
  });
}

int kv_expire(void* kv_handle, const void* key, size_t key_len, uint64_t ttl_ms) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_expire", shard); rc != 0) return rc;
  if (int rc = check_ttl(h, ttl_ms, "kv_expire"); rc != 0) return rc;
  return guarded(h, "kv_expire", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::expire, shard, key_of(key, key_len), {}, r, "kv_expire", {}, 0, ttl_ms); rc != 0) {
      return rc;
    }
    if (!r.found) return arg_error(h, ENOENT, "kv_expire", "no such key");
    return 0;
  });
}

int kv_ttl(void* kv_handle, const void* key, size_t key_len, int64_t* ttl_ms) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && ttl_ms == nullptr) return arg_error(h, EINVAL, "kv_ttl", "ttl_ms pointer is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_ttl", shard); rc != 0) return rc;
  return guarded(h, "kv_ttl", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::ttl, shard, key_of(key, key_len), {}, r, "kv_ttl"); rc != 0) return rc;
    if (!r.found) return arg_error(h, ENOENT, "kv_ttl", "no such key");
    *ttl_ms = r.ttl_ms;
    return 0;
  });
}

int kv_get_into(void* kv_handle, const void* key, size_t key_len, void* buf, size_t buf_len, size_t* value_len) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && value_len == nullptr) return arg_error(h, EINVAL, "kv_get_into", "value_len pointer is NULL");
  if (h != nullptr && buf == nullptr && buf_len != 0) return arg_error(h, EINVAL, "kv_get_into", "buf is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_get_into", shard, true); rc != 0) return rc;
  return guarded(h, "kv_get_into", [&] {
    OpResult r;
    const std::span<std::byte> into(static_cast<std::byte*>(buf), buf != nullptr ? buf_len : 0);
    if (int rc = h->run(OpKind::get_into, shard, key_of(key, key_len), {}, r, "kv_get_into", into); rc != 0) {
      if (rc == E2BIG) {
        return arg_error(h, E2BIG, "kv_get_into",
                         ("the value is longer than the buffer of " + std::to_string(buf_len) + " bytes").c_str());
      }
      return rc;
    }
    if (!r.found) return arg_error(h, ENOENT, "kv_get_into", "no such key");
    *value_len = r.value_len;
    return 0;
  });
}

int kv_stats(void* kv_handle, char** text) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_stats: handle is NULL");
  if (text == nullptr) return arg_error(h, EINVAL, "kv_stats", "text pointer is NULL");
  return guarded(h, "kv_stats", [&] {
    std::string out;
    if (int rc = h->stats(out, "kv_stats"); rc != 0) return rc;
    void* v = rkv::kv::client::copy_value(std::as_bytes(std::span<const char>(out.data(), out.size())));
    if (v == nullptr) return arg_error(h, ENOMEM, "kv_stats", "out of memory");
    *text = static_cast<char*>(v);
    return 0;
  });
}

int kv_counters(void* kv_handle, char** text) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_counters: handle is NULL");
  if (text == nullptr) return arg_error(h, EINVAL, "kv_counters", "text pointer is NULL");
  return guarded(h, "kv_counters", [&] {
    const std::string out = h->counters_text();
    void* v = rkv::kv::client::copy_value(std::as_bytes(std::span<const char>(out.data(), out.size())));
    if (v == nullptr) return arg_error(h, ENOMEM, "kv_counters", "out of memory");
    *text = static_cast<char*>(v);
    return 0;
  });
}

int kv_call(void* kv_handle, uint16_t op, const void* req, size_t req_len, void** reply, size_t* reply_len) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return arg_error(nullptr, EINVAL, "kv_call", "handle is NULL");
  if (reply == nullptr || reply_len == nullptr) {
    return arg_error(h, EINVAL, "kv_call", reply == nullptr ? "reply pointer is NULL" : "reply_len pointer is NULL");
  }
  if (req == nullptr && req_len != 0) return arg_error(h, EINVAL, "kv_call", "req is NULL");
  if (h->sharded()) {
    return arg_error(h, EINVAL, "kv_call",
                     "a handle on several servers has no server for a CALL without a key (a handler may touch any "
                     "key); use kv_incr/kv_cas, or a handle on the one server the handler should run on");
  }
  // The line of kv_calls is the empty key (c_handle.hpp); the check is the value limit's.
  const std::size_t shard = h->shard_for({});
  if (int rc = h->check(" ", shard, req_len, "kv_call"); rc != 0) return rc;
  return guarded(h, "kv_call", [&] {
    OpResult r;
    if (int rc = h->run(OpKind::call, shard, {}, bytes_of(req, req_len), r, "kv_call", {}, op); rc != 0) return rc;
    *reply = r.value;
    *reply_len = r.value_len;
    return 0;
  });
}


int kv_incr(void* kv_handle, const void* key, size_t key_len, int64_t delta, int64_t* result) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && result == nullptr) return arg_error(h, EINVAL, "kv_incr", "result pointer is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_incr", shard); rc != 0) return rc;
  return guarded(h, "kv_incr", [&] {
    const std::string request = rkv::proto::ops::incr_request(key_of(key, key_len), delta);
    return keyed_call(h, rkv::proto::ops::kIncr, shard, key_of(key, key_len), request, "kv_incr",
                      [result](std::span<const std::byte> b) {
                        const auto v = rkv::proto::ops::parse_incr_reply(b);
                        if (v) *result = *v;
                        return v.has_value();
                      });
  });
}

int kv_cas(void* kv_handle, const void* key, size_t key_len, const void* expected, size_t expected_len,
           const void* value, size_t value_len, int* swapped) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && swapped == nullptr) return arg_error(h, EINVAL, "kv_cas", "swapped pointer is NULL");
  if (h != nullptr && expected == nullptr && expected_len != 0) return arg_error(h, EINVAL, "kv_cas", "expected is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, true, value, value_len, "kv_cas", shard); rc != 0) return rc;
  return guarded(h, "kv_cas", [&] {
    const auto as_text = [](const void* p, std::size_t n) {
      return std::string_view(p != nullptr ? static_cast<const char*>(p) : "", p != nullptr ? n : 0);
    };
    const std::string request =
        rkv::proto::ops::cas_request(key_of(key, key_len), as_text(expected, expected_len), as_text(value, value_len));
    if (int rc = h->check(key_of(key, key_len), shard, request.size(), "kv_cas"); rc != 0) return rc;
    return keyed_call(h, rkv::proto::ops::kCas, shard, key_of(key, key_len), request, "kv_cas",
                      [swapped](std::span<const std::byte> b) {
                        const auto v = rkv::proto::ops::parse_cas_reply(b);
                        if (v) *swapped = *v ? 1 : 0;
                        return v.has_value();
                      });
  });
}

int kv_set_async(void* kv_handle, const void* key, size_t key_len, const void* value, size_t value_len,
                 uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, true, value, value_len, "kv_set_async", shard); rc != 0) return rc;
  return guarded(h, "kv_set_async", [&] {
    return h->submit(OpKind::set, shard, key_of(key, key_len), bytes_of(value, value_len), tag, "kv_set_async");
  });
}

int kv_set_ttl_async(void* kv_handle, const void* key, size_t key_len, const void* value, size_t value_len,
                     uint64_t ttl_ms, uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, true, value, value_len, "kv_set_ttl_async", shard); rc != 0) return rc;
  if (int rc = check_ttl(h, ttl_ms, "kv_set_ttl_async"); rc != 0) return rc;
  return guarded(h, "kv_set_ttl_async", [&] {
    return h->submit(OpKind::set, shard, key_of(key, key_len), bytes_of(value, value_len), tag, "kv_set_ttl_async",
                     {}, 0, ttl_ms);
  });
}

int kv_get_async(void* kv_handle, const void* key, size_t key_len, uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_get_async", shard, true); rc != 0) return rc;
  return guarded(h, "kv_get_async", [&] {
    return h->submit(OpKind::get, shard, key_of(key, key_len), {}, tag, "kv_get_async");
  });
}

int kv_del_async(void* kv_handle, const void* key, size_t key_len, uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_del_async", shard); rc != 0) return rc;
  return guarded(h, "kv_del_async", [&] {
    return h->submit(OpKind::del, shard, key_of(key, key_len), {}, tag, "kv_del_async");
  });
}

int kv_get_into_async(void* kv_handle, const void* key, size_t key_len, void* buf, size_t buf_len, uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  if (h != nullptr && buf == nullptr && buf_len != 0) return arg_error(h, EINVAL, "kv_get_into_async", "buf is NULL");
  std::size_t shard = 0;
  if (int rc = check_args(h, key, key_len, false, nullptr, 0, "kv_get_into_async", shard, true); rc != 0) return rc;
  return guarded(h, "kv_get_into_async", [&] {
    const std::span<std::byte> into(static_cast<std::byte*>(buf), buf != nullptr ? buf_len : 0);
    return h->submit(OpKind::get_into, shard, key_of(key, key_len), {}, tag, "kv_get_into_async", into);
  });
}

int kv_call_async(void* kv_handle, uint16_t op, const void* req, size_t req_len, uint64_t tag) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return arg_error(nullptr, EINVAL, "kv_call_async", "handle is NULL");
  if (req == nullptr && req_len != 0) return arg_error(h, EINVAL, "kv_call_async", "req is NULL");
  if (h->sharded()) {
    return arg_error(h, EINVAL, "kv_call_async",
                     "a handle on several servers has no server for a CALL without a key (a handler may touch any "
                     "key); use a handle on the one server the handler should run on");
  }
  const std::size_t shard = h->shard_for({});  // the value limit's check, as kv_call
  if (int rc = h->check(" ", shard, req_len, "kv_call_async"); rc != 0) return rc;
  return guarded(h, "kv_call_async", [&] {
    return h->submit(OpKind::call, shard, {}, bytes_of(req, req_len), tag, "kv_call_async", {}, op);
  });
}

int kv_poll(void* kv_handle, kv_completion* out, int max, int timeout_ms) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return -set_error(nullptr, EINVAL, "kv_poll: handle is NULL");
  if (max < 0) return -arg_error(h, EINVAL, "kv_poll", "max is negative");
  if (out == nullptr && max > 0) return -arg_error(h, EINVAL, "kv_poll", "out is NULL");
  if (timeout_ms < -1) return -arg_error(h, EINVAL, "kv_poll", "timeout_ms is below -1");
  try {
    return h->poll(out, max, timeout_ms);
  } catch (...) {
    return -exception_error(h, "kv_poll");
  }
}

int kv_fd(void* kv_handle) {
  const CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return -set_error(nullptr, EINVAL, "kv_fd: handle is NULL");
  return h->fd();
}

// Any thread: the value is no longer tied to its handle.
void kv_release(char* value) { rkv::kv::client::release_value(value); }

int kv_close(void* kv_handle) {
  CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_close: handle is NULL");
  delete h;  // closes (never throws)
  return 0;
}

const char* kv_strerror(int code) {
  const rkv::kv::client::ErrnoInfo* row = rkv::kv::client::errno_info(code);
  return row != nullptr ? row->message.data() : "unknown error";  // the table's literals end with a NUL
}

const char* kv_last_error(void* kv_handle) {
  const CHandle* h = handle_of(kv_handle);
  if (h == nullptr) return t_last_error.c_str();
  return h->last_error().c_str();
}

}  // extern "C"
