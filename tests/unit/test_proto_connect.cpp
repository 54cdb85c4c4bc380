// Unit tests for src/proto: connection parameters (the rdma_cm private
// data) and the access-control digest.

#include "proto_test_util.hpp"

namespace rkv::proto {
namespace {

using namespace rkv::proto::test;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------- connect params

ConnectParams client_params() {
  ConnectParams p;
  p.role = Role::client;
  p.credits = 64;
  p.recv_buf_size = 8192;
  return p;
}

ConnectParams server_params() {
  ConnectParams p;
  p.role = Role::server;
  p.credits = 32;
  p.recv_buf_size = 4200;
  p.max_value = 256u << 20;
  p.index_addr = 0xDEADBEEF000ull;
  p.index_rkey = 0x1234;
  p.index_buckets = 1u << 16;
  p.index_layout = 64;
  return p;
}

template <class T>
std::optional<ConnectError> connect_error(const T& data, Role expected) {
  const ConnectDecodeResult r = decode_connect_params(data, expected);
  if (const auto* e = std::get_if<ConnectError>(&r)) return *e;
  return std::nullopt;
}

TEST(ProtoConnect, RoundTrip) {
  for (const ConnectParams& p : {client_params(), server_params()}) {
    EXPECT_FALSE(check_connect_params(p));
    const auto bytes = encode_connect_params(p);
    const ConnectDecodeResult r = decode_connect_params(bytes, p.role);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(r)) << to_string(p.role);
    EXPECT_EQ(std::get<ConnectParams>(r), p);
  }
  ConnectParams no_index = server_params();
  no_index.index_addr = 0;
  no_index.index_rkey = 0;
  no_index.index_buckets = 0;
  no_index.index_layout = 0;
  EXPECT_EQ(std::get<ConnectParams>(
                decode_connect_params(encode_connect_params(no_index), Role::server)),
            no_index);
}

// A client uses a server's index only if it is this build's layout: a kvd
// of the 64-byte buckets (before INLINE entries) or of the 48-byte entry
// header (before expire_at: it announced 128 alone) gets GETs by message,
// and so does a client of such a build from this kvd (it sees 0x10080).
TEST(ProtoConnect, AnIndexOfAnotherLayoutIsNotUsed) {
  ConnectParams p = server_params();
  p.index_layout = proto::kIndexLayout;
  EXPECT_EQ(p.index_layout, 0x10080u) << "entry format 1, 128-byte buckets";
  const auto ix = usable_index(p);
  ASSERT_TRUE(ix.has_value());
  EXPECT_EQ(ix->buckets, p.index_buckets);
  for (const std::uint32_t other : {64u, 128u, 0x20080u, 0x10040u}) {
    p.index_layout = other;
    EXPECT_FALSE(usable_index(p).has_value()) << other;
  }
}

TEST(ProtoConnect, GoldenBytes) {
  const auto b = encode_connect_params(client_params());
  EXPECT_EQ(b[0], std::byte{0x56});
  EXPECT_EQ(b[1], std::byte{0x4B});
  EXPECT_EQ(b[2], std::byte{kVersion});
  EXPECT_EQ(b[3], std::byte{1});
  EXPECT_EQ(b[4], std::byte{64});
  EXPECT_EQ(b[9], std::byte{0x20});  // 8192 = 0x2000
}

TEST(ProtoConnect, TrailingPaddingIgnored) {
  const auto b = encode_connect_params(client_params());
  Bytes padded(b.begin(), b.end());
  padded.resize(kMaxConnectPrivateData, std::byte{0});
  EXPECT_FALSE(connect_error(padded, Role::client));
  padded.resize(196, std::byte{0x77});
  EXPECT_FALSE(connect_error(padded, Role::client));
}

TEST(ProtoConnect, TooShort) {
  const auto b = encode_connect_params(client_params());
  for (std::size_t len = 0; len < kConnectParamsMinSize; ++len) {
    const Bytes prefix(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_EQ(connect_error(prefix, Role::client), ConnectError::too_short) << len;
  }
}

TEST(ProtoConnect, AuthDigestRoundTripsAndAShortSenderHasNone) {
  ConnectParams p = client_params();
  p.auth = auth_digest("s3cret");
  const auto b = encode_connect_params(p);
  EXPECT_EQ(b.size(), kMaxConnectPrivateData) << "the whole connect private data";
  const auto r = decode_connect_params(b, Role::client);
  ASSERT_TRUE(std::holds_alternative<ConnectParams>(r));
  EXPECT_EQ(std::get<ConnectParams>(r).auth, p.auth);
  for (std::size_t len = kConnectParamsMinSize; len < kConnectParamsSize; ++len) {
    const Bytes prefix(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(len));
    const auto short_r = decode_connect_params(prefix, Role::client);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(short_r)) << len;
    EXPECT_FALSE(auth_present(std::get<ConnectParams>(short_r).auth)) << len;
  }
  ConnectParams s = server_params();
  s.auth = auth_digest("x");
  EXPECT_EQ(check_connect_params(s), ConnectError::client_only_field);
  EXPECT_EQ(connect_error(encode_connect_params(s), Role::server), ConnectError::client_only_field);
}

TEST(ProtoAuth, Sha256KnownVectors) {
  auto hex = [](const std::array<std::byte, 32>& d) {
    std::string out;
    static constexpr char kHex[] = "0123456789abcdef";
    for (const std::byte b : d) {
      out += kHex[static_cast<unsigned>(b) >> 4];
      out += kHex[static_cast<unsigned>(b) & 15];
    }
    return out;
  };
  auto of = [](std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); };
  EXPECT_EQ(hex(sha256(of(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(of("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(hex(sha256(of(million))), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ProtoAuth, DigestsCompareAndRejectsRoundTrip) {
  const AuthDigest a = auth_digest("token-a");
  EXPECT_TRUE(auth_present(a));
  EXPECT_FALSE(auth_present(AuthDigest{}));
  EXPECT_TRUE(auth_equal(a, auth_digest("token-a")));
  EXPECT_FALSE(auth_equal(a, auth_digest("token-b")));
  EXPECT_FALSE(auth_equal(a, auth_digest("token-a\n")));
  AuthDigest last = a;
  last[kAuthDigestSize - 1] ^= std::byte{1};
  EXPECT_FALSE(auth_equal(a, last));
  for (RejectReason r : {RejectReason::auth_required, RejectReason::auth_failed}) {
    const auto b = encode_reject(r);
    EXPECT_EQ(decode_reject(b), r);
    Bytes padded(b.begin(), b.end());
    padded.resize(148, std::byte{0});
    EXPECT_EQ(decode_reject(padded), r);
  }
  EXPECT_FALSE(decode_reject(Bytes(3, std::byte{0})));
  auto bad = encode_reject(RejectReason::auth_failed);
  bad[3] = std::byte{9};
  EXPECT_FALSE(decode_reject(bad));
  bad = encode_reject(RejectReason::auth_failed);
  bad[0] = std::byte{0};
  EXPECT_FALSE(decode_reject(bad));
}

TEST(ProtoConnect, Rejections) {
  const auto good = encode_connect_params(client_params());
  auto with = [&](std::size_t at, std::uint8_t v) {
    auto b = good;
    b[at] = std::byte{v};
    return b;
  };
  EXPECT_EQ(connect_error(with(0, 0x43), Role::client), ConnectError::bad_magic);
  EXPECT_EQ(connect_error(with(1, 0x00), Role::client), ConnectError::bad_magic);
  EXPECT_EQ(connect_error(with(2, 0), Role::client), ConnectError::bad_version);
  EXPECT_EQ(connect_error(with(2, 2), Role::client), ConnectError::bad_version);
  EXPECT_EQ(connect_error(with(3, 0), Role::client), ConnectError::bad_role);
  EXPECT_EQ(connect_error(with(3, 9), Role::client), ConnectError::bad_role);
  EXPECT_EQ(connect_error(good, Role::server), ConnectError::bad_role);
  EXPECT_EQ(connect_error(with(6, 2), Role::client), ConnectError::unknown_feature);
  EXPECT_EQ(connect_error(with(7, 0x80), Role::client), ConnectError::unknown_feature);
  EXPECT_EQ(connect_error(with(39, 1), Role::client), ConnectError::reserved_nonzero);
  // The grants feature, asked for by a client and done by a server, round-trips.
  for (const Role r : {Role::client, Role::server}) {
    ConnectParams p = r == Role::client ? client_params() : ConnectParams{};
    if (r == Role::server) {
      p.role = Role::server;
      p.credits = 8;
      p.recv_buf_size = kMinRecvBufSize;
    }
    p.features = kFeatureGrants;
    const auto d = decode_connect_params(encode_connect_params(p), r);
    ASSERT_TRUE(std::holds_alternative<ConnectParams>(d)) << to_string(r);
    EXPECT_EQ(std::get<ConnectParams>(d), p);
  }
  EXPECT_EQ(connect_error(with(6, 1), Role::client), std::nullopt) << "grants";

  ConnectParams p = client_params();
  p.credits = 0;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client), ConnectError::zero_credits);
  p = client_params();
  p.recv_buf_size = kMinRecvBufSize - 1;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client),
            ConnectError::recv_buf_too_small);
  p.recv_buf_size = kMinRecvBufSize;
  EXPECT_FALSE(connect_error(encode_connect_params(p), Role::client));
  p = client_params();
  p.index_rkey = 5;
  EXPECT_EQ(connect_error(encode_connect_params(p), Role::client),
            ConnectError::server_only_field);
  p = client_params();
  p.max_value = 5;
  EXPECT_EQ(check_connect_params(p), ConnectError::server_only_field);

  ConnectParams s = server_params();
  s.index_layout = 0;
  EXPECT_EQ(connect_error(encode_connect_params(s), Role::server), ConnectError::bad_index);
  s = server_params();
  s.index_buckets = 0;
  EXPECT_EQ(check_connect_params(s), ConnectError::bad_index);
}

TEST(ProtoConnect, ToString) {
  std::set<std::string_view> seen;
  for (unsigned v = 0; v <= static_cast<unsigned>(ConnectError::bad_index); ++v) {
    EXPECT_TRUE(seen.insert(to_string(static_cast<ConnectError>(v))).second);
  }
  EXPECT_EQ(to_string(Role::server), "server");
}

}  // namespace
}  // namespace rkv::proto
