#pragma once
// THE client error vocabulary, written once (the way counters.hpp holds the
// server's counters): what a client operation can end with (Status, the C++
// interface) and every errno-style code the C API returns (kv.h), with the
// text kv_strerror gives it and the Python exception class rkv raises for it.
//
//   kStatusTable  one row per Status: its name (to_string) and its errno
//                 (to_errno: what kv.h and so Python report)
//   kErrnoTable   one row per code kv.h documents: name, kv_strerror text,
//                 Python class (the extension's errno -> class map)
//   kWireStatusTable  the Status of each reply status on the wire (from_wire)
//
// Every mapping is derived from these rows; the static_asserts refuse a
// Status without its row, rows out of order, a code twice, or a Status whose
// errno has no row. Each failure of the connection has its own code
// (ECONNRESET: it failed while the request was pending; ENOTCONN: it was
// already closed or failed), distinct from a server's failure (EIO), so no
// interface tells them apart by a message's text. tests/unit/test_errors.cpp
// walks every row through the C++ and C mappings, tests/python every row
// through Python's.
//
// Header-only and light (no verbs): the Python extension includes it too.

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/wire.hpp"

namespace rkv::kv::client {

// Outcome of one client operation.
enum class Status : std::uint8_t {
  ok,
  bad_key,            // key empty or longer than proto::kMaxKey (refused at submit)
  too_large,          // key + value does not fit (refused at submit) or the server said so
  bad_request,        // the server refused the request
  no_memory,          // the server's store is full
  server_error,       // the server failed (internal error, remote access)
  io_error,           // SET/DEL/CALL: the server could not make it durable (disk error); not applied for sure
  no_handler,         // CALL: the server has no handler for this opcode
  handler_failed,     // CALL: the handler threw (logged by the server)
  refused,            // CALL: the handler refused the request (e.g. INCR of a value that is not an integer)
  not_connected,      // submitted while the connection is not usable
  connection_failed,  // the connection failed while the request was pending
  closed,             // the connection was closed locally while it was pending
  timeout,            // a sync helper gave up waiting (the connection is failed)
  invalid_use,        // API misuse, e.g. a sync helper called from a reactor callback
  shard_down,         // several servers (ShardSet): the key's server is down (reconnecting in the background)
  not_owner,          // a cluster's server: the key's shard is not its to answer for now (a newer map moved it, or
                      // the server's lease lapsed: docs/cluster.md "Fencing"); nothing was done, placing it again may work
  moved,              // a cluster's server: the write was applied there but its shard moved to another primary before
                      // every backup had it; not acknowledged, it may or may not last (placing it again may work
                      // if doing it twice is harmless)
};

// The Python exception classes of the rkv package (python/src/rkv_ext.cpp
// creates one per value; `none` is success).
enum class PyError : std::uint8_t {
  none,
  base,            // rkv.Error
  connection,      // rkv.ConnectionError
  too_large,       // rkv.TooLargeError (also ValueError)
  invalid,         // rkv.InvalidArgument (also ValueError)
  server,          // rkv.ServerError
  no_memory,       // rkv.OutOfMemory (also MemoryError)
  no_handler,      // rkv.NoHandlerError
  handler_failed,  // rkv.HandlerFailedError (a ServerError)
  refused,         // rkv.RefusedError (also ValueError)
};

struct StatusInfo {
  Status status;
  std::string_view name;
  int err;  // the C API's code for it
};

inline constexpr std::array kStatusTable{
    StatusInfo{Status::ok, "ok", 0},
    StatusInfo{Status::bad_key, "bad_key", EINVAL},
    StatusInfo{Status::too_large, "too_large", E2BIG},
    StatusInfo{Status::bad_request, "bad_request", EINVAL},
    StatusInfo{Status::no_memory, "no_memory", ENOMEM},
    StatusInfo{Status::server_error, "server_error", EIO},
    StatusInfo{Status::io_error, "io_error", EIO},
    StatusInfo{Status::no_handler, "no_handler", EOPNOTSUPP},
    StatusInfo{Status::handler_failed, "handler_failed", EREMOTEIO},
    StatusInfo{Status::refused, "refused", EDOM},
    StatusInfo{Status::not_connected, "not_connected", ENOTCONN},
    StatusInfo{Status::connection_failed, "connection_failed", ECONNRESET},
    StatusInfo{Status::closed, "closed", ENOTCONN},
    StatusInfo{Status::timeout, "timeout", ETIMEDOUT},
    StatusInfo{Status::invalid_use, "invalid_use", EINVAL},
    StatusInfo{Status::shard_down, "shard_down", EHOSTDOWN},
    StatusInfo{Status::not_owner, "not_owner", ESTALE},
    StatusInfo{Status::moved, "moved", EIO},
};

struct ErrnoInfo {
  int err;
  std::string_view name;     // "EIO"
  std::string_view message;  // kv_strerror
  PyError py;
};

// Every code kv.h documents, in its order.
inline constexpr std::array kErrnoTable{
    ErrnoInfo{0, "0", "success", PyError::none},
    ErrnoInfo{EINVAL, "EINVAL", "invalid argument", PyError::invalid},
    ErrnoInfo{E2BIG, "E2BIG", "key or value too large", PyError::too_large},
    ErrnoInfo{ECONNREFUSED, "ECONNREFUSED", "connection refused", PyError::connection},
    ErrnoInfo{ETIMEDOUT, "ETIMEDOUT", "timed out", PyError::connection},
    ErrnoInfo{EHOSTUNREACH, "EHOSTUNREACH", "server unreachable", PyError::connection},
    ErrnoInfo{ENETUNREACH, "ENETUNREACH", "no route to the server", PyError::connection},
    ErrnoInfo{ENOTCONN, "ENOTCONN", "not connected (the connection was closed or had failed)", PyError::connection},
    ErrnoInfo{ECONNRESET, "ECONNRESET", "the connection failed during the request", PyError::connection},
    ErrnoInfo{EPROTO, "EPROTO", "protocol error", PyError::connection},
    ErrnoInfo{ENODEV, "ENODEV", "no RDMA device", PyError::connection},
    ErrnoInfo{EIO, "EIO", "the server failed the request (internal, remote access or disk error, or its shard moved before the write was replicated)", PyError::server},
    ErrnoInfo{ENOMEM, "ENOMEM", "out of memory", PyError::no_memory},
    ErrnoInfo{ENOENT, "ENOENT", "no such key", PyError::base},
    ErrnoInfo{EAGAIN, "EAGAIN", "pipeline full", PyError::base},
    ErrnoInfo{EACCES, "EACCES", "authentication token missing or refused", PyError::connection},
    ErrnoInfo{EHOSTDOWN, "EHOSTDOWN", "the key's server is down (reconnecting)", PyError::connection},
    ErrnoInfo{EOPNOTSUPP, "EOPNOTSUPP", "the server has no handler for the operation", PyError::no_handler},
    ErrnoInfo{EREMOTEIO, "EREMOTEIO", "the server's handler failed", PyError::handler_failed},
    ErrnoInfo{EDOM, "EDOM", "the handler refused the request", PyError::refused},
    ErrnoInfo{ESTALE, "ESTALE", "the key's shard is not that server's now (the map moved it, or its lease lapsed)",
              PyError::connection},
};

// A reply's wire status (proto::Status, what the server sent) as a Status.
struct WireStatusInfo {
  proto::Status wire;
  Status status;
};
inline constexpr std::array kWireStatusTable{
    WireStatusInfo{proto::Status::ok, Status::ok},
    WireStatusInfo{proto::Status::too_large, Status::too_large},
    WireStatusInfo{proto::Status::bad_request, Status::bad_request},
    WireStatusInfo{proto::Status::no_memory, Status::no_memory},
    WireStatusInfo{proto::Status::internal, Status::server_error},
    WireStatusInfo{proto::Status::remote_access, Status::server_error},
    WireStatusInfo{proto::Status::io_error, Status::io_error},
    WireStatusInfo{proto::Status::no_handler, Status::no_handler},
    WireStatusInfo{proto::Status::handler_failed, Status::handler_failed},
    WireStatusInfo{proto::Status::refused, Status::refused},
    WireStatusInfo{proto::Status::not_owner, Status::not_owner},
    WireStatusInfo{proto::Status::moved, Status::moved},
};
// Client status for a reply's wire status (one the validator let through;
// server_error for any other).
[[nodiscard]] constexpr Status from_wire(proto::Status s) noexcept {
  for (const auto& row : kWireStatusTable) {
    if (row.wire == s) return row.status;
  }
  return Status::server_error;
}

// The index of an errno's row; kErrnoTable.size() for a code kv.h does not return.
[[nodiscard]] constexpr std::size_t errno_row(int err) noexcept {
  std::size_t i = 0;
  while (i < kErrnoTable.size() && kErrnoTable[i].err != err) ++i;
  return i;
}
// The row of an errno; nullptr for a code kv.h does not return.
[[nodiscard]] constexpr const ErrnoInfo* errno_info(int err) noexcept {
  const std::size_t i = errno_row(err);
  return i < kErrnoTable.size() ? &kErrnoTable[i] : nullptr;
}

[[nodiscard]] constexpr const StatusInfo& status_info(Status s) noexcept {
  return kStatusTable[static_cast<std::size_t>(s)];
}
[[nodiscard]] constexpr std::string_view to_string(Status s) noexcept { return status_info(s).name; }
// The C API's errno for a Status (0 for ok).
[[nodiscard]] constexpr int to_errno(Status s) noexcept { return status_info(s).err; }

namespace detail {
consteval bool statuses_in_order() {
  for (std::size_t i = 0; i < kStatusTable.size(); ++i) {
    if (static_cast<std::size_t>(kStatusTable[i].status) != i) return false;
  }
  return true;
}
consteval bool every_status_errno_has_a_row() {
  for (const auto& s : kStatusTable) {
    if (errno_row(s.err) == kErrnoTable.size()) return false;
  }
  return true;
}
consteval bool every_wire_status_once() {
  for (std::size_t i = 0; i < kWireStatusTable.size(); ++i) {
    if (!proto::status_from_wire(static_cast<std::uint16_t>(kWireStatusTable[i].wire))) return false;
    for (std::size_t j = i + 1; j < kWireStatusTable.size(); ++j) {
      if (kWireStatusTable[i].wire == kWireStatusTable[j].wire) return false;
    }
  }
  return true;
}
consteval bool every_errno_once() {
  for (std::size_t i = 0; i < kErrnoTable.size(); ++i) {
    for (std::size_t j = i + 1; j < kErrnoTable.size(); ++j) {
      if (kErrnoTable[i].err == kErrnoTable[j].err) return false;
    }
  }
  return true;
}
}  // namespace detail
static_assert(kStatusTable.size() == static_cast<std::size_t>(Status::moved) + 1,
              "every Status needs its row in kStatusTable");
static_assert(detail::statuses_in_order(), "kStatusTable's rows must follow the Status enum's order");
static_assert(detail::every_status_errno_has_a_row(), "a Status maps to an errno kErrnoTable lacks");
static_assert(detail::every_errno_once(), "an errno is in kErrnoTable twice");
static_assert(detail::every_wire_status_once() &&
                  kWireStatusTable.size() == static_cast<std::size_t>(proto::Status::moved) + 1,
              "every wire status (proto::Status) needs exactly one row in kWireStatusTable");

}  // namespace rkv::kv::client
