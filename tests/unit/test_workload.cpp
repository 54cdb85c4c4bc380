// Unit tests for the kvload workload format: parser (every error kind, line
// numbers), @size notation, value generation, checksum, generator.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kv/load/workload.hpp"

namespace rkv::kv::load {
namespace {

ParseResult parse(std::string_view text, const ParseLimits& lim = {}) {
  std::istringstream in{std::string(text)};
  return parse_workload(in, lim);
}

// Parses a one-line file that must fail; returns the single error.
ParseError one_error(std::string_view text, const ParseLimits& lim = {}) {
  const ParseResult r = parse(text, lim);
  EXPECT_FALSE(r.ok()) << text;
  EXPECT_TRUE(r.ops.empty());
  EXPECT_EQ(r.errors.size(), 1u) << text;
  return r.errors.empty() ? ParseError{} : r.errors.front();
}

// Parses a one-line file that must succeed with exactly one op.
Op one_op(std::string_view text) {
  const ParseResult r = parse(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.errors.empty() ? "" : r.errors[0].message);
  EXPECT_EQ(r.ops.size(), 1u) << text;
  return r.ops.empty() ? Op{} : r.ops.front();
}

std::string literal(const Op& op) {
  const auto* s = std::get_if<std::string>(&op.value);
  EXPECT_NE(s, nullptr);
  return s ? *s : std::string("<not literal>");
}

GeneratedValue generated(const Op& op) {
  const auto* g = std::get_if<GeneratedValue>(&op.value);
  EXPECT_NE(g, nullptr);
  return g ? *g : GeneratedValue{~0ull, ~0ull};
}

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) v[i] = static_cast<std::byte>(s[i]);
  return v;
}

TEST(WorkloadParse, SetAndGet) {
  const ParseResult r = parse("SET k1 hello world\nGET k1\n");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].kind, Op::Kind::set);
  EXPECT_EQ(r.ops[0].key, "k1");
  EXPECT_EQ(literal(r.ops[0]), "hello world");
  EXPECT_EQ(r.ops[0].line, 1u);
  EXPECT_EQ(r.ops[1].kind, Op::Kind::get);
  EXPECT_EQ(r.ops[1].key, "k1");
  EXPECT_EQ(r.ops[1].line, 2u);
  EXPECT_EQ(to_string(Op::Kind::set), "set");
  EXPECT_EQ(to_string(Op::Kind::get), "get");
}

TEST(WorkloadParse, Del) {
  const ParseResult r = parse("SET k v\nDEL k\n  del\tk2  \t\r\nDel " + std::string(1024, 'x') + "\nGET k\n");
  ASSERT_TRUE(r.ok()) << r.errors.front().message;
  ASSERT_EQ(r.ops.size(), 5u);
  EXPECT_EQ(r.ops[1].kind, Op::Kind::del);
  EXPECT_EQ(r.ops[1].key, "k");
  EXPECT_EQ(r.ops[1].line, 2u);
  EXPECT_EQ(literal(r.ops[1]), "") << "no value";
  EXPECT_EQ(r.ops[2].kind, Op::Kind::del);
  EXPECT_EQ(r.ops[2].key, "k2");
  EXPECT_EQ(r.ops[3].key.size(), 1024u);
  EXPECT_EQ(r.ops[4].kind, Op::Kind::get);
  EXPECT_EQ(to_string(Op::Kind::del), "del");
  EXPECT_EQ(one_error("DEL").message, "DEL: missing key");
  EXPECT_NE(one_error("DEL k v").message.find("DEL: unexpected text after the key: 'v'"), std::string::npos);
  EXPECT_NE(one_error("DEL " + std::string(1025, 'k')).message.find("over the limit of 1024"), std::string::npos);
  const ParseResult bad = parse("SET a 1\nDEL a extra\n");
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(bad.ops.empty()) << "a bad file sends nothing";
  EXPECT_EQ(bad.errors.front().line, 2u);
}

