#pragma once
// copy_bytes: the one way the data path copies bytes with the CPU, and the
// meter that counts every byte it copies (issue 16, 5c: the zero-copy check
// must not depend on counters bumped by hand next to each copy).
//
// Every memcpy-like call (memcpy, memmove, std::copy, std::ranges::copy, ...)
// in src/kv/{store,conn,server,client}, src/durable and the encoder
// (proto/encode.cpp) is a copy_bytes call; tests/unit/check_layout.py (the
// `layout` unit test) fails on any other, except a copy whose size is a
// sizeof (one fixed-size object: a header, an integer). So copied_bytes()
// is what this process's data path copied, whoever wrote the copy: eager
// values and keys encoded into send buffers, received messages, values put
// into the store's blocks, index entries, log records. A value copied into
// a std::string (the store's values with the index off, the copying
// Client::get_sync) goes through copy_to_string, which counts it too; the
// layout test cannot see a std::string built from a value some other way.
// The rdma test rdv_e2e asserts that large SETs and GETs move the meter by
// far less than their values on both ends (kvd prints it as
// `bytes_copied_total`), and that eager values do move it (it sees copies).
//
// Owns: nothing (the process-wide meter lives in copy.cpp). Thread: any (the
// meter is a relaxed atomic).

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace rkv::proto {

namespace detail {
extern std::atomic<std::uint64_t> copied_bytes;
}  // namespace detail

// Copies `src` to the front of `dst` (dst.size() >= src.size(); they do not
// overlap) and adds src.size() to the meter.
inline void copy_bytes(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
  assert(dst.size() >= src.size());
  if (src.empty()) return;
  std::memcpy(dst.data(), src.data(), src.size());
  detail::copied_bytes.fetch_add(src.size(), std::memory_order_relaxed);
}
inline void copy_bytes(void* dst, const void* src, std::size_t n) noexcept {
  copy_bytes(std::span<std::byte>(static_cast<std::byte*>(dst), n),
             std::span<const std::byte>(static_cast<const std::byte*>(src), n));
}

// The same, also adding src.size() to `account` (if not null): a count that
// comes from the copy itself, never from a second line beside it (a client
// connection's bytes_copied, the value bytes it copies).
inline void copy_bytes(std::span<std::byte> dst, std::span<const std::byte> src, std::uint64_t* account) noexcept {
  copy_bytes(dst, src);
  if (account != nullptr) *account += src.size();
}

// Replaces `out` with a copy of `src` and adds its size to the meter. May
// throw std::bad_alloc (then nothing is counted).
// A value no longer than the one `out` holds is written over it in place
// (a cache's values mostly keep their size): std::string::assign's general
// replace, which sorts out aliasing and growth, cost ~70 instructions per
// 32-byte SET (bench/cpu). memmove first, then the shorter length, so a
// `src` inside `out` is read before anything of it is overwritten.
inline void copy_to_string(std::string& out, std::string_view src) {
  if (src.size() <= out.size()) {
    if (!src.empty()) std::memmove(out.data(), src.data(), src.size());
    out.resize(src.size());
  } else {
    out.assign(src);
  }
  detail::copied_bytes.fetch_add(src.size(), std::memory_order_relaxed);
}
inline void copy_to_string(std::string& out, std::span<const std::byte> src) {
  copy_to_string(out, std::string_view(reinterpret_cast<const char*>(src.data()), src.size()));
}
inline void copy_to_string(std::string& out, std::span<const std::byte> src, std::uint64_t* account) {
  copy_to_string(out, src);
  if (account != nullptr) *account += src.size();
}

// Bytes copied through copy_bytes and copy_to_string by this process since it started.
[[nodiscard]] inline std::uint64_t copied_bytes() noexcept {
  return detail::copied_bytes.load(std::memory_order_relaxed);
}

}  // namespace rkv::proto
