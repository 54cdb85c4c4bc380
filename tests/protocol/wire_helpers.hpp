#pragma once
// Wire helpers for the protocol suite: pack messages into one SEND's bytes,
// decode what a state machine posted.
#include <gtest/gtest.h>

#include <initializer_list>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "proto/decode.hpp"
#include "proto/encode.hpp"

namespace rkv::test {

// Messages packed back to back, as one SEND.
inline std::vector<std::byte> pack(std::span<const proto::MessageSpec> specs) {
  std::vector<std::byte> out(16384);
  proto::Encoder enc(out);
  for (const auto& s : specs) EXPECT_EQ(enc.append(s), proto::EncodeStatus::ok);
  out.resize(enc.size());
  return out;
}
inline std::vector<std::byte> pack(std::initializer_list<proto::MessageSpec> specs) {
  return pack(std::span<const proto::MessageSpec>(specs.begin(), specs.size()));
}

// Every message of a posted SEND; a decode error fails the test.
inline std::vector<proto::MessageView> decode(const std::vector<std::byte>& b) {
  std::vector<proto::MessageView> out;
  proto::Decoder d(b);
  for (;;) {
    auto r = d.next();
    if (auto* m = std::get_if<proto::MessageView>(&r)) {
      out.push_back(*m);
      continue;
    }
    EXPECT_TRUE(std::holds_alternative<proto::EndOfBuffer>(r));
    return out;
  }
}

inline std::string text(std::span<const std::byte> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace rkv::test