TEST(WorkloadParse, ValueVerbatimBlanksAndCase) {
  EXPECT_EQ(literal(one_op("SET k  two leading")), " two leading");  // 1 separator only
  EXPECT_EQ(literal(one_op("SET k v # not a comment ")), "v # not a comment ");
  EXPECT_EQ(literal(one_op("SET k\tv\tw")), "v\tw");
  EXPECT_EQ(literal(one_op("SET k ")), "");  // empty value
  EXPECT_EQ(literal(one_op("SET k a@b")), "a@b");
  const Op op = one_op("   \tSET   \t key   value");
  EXPECT_EQ(op.key, "key");
  EXPECT_EQ(literal(op), "  value");
  EXPECT_EQ(one_op("GET k  \t").key, "k");  // trailing blanks after a GET key are fine
  // Opcodes are case-insensitive.
  EXPECT_EQ(one_op("set k v").kind, Op::Kind::set);
  EXPECT_EQ(one_op("Get k").kind, Op::Kind::get);
  EXPECT_EQ(one_op("gEt k").kind, Op::Kind::get);
}

TEST(WorkloadParse, TimeToLive) {
  Op op = one_op("SET k hello PX 500");
  EXPECT_EQ(literal(op), "hello");
  EXPECT_EQ(op.ttl_ms, 500u);
  op = one_op("set k two words px 7  ");
  EXPECT_EQ(literal(op), "two words");
  EXPECT_EQ(op.ttl_ms, 7u);
  op = one_op("SET k @4k:3 PX 1000");
  EXPECT_EQ(std::get<GeneratedValue>(op.value), (GeneratedValue{4096, 3}));
  EXPECT_EQ(op.ttl_ms, 1000u);
  // Not a TTL: no blank before PX, no number, no PX at all.
  EXPECT_EQ(literal(one_op("SET k xPX 5")), "xPX 5");
  EXPECT_EQ(literal(one_op("SET k PX")), "PX");
  EXPECT_EQ(one_op("SET k v 5").ttl_ms, 0u);
  EXPECT_EQ(literal(one_op("SET k v 5")), "v 5");
  EXPECT_EQ(one_op("SET k v").ttl_ms, 0u);
  EXPECT_NE(one_error("SET k v PX 0").message.find("SET: PX '0' is not a number of milliseconds"), std::string::npos);
  EXPECT_NE(one_error("SET k v PX 99999999999999999999").message.find("from 1 to"), std::string::npos);

  op = one_op("EXPIRE k 250");
  EXPECT_EQ(op.kind, Op::Kind::expire);
  EXPECT_EQ(op.key, "k");
  EXPECT_EQ(op.ttl_ms, 250u);
  EXPECT_EQ(one_op("expire k 0").ttl_ms, 0u) << "0: persist";
  EXPECT_NE(one_error("EXPIRE k").message.find("EXPIRE: missing time to live"), std::string::npos);
  EXPECT_NE(one_error("EXPIRE k -5").message.find("is not a number of milliseconds"), std::string::npos);
  EXPECT_NE(one_error("EXPIRE k 5 6").message.find("unexpected text after the time to live"), std::string::npos);
  op = one_op("TTL k");
  EXPECT_EQ(op.kind, Op::Kind::ttl);
  EXPECT_EQ(to_string(op.kind), "ttl");
  EXPECT_NE(one_error("TTL k 5").message.find("TTL: unexpected text after the key"), std::string::npos);
}

TEST(WorkloadParse, LineNumbersSkipBlankCommentAndCrlf) {
  const ParseResult r = parse(
      "# header comment\r\n"   // 1
      "\r\n"                   // 2
      "   \n"                  // 3
      "SET a 1\r\n"            // 4
      "  # indented comment\n" // 5
      "\n"                     // 6
      "GET a\r\n"              // 7
      "SET b x y \r\n"         // 8
      "GET b");                // 9, no final newline
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.ops.size(), 4u);
  EXPECT_EQ(r.ops[0].line, 4u);
  EXPECT_EQ(literal(r.ops[0]), "1");  // \r stripped
  EXPECT_EQ(r.ops[1].line, 7u);
  EXPECT_EQ(r.ops[1].key, "a");
  EXPECT_EQ(r.ops[2].line, 8u);
  EXPECT_EQ(literal(r.ops[2]), "x y ");
  EXPECT_EQ(r.ops[3].line, 9u);
}

