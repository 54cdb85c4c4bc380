#pragma once
// kvload's workload file format, its parser and a generator.
//
// One operation per line:
//   SET <key> <value>          value = the rest of the line after exactly one
//                              blank (space or tab), verbatim: it may hold
//                              spaces, '#', and trailing blanks. `SET k ` (one
//                              separator, nothing after) sets an empty value;
//                              `SET k` (no separator) is a "missing value" error.
//   SET <key> @<size>[:<seed>] a generated value of <size> bytes (decimal, with
//                              an optional suffix k/K = 1024 or m/M = 1024*1024:
//                              @4096, @64k, @1m), bytes = fill_value(seed),
//                              seed decimal, default 0. Blanks after it are
//                              ignored.
//   SET <key> @@<text>         literal value "@<text>" (the first '@' escapes).
//   SET <key> <value> PX <ms>  any of the SETs above with a time to live: the
//                              key expires <ms> milliseconds (1 .. about 100
//                              years) after the server stores it. A literal
//                              value can therefore not end in " PX <digits>"
//                              (PX in any case): that ending is the TTL.
//   EXPIRE <key> <ms>          the key expires <ms> from now; 0: it persists.
//   TTL <key>                  asks for the key's remaining time to live.
//   GET <key>                  trailing blanks allowed, anything else an error.
//   DEL <key>                  delete the key; trailing blanks allowed, anything
//                              else an error.
//   CALL <op> <payload>        a user-defined operation (docs/protocol.md
//                              "CALL"): op = its opcode, decimal or 0x hex,
//                              0..65535; payload = the request bytes, the rest
//                              of the line after exactly one blank, with
//                              \xHH = one byte and \\ = a backslash (any other
//                              backslash is an error), or @<size>[:<seed>] /
//                              @@<text> as a SET value. `CALL <op>` alone: an
//                              empty request.
// - Opcodes are case-insensitive (SET, set, Set): interactive users type lowercase.
// - Leading blanks are skipped; opcode and key are separated by one or more
//   blanks (space, tab, \v, \f). Keys are 1..1024 bytes without blanks.
// - Blank lines and lines whose first non-blank character is '#' are ignored.
//   A '#' later in a line is not a comment (it is part of a value).
// - One trailing '\r' is stripped from every line (CRLF files).
// - A value (literal or generated) may be at most ParseLimits::max_value bytes.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rkv::kv::load {

inline constexpr std::size_t kMaxKeyLen = 1024;
inline constexpr std::uint64_t kDefaultMaxValue = std::uint64_t{256} << 20;

// A value described by (size, seed) instead of spelled out: `@size:seed`.
struct GeneratedValue {
  std::uint64_t size = 0;
  std::uint64_t seed = 0;
  friend bool operator==(const GeneratedValue&, const GeneratedValue&) = default;
};

// Literal bytes, or a generated value.
using ValueSpec = std::variant<std::string, GeneratedValue>;

[[nodiscard]] std::uint64_t value_size(const ValueSpec& v) noexcept;
// Writes the value's bytes. Precondition: out.size() == value_size(v).
void write_value(const ValueSpec& v, std::span<std::byte> out) noexcept;
// True iff `bytes` is exactly the value `v` describes (for --verify).
[[nodiscard]] bool matches(const ValueSpec& v, std::span<const std::byte> bytes) noexcept;

struct Op {
  enum class Kind { set, get, del, call, expire, ttl };
  Kind kind = Kind::get;
  std::string key;    // empty for CALL
  ValueSpec value;    // SET: the value; CALL: the request bytes; an empty literal for the others
  std::uint16_t call_op = 0;  // CALL: the user opcode
  std::uint64_t ttl_ms = 0;   // SET: its TTL (0: none, PX absent); EXPIRE: the new one (0: persist)
  unsigned line = 0;  // 1-based line in the file; 0 from parse_command
};

[[nodiscard]] std::string_view to_string(Op::Kind k) noexcept;

struct ParseLimits {
  std::size_t max_key = kMaxKeyLen;
  std::uint64_t max_value = kDefaultMaxValue;
  std::size_t max_errors = 20;  // errors kept; later ones are only counted
};

