// The C API (kv.h) over kv::client::Client. Each handle owns a Reactor and a Client.
// kv_open creates the Reactor, so the handle is bound to the opening thread
// (the Reactor records it as its owner); every kv_* call on a handle asserts
// (debug builds) that it runs there, and runs the reactor on it. Nothing here
// throws across the C boundary.
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
#include <string>
#include <string_view>

#include "kv/client/client.hpp"
#include "kv/client/landing.hpp"
#include "proto/wire.hpp"
#include "reactor/reactor.hpp"

namespace {

using rkv::kv::client::Client;
using rkv::kv::client::Status;

struct Handle {
  // Declared first: destroyed after the client (its handles need the reactor).
  // Created by kv_open on the opening thread, which owns it (and the handle).
  std::unique_ptr<rkv::reactor::Reactor> reactor;
  std::unique_ptr<Client> client;
  std::string last_error;
};

thread_local std::string t_last_error;

// Debug builds: the caller is the thread that opened the handle.
void assert_owner([[maybe_unused]] const Handle* h) noexcept {
#ifndef NDEBUG
  h->reactor->assert_owner_thread();
#endif
}

int set_error(Handle* h, int code, std::string_view msg) noexcept {
  try {
    (h != nullptr ? h->last_error : t_last_error).assign(msg);
  } catch (...) {
  }
  return code;
}

// "host", "host:port", "[v6]:port" or a bare IPv6 address.
// RKV_POLL_US: the spin budget in microseconds, or "busy" (never sleep).
bool parse_poll_budget(const char* text, std::chrono::microseconds& out) noexcept {
  if (std::strcmp(text, "busy") == 0) {
    out = rkv::reactor::kSpinForever;
    return true;
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || v > 10'000'000ull) return false;
  out = std::chrono::microseconds(static_cast<std::int64_t>(v));
  return true;
}

bool parse_server(std::string_view s, std::string& host, std::uint16_t& port) {
  port = KV_DEFAULT_PORT;
  std::string_view port_text;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) return false;
    host.assign(s.substr(1, close - 1));
    const auto rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port_text = rest.substr(1);
      if (port_text.empty()) return false;
    }
  } else if (s.find(':') != s.rfind(':')) {
    host.assign(s);  // bare IPv6
  } else if (const auto colon = s.find(':'); colon != std::string_view::npos) {
    host.assign(s.substr(0, colon));
    port_text = s.substr(colon + 1);
    if (port_text.empty()) return false;
  } else {
    host.assign(s);
  }
  if (host.empty()) return false;
  if (!port_text.empty()) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), v);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || v == 0 || v > 65535) return false;
    port = static_cast<std::uint16_t>(v);
  }
  return true;
}

int status_error(Handle* h, Status st, const char* what) noexcept {
  try {
    std::string msg = std::string(what) + ": " + std::string(rkv::kv::client::to_string(st));
    if (h->client && !h->client->failure().empty()) msg += " (" + h->client->failure() + ")";
    return set_error(h, rkv::kv::client::to_errno(st), msg);
  } catch (...) {
    return set_error(h, rkv::kv::client::to_errno(st), what);
  }
}

// Key/value limits checked before anything is queued (clear messages).
int check_sizes(Handle* h, const char* key, std::size_t value_len) noexcept {
  const std::size_t klen = std::strlen(key);
  if (klen == 0) return set_error(h, EINVAL, "empty key");
  if (klen > rkv::proto::kMaxKey) return set_error(h, E2BIG, "key longer than 1024 bytes");
  const std::uint64_t max = h->client ? h->client->server_max_value() : 0;
  if (max != 0 && value_len > max) {
    try {
      return set_error(h, E2BIG, "value of " + std::to_string(value_len) + " bytes is over the server's limit of " +
                                     std::to_string(max));
    } catch (...) {
      return set_error(h, E2BIG, "value over the server's limit");
    }
  }
  return 0;
}

// Small values returned by kv_get: malloc'd with the same 64-byte header
// position as a landing buffer, so kv_release can tell the two apart.
struct SmallHeader {
  std::uint64_t magic;
};

char* small_copy(std::string_view v) noexcept {
  auto* base = static_cast<char*>(std::malloc(rkv::kv::client::kValueHeader + v.size() + 1));
  if (base == nullptr) return nullptr;
  const SmallHeader hdr{rkv::kv::client::kMallocMagic};
  std::memcpy(base, &hdr, sizeof hdr);
  char* p = base + rkv::kv::client::kValueHeader;
  std::memcpy(p, v.data(), v.size());  // eager values only: under 4 KiB
  p[v.size()] = '\0';
  return p;
}

}  // namespace