TEST(WorkloadParse, ErrorLineNumbersAfterBlankAndCrlf) {
  const ParseResult r = parse("# c\r\n\r\nSET a 1\r\nFOO a\r\n\n# x\nGET a junk\r\nSET b\r\n");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.ops.empty());
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].line, 4u);
  EXPECT_EQ(r.errors[1].line, 7u);
  EXPECT_EQ(r.errors[2].line, 8u);
  EXPECT_TRUE(parse("").ok());
  EXPECT_TRUE(parse("").ops.empty());
}

TEST(WorkloadErrors, UnknownOpcode) {
  const ParseError e = one_error("\nPUT k v\n");
  EXPECT_EQ(e.line, 2u);
  EXPECT_NE(e.message.find("unknown operation 'PUT'"), std::string::npos) << e.message;
}

TEST(WorkloadErrors, MissingKey) {
  EXPECT_EQ(one_error("SET").message, "SET: missing key");
  EXPECT_EQ(one_error("GET   ").message, "GET: missing key");
  EXPECT_EQ(one_error("GET\r\n").message, "GET: missing key");
}

TEST(WorkloadErrors, MissingValue) {
  EXPECT_NE(one_error("SET k").message.find("SET: missing value"), std::string::npos);
  // CRLF file: the \r is stripped first, so this is still missing its value.
  EXPECT_NE(one_error("SET k\r\n").message.find("missing value"), std::string::npos);
}

TEST(WorkloadErrors, GetTrailingJunk) {
  const ParseError e = one_error("GET k extra stuff");
  EXPECT_NE(e.message.find("unexpected text after the key: 'extra stuff'"), std::string::npos)
      << e.message;
}

TEST(WorkloadErrors, KeyLength) {
  EXPECT_EQ(one_op("GET " + std::string(1024, 'k')).key.size(), 1024u);
  const ParseError e = one_error("SET " + std::string(1025, 'k') + " v");
  EXPECT_NE(e.message.find("1025 bytes, over the limit of 1024"), std::string::npos) << e.message;
  EXPECT_LT(e.message.size(), 200u);  // the key is abbreviated
  ParseLimits small;
  small.max_key = 4;
  EXPECT_TRUE(parse("GET abcd", small).ok());
  EXPECT_FALSE(parse("GET abcde", small).ok());
}

TEST(WorkloadErrors, LiteralValueOverLimit) {
  ParseLimits lim;
  lim.max_value = 5;
  EXPECT_TRUE(parse("SET k 12345", lim).ok());
  const ParseError e = one_error("SET k 123456", lim);
  EXPECT_NE(e.message.find("6 bytes, over the limit of 5"), std::string::npos) << e.message;
}

TEST(WorkloadErrors, CollectsAllErrorsUpToLimit) {
  std::string text;
  for (int i = 0; i < 30; ++i) text += (i % 2 ? "BAD\n" : "GET ok\n");  // 15 bad lines
  ParseLimits lim;
  lim.max_errors = 10;
  const ParseResult r = parse(text, lim);
  ASSERT_EQ(r.errors.size(), 10u);
  EXPECT_EQ(r.errors_omitted, 5u);
  EXPECT_TRUE(r.ops.empty());
  for (std::size_t i = 0; i < r.errors.size(); ++i) EXPECT_EQ(r.errors[i].line, 2 * i + 2);
  const ParseResult all = parse(text);  // default limit 20 keeps all 15
  EXPECT_EQ(all.errors.size(), 15u);
  EXPECT_EQ(all.errors_omitted, 0u);
}

