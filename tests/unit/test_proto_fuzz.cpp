// Unit tests for src/proto: the decoder fuzzed with random bytes, random
// headers and mutated valid buffers.

#include "proto_test_util.hpp"

namespace rkv::proto {
namespace {

using namespace rkv::proto::test;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------- fuzzing

// What the fuzz loops reached, so they provably exercise deep paths.
struct FuzzStats {
  std::size_t messages = 0;
  std::set<Reason> reasons;
};

// view_validated (the unchecked second walk) must give exactly what the Decoder gave.
void expect_same_view(const MessageView& got, const MessageView& want) {
  ASSERT_EQ(got.header, want.header);
  ASSERT_EQ(got.key.data(), want.key.data());
  ASSERT_EQ(got.key.size(), want.key.size());
  ASSERT_EQ(got.value.data(), want.value.data());
  ASSERT_EQ(got.value.size(), want.value.size());
  ASSERT_EQ(got.rdv, want.rdv);
  ASSERT_EQ(got.offset, want.offset);
  ASSERT_EQ(got.size, want.size);
}

// Decodes to the end, checking every view and that errors are sticky.
void fuzz_one(std::span<const std::byte> buf, FuzzStats& stats, const Limits& limits = {}) {
  Decoder dec(buf, limits);
  std::size_t last_end = 0;
  for (std::size_t i = 0; i <= buf.size() / kHeaderSize + 1; ++i) {
    const DecodeResult r = dec.next();
    if (const auto* m = std::get_if<MessageView>(&r)) {
      check_view(buf, *m);
      expect_same_view(view_validated(buf, m->offset), *m);
      ASSERT_EQ(m->offset, last_end);
      last_end = m->offset + m->size;
      ++stats.messages;
      continue;
    }
    if (const auto* e = std::get_if<DecodeError>(&r)) {
      ASSERT_EQ(e->offset, last_end);
      ASSERT_LT(e->offset, buf.size());
      ASSERT_EQ(std::get<DecodeError>(dec.next()), *e);
      stats.reasons.insert(e->reason);
    } else {
      ASSERT_EQ(last_end, buf.size());
    }
    return;
  }
  FAIL() << "decoder did not terminate";
}

TEST(ProtoFuzz, RandomBytes) {
  std::mt19937_64 rng(0x5eed);
  FuzzStats stats;
  Bytes buf;
  for (int iter = 0; iter < 200000; ++iter) {
    buf.resize(rng() % 513);
    for (auto& b : buf) b = std::byte(rng() & 0xFF);
    // Half the time start with a valid magic/version so deeper rules get hit.
    if (buf.size() >= 3 && (iter & 1)) {
      buf[0] = std::byte{0x56};
      buf[1] = std::byte{0x4B};
      buf[2] = std::byte{kVersion};
    }
    fuzz_one(buf, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(stats.reasons.size(), 5u);
}

// Random but mostly-plausible headers: small lengths, known opcodes and flags.
TEST(ProtoFuzz, RandomHeaders) {
  std::mt19937_64 rng(1234);
  FuzzStats stats;
  const std::uint8_t ops[] = {0x01, 0x02, 0x03, 0x81, 0x82, 0x83};
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes buf;
    const int count = static_cast<int>(rng() % 4) + 1;
    for (int i = 0; i < count; ++i) {
      RawHeader h;
      h.opcode = ops[rng() % 6];
      h.flags = static_cast<std::uint16_t>(rng() % 4);
      h.status = static_cast<std::uint16_t>(rng() % 8 == 0 ? rng() % 7 : 0);
      h.credits = static_cast<std::uint16_t>(rng() % 8 == 0 ? rng() % 3 : 0);
      h.key_len = static_cast<std::uint16_t>(rng() % 3 == 0 ? 0 : rng() % 40);
      h.value_len = rng() % 50 == 0 ? rng() : rng() % 64;
      const Bytes rec = forge(h, Bytes(rng() % 100));
      buf.insert(buf.end(), rec.begin(), rec.end());
    }
    fuzz_one(buf, stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stats.messages, 1000u);
  EXPECT_GE(stats.reasons.size(), 10u);
}

TEST(ProtoFuzz, MutatedValidBuffers) {
  const Bytes v1 = to_bytes("first value");
  const Bytes v2 = to_bytes("second");
  const Bytes base = encode_all(sample_messages(v1, v2));
  std::mt19937_64 rng(42);
  FuzzStats stats;
  for (int iter = 0; iter < 200000; ++iter) {
    Bytes buf = base;
    const int flips = static_cast<int>(rng() % 4) + 1;
    for (int i = 0; i < flips; ++i) buf[rng() % buf.size()] ^= std::byte(1u << (rng() % 8));
    if (rng() % 4 == 0) buf[rng() % buf.size()] = std::byte(rng() & 0xFF);
    if (rng() % 8 == 0) buf.resize(rng() % (buf.size() + 1));
    fuzz_one(buf, stats);
    fuzz_one(buf, stats, Limits{.max_key = 4, .max_value = std::numeric_limits<std::uint64_t>::max()});
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(stats.messages, 100000u);
  EXPECT_GE(stats.reasons.size(), 15u);
}

}  // namespace
}  // namespace rkv::proto