extern "C" {

int kv_open(char* servername, void** kv_handle) {
  if (kv_handle == nullptr) return set_error(nullptr, EINVAL, "kv_open: kv_handle is NULL");
  if (servername == nullptr) return set_error(nullptr, EINVAL, "kv_open: servername is NULL");
  try {
    std::string host;
    std::uint16_t port = 0;
    if (!parse_server(servername, host, port)) {
      return set_error(nullptr, EINVAL, std::string("kv_open: bad server name '") + servername +
                                            "' (expected host or host:port)");
    }
    rkv::kv::client::ClientOptions opt;
    if (const char* mode = std::getenv("RKV_GET_MODE"); mode != nullptr && *mode != '\0') {
      if (!rkv::kv::client::parse_get_mode(mode, opt.get_mode)) {
        return set_error(nullptr, EINVAL, std::string("kv_open: RKV_GET_MODE='") + mode +
                                              "' is not valid (expected rpc or read)");
      }
    }
    if (const char* poll = std::getenv("RKV_POLL_US"); poll != nullptr && *poll != '\0') {
      if (!parse_poll_budget(poll, opt.poll)) {
        return set_error(nullptr, EINVAL, std::string("kv_open: RKV_POLL_US='") + poll +
                                              "' is not valid (expected microseconds 0..10000000, or 'busy')");
      }
    }
    auto h = std::make_unique<Handle>();
    h->reactor = std::make_unique<rkv::reactor::Reactor>();
    h->client = Client::connect(*h->reactor, host, port, opt);
    *kv_handle = h.release();
    t_last_error.clear();
    return 0;
  } catch (const rkv::kv::client::ConnectError& e) {
    return set_error(nullptr, e.code() > 0 ? e.code() : EIO, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(nullptr, ENOMEM, "kv_open: out of memory");
  } catch (const std::exception& e) {
    return set_error(nullptr, EIO, std::string("kv_open: ") + e.what());
  } catch (...) {
    return set_error(nullptr, EIO, "kv_open: unknown error");
  }
}

int kv_set(void* kv_handle, const char* key, const char* value) {
  auto* h = static_cast<Handle*>(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_set: handle is NULL");
  assert_owner(h);
  if (key == nullptr) return set_error(h, EINVAL, "kv_set: key is NULL");
  if (value == nullptr) return set_error(h, EINVAL, "kv_set: value is NULL");
  if (!h->client) return set_error(h, ENOTCONN, "kv_set: handle is closed");
  if (int rc = check_sizes(h, key, std::strlen(value)); rc != 0) return rc;
  try {
    const std::string_view v(value);
    const Status st = h->client->set_sync(key, v);
    // A C caller may free this buffer right after: keep no registration of
    // it (a cached one could outlive the memory, see reg_cache.hpp).
    h->client->forget(std::as_bytes(std::span<const char>(v.data(), v.size())));
    if (st != Status::ok) return status_error(h, st, "kv_set");
    return 0;
  } catch (const std::exception& e) {
    return set_error(h, EIO, std::string("kv_set: ") + e.what());
  } catch (...) {
    return set_error(h, EIO, "kv_set: unknown error");
  }
}

int kv_get(void* kv_handle, const char* key, char** value) {
  auto* h = static_cast<Handle*>(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_get: handle is NULL");
  assert_owner(h);
  if (key == nullptr) return set_error(h, EINVAL, "kv_get: key is NULL");
  if (value == nullptr) return set_error(h, EINVAL, "kv_get: value pointer is NULL");
  if (!h->client) return set_error(h, ENOTCONN, "kv_get: handle is closed");
  if (int rc = check_sizes(h, key, 0); rc != 0) return rc;
  try {
    rkv::kv::client::Value out;
    bool found = false;
    const Status st = h->client->get_sync(key, out, found);
    if (st != Status::ok) return status_error(h, st, "kv_get");
    if (out.is_large()) {  // the registered buffer it landed in, NUL-terminated; no copy
      *value = reinterpret_cast<char*>(out.release_large().release()->data().data());
      return 0;
    }
    char* copy = small_copy(out.view());
    if (copy == nullptr) return set_error(h, ENOMEM, "kv_get: out of memory");
    *value = copy;
    return 0;
  } catch (const std::exception& e) {
    return set_error(h, EIO, std::string("kv_get: ") + e.what());
  } catch (...) {
    return set_error(h, EIO, "kv_get: unknown error");
  }
}

// Any thread: the value is no longer tied to its handle (a large one's
// registration already ended, see ClientConn::adopt_landing).
void kv_release(char* value) {
  if (value == nullptr) return;
  if (auto* lb = rkv::kv::client::LandingBuffer::from_data(value)) {
    delete lb;  // unmaps (its registration ended when kv_get returned it)
    return;
  }
  char* base = value - rkv::kv::client::kValueHeader;
  SmallHeader hdr{};
  std::memcpy(&hdr, base, sizeof hdr);
  if (hdr.magic != rkv::kv::client::kMallocMagic) {
    spdlog::error("kv_release: {} was not returned by kv_get (ignored)", static_cast<void*>(value));
    return;
  }
  hdr.magic = 0;  // a double release is caught, not a double free
  std::memcpy(base, &hdr, sizeof hdr);
  std::free(base);
}

int kv_close(void* kv_handle) {
  auto* h = static_cast<Handle*>(kv_handle);
  if (h == nullptr) return set_error(nullptr, EINVAL, "kv_close: handle is NULL");
  assert_owner(h);
  if (h->client) h->client->close();  // never throws
  delete h;  // client before reactor (member order)
  return 0;
}

const char* kv_strerror(int code) {
  switch (code) {
    case 0: return "success";
    case EINVAL: return "invalid argument";
    case E2BIG: return "key or value too large";
    case ECONNREFUSED: return "connection refused";
    case ETIMEDOUT: return "timed out";
    case EHOSTUNREACH: return "server unreachable";
    case ENETUNREACH: return "no route to the server";
    case ENOTCONN: return "not connected";
    case EIO: return "connection or server error";
    case ENOMEM: return "out of memory";
    case EPROTO: return "protocol error";
    case ENODEV: return "no RDMA device";
    default: return "unknown error";
  }
}

const char* kv_last_error(void* kv_handle) {
  if (kv_handle == nullptr) return t_last_error.c_str();
  const auto* h = static_cast<const Handle*>(kv_handle);
  assert_owner(h);
  return h->last_error.c_str();
}

}  // extern "C"