// A stream that fails mid-file: the parser must report it, not end quietly.
class FailingBuf : public std::streambuf {
 public:
  FailingBuf() { setg(data_, data_, data_ + sizeof(data_) - 1); }

 protected:
  int_type underflow() override { throw std::runtime_error("disk on fire"); }

 private:
  char data_[9] = "GET a\nGE";
};

TEST(WorkloadErrors, ReadErrorIsReported) {
  FailingBuf buf;
  std::istream in(&buf);
  const ParseResult r = parse_workload(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.back().message, "read error");
  EXPECT_TRUE(r.ops.empty());
}

TEST(SizeNotation, Sizes) {
  EXPECT_EQ(generated(one_op("SET k @4096")), (GeneratedValue{4096, 0}));
  EXPECT_EQ(generated(one_op("SET k @64k")), (GeneratedValue{64 * 1024, 0}));
  EXPECT_EQ(generated(one_op("SET k @2K")), (GeneratedValue{2048, 0}));
  EXPECT_EQ(generated(one_op("SET k @1m")), (GeneratedValue{1 << 20, 0}));
  EXPECT_EQ(generated(one_op("SET k @3M:9")), (GeneratedValue{3 << 20, 9}));
  EXPECT_EQ(generated(one_op("SET k @0")), (GeneratedValue{0, 0}));
  EXPECT_EQ(generated(one_op("SET k @10:18446744073709551615")),
            (GeneratedValue{10, 18446744073709551615ull}));
  EXPECT_EQ(generated(one_op("SET k @64k:42  \r\n")), (GeneratedValue{65536, 42}));
}

TEST(SizeNotation, AtAtEscapesLiteral) {
  EXPECT_EQ(literal(one_op("SET k @@")), "@");
  EXPECT_EQ(literal(one_op("SET k @@64k")), "@64k");
  EXPECT_EQ(literal(one_op("SET k @@@x")), "@@x");
}

TEST(SizeNotation, BadSyntax) {
  for (const char* bad : {"@", "@k", "@1g", "@-1", "@1.5k", "@12x", "@ 64", "@64 k", "@0x10",
                          "@1kk", "@:5", "@1km"}) {
    const ParseError e = one_error(std::string("SET k ") + bad);
    EXPECT_NE(e.message.find("bad value size"), std::string::npos) << bad << ": " << e.message;
  }
}

TEST(SizeNotation, BadSeed) {
  for (const char* bad : {"@64k:", "@64k:x", "@64k:-1", "@64k:1:2", "@1:18446744073709551616"}) {
    const ParseError e = one_error(std::string("SET k ") + bad);
    EXPECT_NE(e.message.find("bad seed"), std::string::npos) << bad << ": " << e.message;
  }
}

TEST(SizeNotation, Limits) {
  EXPECT_EQ(generated(one_op("SET k @256m")).size, kDefaultMaxValue);
  for (const char* big : {"@257m", "@268435457", "@262145k", "@99999999999999999999999",
                          "@18014398509481984k"}) {
    const ParseError e = one_error(std::string("SET k ") + big);
    EXPECT_NE(e.message.find("over the limit of 268435456"), std::string::npos)
        << big << ": " << e.message;
  }
  ParseLimits lim;
  lim.max_value = 1000;
  EXPECT_TRUE(parse("SET k @1000", lim).ok());
  EXPECT_FALSE(parse("SET k @1001", lim).ok());
  EXPECT_FALSE(parse("SET k @1k", lim).ok());
}