struct ParseError {
  unsigned line = 0;  // 1-based
  std::string message;
  friend bool operator==(const ParseError&, const ParseError&) = default;
};

// Either ops (ok()) or errors, never both: on any error `ops` is empty so
// nothing gets sent from a half-valid file.
struct ParseResult {
  std::vector<Op> ops;
  std::vector<ParseError> errors;   // first max_errors errors, in line order
  std::size_t errors_omitted = 0;   // errors found beyond max_errors
  [[nodiscard]] bool ok() const noexcept { return errors.empty(); }
};

// Reads the whole stream. A stream read failure (badbit) is reported as an
// error on the line after the last one read.
[[nodiscard]] ParseResult parse_workload(std::istream& in, const ParseLimits& limits = {});

// One interactive line (a trailing "\n" or "\r\n" is stripped). Returns the op,
// or nullopt with `error` set; nullopt with `error` empty means the line was
// blank or a comment (nothing to do).
[[nodiscard]] std::optional<Op> parse_command(std::string_view line, std::string& error,
                                              const ParseLimits& limits = {});

// Deterministic value bytes from (seed, out.size()): splitmix64, 8 bytes per
// step, little-endian on every host. Different sizes give unrelated bytes, so
// a truncated value fails check_value.
void fill_value(std::span<std::byte> out, std::uint64_t seed) noexcept;
// True iff `bytes` equals what fill_value(seed) writes for that size.
[[nodiscard]] bool check_value(std::span<const std::byte> bytes, std::uint64_t seed) noexcept;
// 64-bit FNV-1a: compare values byte-exactly without keeping copies.
[[nodiscard]] std::uint64_t checksum(std::span<const std::byte> bytes) noexcept;

// Formats a size the way the parser reads it: 1m, 64k, 4095.
[[nodiscard]] std::string format_size(std::uint64_t size);

struct SizeWeight {
  std::uint64_t size = 0;
  std::uint32_t weight = 1;
};

// Which keys the random operations touch (kvload gen --dist).
struct KeyDist {
  enum class Kind : std::uint8_t {
    uniform,  // every key alike
    zipf,     // YCSB's Zipfian: key i (0 the hottest) with probability ~ 1 / (i + 1)^theta
    latest,   // Zipfian over recency: the most recently SET keys are the hottest (YCSB's "latest")
  };
  Kind kind = Kind::uniform;
  double theta = 0.99;  // zipf, latest: the skew, in (0, 1) (YCSB's default 0.99)
};
// The most keys a skewed distribution takes (its setup is O(keys)).
inline constexpr std::uint64_t kMaxZipfKeys = 100'000'000;
// "uniform", "zipf", "zipf:THETA", "latest" or "latest:THETA"; nullopt with `error` set otherwise.
[[nodiscard]] std::optional<KeyDist> parse_key_dist(std::string_view text, std::string& error);

struct GenOptions {
  std::uint64_t keys = 1000;     // distinct keys: <key_prefix><zero-padded index>
  KeyDist dist;                  // which keys the random operations touch
  std::uint64_t ops = 10000;     // random operations after the preload
  double get_ratio = 0.5;        // probability that a random op is a GET
  std::vector<SizeWeight> sizes = {{64, 1}};  // SET value sizes, by weight
  std::uint64_t seed = 0;
  bool preload = true;           // SET every key once first (extra lines, not in ops)
  std::string key_prefix = "key";
  // Values up to this size are written as literal alphanumeric text, larger
  // ones as @size:seed so lines stay short.
  std::uint64_t literal_max = 64;
  std::uint64_t max_value = kDefaultMaxValue;
};

// Empty if the options are usable, otherwise why not.
[[nodiscard]] std::string check_options(const GenOptions& opt);

// Writes a workload in the format above; the same options give the same bytes
// on every platform (own RNG, no <random> distributions). Starts with a '#'
// comment naming the options. Invalid options (check_options) write nothing
// and set failbit on `out`.
void generate_workload(std::ostream& out, const GenOptions& opt);

}  // namespace rkv::kv::load
