#pragma once
// Decoding: walk the messages packed in one received buffer. Views point into
// the buffer (no copies, no allocation). The first malformed message stops the
// walk for good: everything after it is untrusted.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "proto/validate.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

// One decoded message; its views borrow the decoder's buffer.
struct MessageView {
  Header header;
  std::string_view key;              // empty unless SET/GET/DEL
  std::span<const std::byte> value;  // eager value bytes; empty with RDV
  std::optional<RdvDesc> rdv;        // set iff RDV; its length is header.value_len
  std::optional<GrantDesc> grant;    // set iff GRANT; its capacity is header.value_len
  std::uint64_t ttl = 0;             // the TTL field, iff header.has_ttl() (ms; TTL_REPLY: kNoTtl = none)
  std::uint64_t epoch = 0;           // the shard epoch, iff header.has_epoch() (a replication record; never 0)
  std::size_t offset = 0;            // where the message starts in the buffer
  std::size_t size = 0;              // bytes it occupies (header + key + fields + payload)

  [[nodiscard]] Opcode opcode() const noexcept { return header.opcode; }
  [[nodiscard]] bool found() const noexcept { return header.found(); }
  [[nodiscard]] std::string_view value_text() const noexcept { return as_string_view(value); }
};

// The buffer ended exactly at a message boundary.
struct EndOfBuffer {
  friend bool operator==(const EndOfBuffer&, const EndOfBuffer&) = default;
};

struct DecodeError {
  Reason reason = Reason::truncated_header;
  std::size_t offset = 0;  // start of the offending message
  friend bool operator==(const DecodeError&, const DecodeError&) = default;
};

using DecodeResult = std::variant<MessageView, EndOfBuffer, DecodeError>;

class Decoder {
 public:
  explicit Decoder(std::span<const std::byte> buf, const Limits& limits = {}) noexcept
      : buf_(buf), limits_(limits) {}

  // Next message, EndOfBuffer (repeats), or the first DecodeError (repeats).
  [[nodiscard]] DecodeResult next() noexcept;

  [[nodiscard]] std::size_t offset() const noexcept { return pos_; }  // bytes consumed
  [[nodiscard]] bool failed() const noexcept { return error_.has_value(); }
  [[nodiscard]] bool at_end() const noexcept { return !error_ && pos_ == buf_.size(); }

 private:
  DecodeResult fail(Reason r) noexcept;
  DecodeResult decode_body(const RawHeader& raw) noexcept;

  std::span<const std::byte> buf_;
  Limits limits_;
  std::size_t pos_ = 0;
  std::optional<DecodeError> error_;
};

// The message at `offset` of `buf`, read without checking it again: for a
// receiver's second walk over a buffer it has already validated (ServerConn
// validates a whole SEND before executing any of it, then executes it).
// Precondition: a Decoder over these same bytes returned a MessageView at
// `offset` (any limits), and the bytes have not changed since. Equal to that
// view, field by field (tests/unit/test_proto_fuzz.cpp checks it on every message
// the fuzz tests decode).
[[nodiscard]] MessageView view_validated(std::span<const std::byte> buf, std::size_t offset) noexcept;

}  // namespace rkv::proto