TEST(ParseCommand, OneLine) {
  std::string err = "stale";
  auto op = parse_command("set greeting hello there\r\n", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_TRUE(err.empty());
  EXPECT_EQ(op->kind, Op::Kind::set);
  EXPECT_EQ(op->key, "greeting");
  EXPECT_EQ(literal(*op), "hello there");
  EXPECT_EQ(op->line, 0u);

  op = parse_command("GET greeting\n", err);
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(op->kind, Op::Kind::get);

  op = parse_command("SET big @1m:3", err);
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(generated(*op), (GeneratedValue{1 << 20, 3}));

  op = parse_command("del greeting\n", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(op->kind, Op::Kind::del);
  EXPECT_EQ(op->key, "greeting");
}

TEST(ParseCommand, CallLines) {
  std::string err;
  auto op = parse_command("CALL 0x0100 \\x07\\x00counter\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(op->kind, Op::Kind::call);
  EXPECT_EQ(op->call_op, 0x0100);
  EXPECT_TRUE(op->key.empty());
  EXPECT_EQ(literal(*op), std::string("\x07\x00", 2) + "counter" + std::string("\x01\0\0\0\0\0\0\0", 8));
  op = parse_command("call 4096 plain text, a \\\\ backslash # not a comment", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(op->call_op, 4096);
  EXPECT_EQ(literal(*op), "plain text, a \\ backslash # not a comment");
  op = parse_command("CALL 0x1000", err);  // an empty request
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(literal(*op), "");
  op = parse_command("CALL 0x1000 @64k:9", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(generated(*op), (GeneratedValue{65536, 9}));
  op = parse_command("CALL 0x1000 @@x", err);
  ASSERT_TRUE(op.has_value()) << err;
  EXPECT_EQ(literal(*op), "@x");
  for (const char* bad : {"CALL", "CALL 65536 x", "CALL -1 x", "CALL 0xZZ x", "CALL 12a x", "CALL 1 \\q", "CALL 1 \\x4"}) {
    EXPECT_FALSE(parse_command(bad, err).has_value()) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
}

TEST(ParseCommand, BlankAndErrors) {
  std::string err = "stale";
  EXPECT_FALSE(parse_command("", err).has_value());
  EXPECT_TRUE(err.empty());
  EXPECT_FALSE(parse_command("  # note\n", err).has_value());
  EXPECT_TRUE(err.empty());
  EXPECT_FALSE(parse_command("PUT k", err).has_value());
  EXPECT_NE(err.find("unknown operation 'PUT'"), std::string::npos);
  EXPECT_NE(err.find("expected SET, GET, DEL, EXPIRE, TTL or CALL"), std::string::npos) << err;
  EXPECT_FALSE(parse_command("del k v", err).has_value());
  EXPECT_NE(err.find("DEL: unexpected text after the key: 'v'"), std::string::npos) << err;
  EXPECT_FALSE(parse_command("GET k v", err).has_value());
  EXPECT_NE(err.find("unexpected text"), std::string::npos);
  ParseLimits lim;
  lim.max_value = 10;
  EXPECT_FALSE(parse_command("SET k @11", err, lim).has_value());
  EXPECT_NE(err.find("over the limit of 10"), std::string::npos);
}

TEST(FillValue, DeterministicAndSeedSensitive) {
  std::vector<std::byte> a(1000), b(1000), c(1000);
  fill_value(a, 7);
  fill_value(b, 7);
  fill_value(c, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(check_value(a, 7));
  EXPECT_FALSE(check_value(a, 8));
  EXPECT_TRUE(check_value(c, 8));
}

TEST(FillValue, SizeIsPartOfTheValue) {
  std::vector<std::byte> big(100), small(99);
  fill_value(big, 1);
  fill_value(small, 1);
  EXPECT_FALSE(std::equal(small.begin(), small.end(), big.begin()));
  // A truncated or extended value does not check out.
  EXPECT_FALSE(check_value(std::span<const std::byte>(big).first(99), 1));
}

TEST(FillValue, EveryFlippedByteFails) {
  for (std::size_t size : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 63u}) {
    std::vector<std::byte> v(size);
    fill_value(v, 99);
    ASSERT_TRUE(check_value(v, 99)) << size;
    for (std::size_t i = 0; i < size; ++i) {
      for (unsigned bit = 0; bit < 8; ++bit) {
        v[i] ^= std::byte{1} << bit;
        EXPECT_FALSE(check_value(v, 99)) << "size " << size << " byte " << i << " bit " << bit;
        v[i] ^= std::byte{1} << bit;
      }
    }
  }
}

TEST(FillValue, LargeValueFlippedByteFails) {
  std::vector<std::byte> v(1 << 20);
  fill_value(v, 5);
  ASSERT_TRUE(check_value(v, 5));
  for (std::size_t pos : {std::size_t{0}, std::size_t{4095}, std::size_t{524288}, v.size() - 1}) {
    v[pos] ^= std::byte{0x80};
    EXPECT_FALSE(check_value(v, 5)) << pos;
    v[pos] ^= std::byte{0x80};
  }
  EXPECT_TRUE(check_value({}, 0));
  fill_value({}, 0);  // empty: must not touch memory
}

TEST(FillValue, FormatIsPinned) {
  // Values written by one build are checked by another: the generator's output
  // is part of the file format. Expected sums come from an independent Python
  // model of the documented algorithm: state = mix64(seed) ^ mix64(size + G),
  // then per 8 bytes state += G, word = mix64(state) stored little-endian
  // (G = 0x9E3779B97F4A7C15, mix64 = splitmix64's finalizer), FNV-1a 64 over it.
  std::vector<std::byte> v(4096);
  fill_value(v, 0);
  EXPECT_EQ(checksum(v), 0x646ac6e6a98b3455ull) << std::hex << checksum(v);
  std::vector<std::byte> w(13);
  fill_value(w, 12345);
  EXPECT_EQ(checksum(w), 0x5e5a4867e0948295ull) << std::hex << checksum(w);
}

TEST(Checksum, Fnv1aVectors) {
  EXPECT_EQ(checksum({}), 0xcbf29ce484222325ull);
  EXPECT_EQ(checksum(bytes_of("a")), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(checksum(bytes_of("foobar")), 0x85944171f73967e8ull);
  EXPECT_NE(checksum(bytes_of("ab")), checksum(bytes_of("ba")));
}

TEST(ValueSpec, SizeWriteMatch) {
  const ValueSpec lit = std::string("hello");
  const ValueSpec gen = GeneratedValue{300, 4};
  EXPECT_EQ(value_size(lit), 5u);
  EXPECT_EQ(value_size(gen), 300u);
  std::vector<std::byte> a(5), b(300), ref(300);
  write_value(lit, a);
  write_value(gen, b);
  fill_value(ref, 4);
  EXPECT_EQ(a, bytes_of("hello"));
  EXPECT_EQ(b, ref);
  EXPECT_TRUE(matches(lit, a));
  EXPECT_TRUE(matches(gen, b));
  EXPECT_FALSE(matches(lit, bytes_of("hellO")));
  EXPECT_FALSE(matches(lit, bytes_of("hell")));
  EXPECT_FALSE(matches(gen, std::span<const std::byte>(b).first(299)));
  EXPECT_TRUE(matches(ValueSpec{std::string()}, {}));
  EXPECT_TRUE(matches(ValueSpec{GeneratedValue{0, 1}}, {}));

  EXPECT_EQ(format_size(0), "0");
  EXPECT_EQ(format_size(4095), "4095");
  EXPECT_EQ(format_size(4096), "4k");
  EXPECT_EQ(format_size(1 << 20), "1m");
  EXPECT_EQ(format_size(3 << 20), "3m");
  EXPECT_EQ(format_size((1 << 20) + 1024), "1025k");
}

std::string generate(const GenOptions& opt) {
  std::ostringstream out;
  generate_workload(out, opt);
  EXPECT_TRUE(out.good());
  return out.str();
}

TEST(Generator, ParsesBackAndIsDeterministic) {
  GenOptions opt;
  opt.keys = 50;
  opt.ops = 2000;
  opt.get_ratio = 0.3;
  opt.sizes = {{0, 1}, {10, 2}, {64, 1}, {65, 1}, {4096, 1}, {1 << 20, 1}, {3000, 1}};
  opt.seed = 17;
  const std::string text = generate(opt);
  EXPECT_EQ(text, generate(opt));
  GenOptions other = opt;
  other.seed = 18;
  const std::string text2 = generate(other);
  // Compare past the header comment, which names the seed anyway.
  EXPECT_NE(text.substr(text.find('\n')), text2.substr(text2.find('\n')));

  const ParseResult r = parse(text);
  ASSERT_TRUE(r.ok()) << r.errors[0].line << ": " << r.errors[0].message;
  ASSERT_EQ(r.ops.size(), 50u + 2000u);
  std::map<std::uint64_t, int> size_seen;
  std::size_t gets = 0;
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const Op& op = r.ops[i];
    ASSERT_EQ(op.key.size(), 5u);  // "key" + two digits, zero padded
    EXPECT_EQ(op.key.substr(0, 3), "key");
    if (i < 50) {  // preload: every key once, in order
      EXPECT_EQ(op.kind, Op::Kind::set);
      EXPECT_EQ(op.key, "key" + std::string(i < 10 ? "0" : "") + std::to_string(i));
    }
    if (op.kind == Op::Kind::get) {
      ++gets;
      continue;
    }
    const std::uint64_t size = value_size(op.value);
    ++size_seen[size];
    // Small values are literal, large ones use the @size:seed notation.
    EXPECT_EQ(std::holds_alternative<std::string>(op.value), size <= opt.literal_max) << size;
  }
  EXPECT_EQ(size_seen.size(), opt.sizes.size());
  EXPECT_NEAR(static_cast<double>(gets) / 2000.0, 0.3, 0.04);
  // Weight 2 of 8 for size 10.
  EXPECT_NEAR(static_cast<double>(size_seen[10]) / static_cast<double>(50 + 2000 - gets), 0.25,
              0.04);
  EXPECT_NE(text.find("@1m:"), std::string::npos);
  EXPECT_NE(text.find("@4k:"), std::string::npos);
  EXPECT_NE(text.find("@3000:"), std::string::npos);
  EXPECT_EQ(text.rfind("# rkv workload:", 0), 0u);
}

TEST(Generator, RatioExtremesAndNoPreload) {
  GenOptions opt;
  opt.keys = 3;
  opt.ops = 100;
  opt.preload = false;
  opt.get_ratio = 1.0;
  ParseResult r = parse(generate(opt));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.ops.size(), 100u);
  for (const Op& op : r.ops) EXPECT_EQ(op.kind, Op::Kind::get);
  opt.get_ratio = 0.0;
  r = parse(generate(opt));
  ASSERT_TRUE(r.ok());
  for (const Op& op : r.ops) EXPECT_EQ(op.kind, Op::Kind::set);
}

TEST(Generator, GeneratedValuesDiffer) {
  // Two SETs of generated values should not carry the same seed: --verify
  // would not notice a stale value otherwise.
  GenOptions opt;
  opt.keys = 1;
  opt.ops = 20;
  opt.get_ratio = 0;
  opt.sizes = {{8192, 1}};
  const ParseResult r = parse(generate(opt));
  ASSERT_TRUE(r.ok());
  std::map<std::uint64_t, int> seeds;
  for (const Op& op : r.ops) ++seeds[generated(op).seed];
  EXPECT_EQ(seeds.size(), r.ops.size());
}

TEST(Generator, InvalidOptionsWriteNothing) {
  auto bad = [](auto tweak) {
    GenOptions opt;
    tweak(opt);
    EXPECT_FALSE(check_options(opt).empty());
    std::ostringstream out;
    generate_workload(out, opt);
    EXPECT_TRUE(out.fail());
    EXPECT_TRUE(out.str().empty());
  };
  EXPECT_TRUE(check_options(GenOptions{}).empty());
  bad([](GenOptions& o) { o.keys = 0; });
  bad([](GenOptions& o) { o.get_ratio = 1.5; });
  bad([](GenOptions& o) { o.get_ratio = -0.1; });
  bad([](GenOptions& o) { o.get_ratio = std::numeric_limits<double>::quiet_NaN(); });
  bad([](GenOptions& o) { o.sizes.clear(); });
  bad([](GenOptions& o) { o.sizes = {{10, 0}}; });
  bad([](GenOptions& o) { o.sizes = {{kDefaultMaxValue + 1, 1}}; });
  bad([](GenOptions& o) { o.key_prefix = "a b"; });
  bad([](GenOptions& o) { o.key_prefix = std::string(1022, 'p'); });  // + 3 digits
  bad([](GenOptions& o) { o.dist = {KeyDist::Kind::zipf, 1.0}; });
  bad([](GenOptions& o) {
    o.dist.kind = KeyDist::Kind::zipf;
    o.keys = kMaxZipfKeys + 1;
  });
}

// How often each key is the target of a random op in a generated workload.
std::map<std::string, std::size_t> key_counts(const GenOptions& opt) {
  const ParseResult r = parse(generate(opt));
  EXPECT_TRUE(r.ok());
  std::map<std::string, std::size_t> n;
  for (std::size_t i = opt.preload ? opt.keys : 0; i < r.ops.size(); ++i) ++n[r.ops[i].key];
  return n;
}

TEST(Generator, KeyDistributions) {
  std::string error;
  EXPECT_EQ(parse_key_dist("uniform", error)->kind, KeyDist::Kind::uniform);
  EXPECT_EQ(parse_key_dist("zipf", error)->theta, 0.99);
  EXPECT_EQ(parse_key_dist("zipf:0.5", error)->theta, 0.5);
  EXPECT_EQ(parse_key_dist("latest:0.9", error)->kind, KeyDist::Kind::latest);
  for (const char* bad : {"zipf:1", "zipf:0", "zipf:", "zipf:x", "pareto", "uniform:0.5"}) {
    EXPECT_FALSE(parse_key_dist(bad, error)) << bad;
    EXPECT_FALSE(error.empty());
  }

  GenOptions opt;
  opt.keys = 1000;
  opt.ops = 20000;
  opt.get_ratio = 1.0;
  opt.seed = 3;
  const std::string uniform = generate(opt);
  EXPECT_EQ(uniform.substr(0, uniform.find('\n')).find("dist="), std::string::npos)
      << "a uniform file keeps the first line it always had";
  auto top_share = [&](const std::map<std::string, std::size_t>& n, std::size_t top) {
    std::vector<std::size_t> c;
    for (const auto& [k, v] : n) c.push_back(v);
    std::sort(c.rbegin(), c.rend());
    std::size_t sum = 0;
    for (std::size_t i = 0; i < top && i < c.size(); ++i) sum += c[i];
    return static_cast<double>(sum) / static_cast<double>(opt.ops);
  };
  const auto u = key_counts(opt);
  EXPECT_LT(top_share(u, 100), 0.15) << "uniform: the top 10 % of keys get about 10 % of the ops";

  opt.dist = {KeyDist::Kind::zipf, 0.99};
  const auto z = key_counts(opt);
  // zipf(1000, 0.99): key 0 gets 1/zeta = ~13 %, the top 100 keys ~69 %.
  EXPECT_GT(top_share(z, 100), 0.6) << "zipf 0.99: the hottest 10 % of keys take most ops";
  EXPECT_GT(z.at("key000"), z.at("key500") * 20) << "key 0 is the hottest";
  EXPECT_EQ(generate(opt), generate(opt)) << "deterministic";

  // latest: every op a SET that moves the hot spot, or GETs that follow it.
  opt.dist = {KeyDist::Kind::latest, 0.99};
  opt.get_ratio = 1.0;
  const auto l = key_counts(opt);
  EXPECT_GT(l.at("key999"), opt.ops / 20) << "with no SETs the preload's last key stays the hottest";
}

}  // namespace
}  // namespace rkv::kv::load
