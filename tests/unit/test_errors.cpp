// The one client error vocabulary (kv/client/errors.hpp) walked through every
// C++ and C mapping derived from it: each Status's name and errno, each
// code's kv_strerror text, each wire status's Status, and kv.h documenting
// every code. (Python's mapping: tests/python/test_rkv.py, test_error_table.)
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kv/client/errors.hpp"
#include "kv/client/kv.h"

#ifndef RKV_KV_H_PATH
#error "RKV_KV_H_PATH must name src/kv/client/kv.h"
#endif

namespace rkv::kv::client {
namespace {

TEST(Errors, EveryStatusHasItsNameAndACodeWithAText) {
  for (const auto& row : kStatusTable) {
    SCOPED_TRACE(std::string(row.name));
    EXPECT_EQ(to_string(row.status), row.name);
    EXPECT_EQ(to_errno(row.status), row.err);
    ASSERT_NE(errno_info(row.err), nullptr);
    EXPECT_STREQ(kv_strerror(to_errno(row.status)), std::string(errno_info(row.err)->message).c_str());
    EXPECT_STRNE(kv_strerror(to_errno(row.status)), "unknown error");
  }
  EXPECT_EQ(to_errno(Status::ok), 0);
}

TEST(Errors, EveryCodeHasItsText) {
  std::set<std::string> texts;
  for (const auto& row : kErrnoTable) {
    SCOPED_TRACE(std::string(row.name));
    EXPECT_STREQ(kv_strerror(row.err), std::string(row.message).c_str());
    EXPECT_TRUE(texts.insert(std::string(row.message)).second) << "two codes share a text";
    EXPECT_EQ(row.py == PyError::none, row.err == 0);
  }
  EXPECT_STREQ(kv_strerror(EBADF), "unknown error");  // not a code of kv.h
  EXPECT_STREQ(kv_strerror(-1), "unknown error");
}

// The connection's failure and the server's failure are different codes (and
// so different Python classes): nothing needs a message's text to tell them apart.
TEST(Errors, AConnectionFailureIsNotAServerFailure) {
  EXPECT_NE(to_errno(Status::connection_failed), to_errno(Status::server_error));
  EXPECT_NE(to_errno(Status::closed), to_errno(Status::server_error));
  EXPECT_EQ(errno_info(to_errno(Status::connection_failed))->py, PyError::connection);
  EXPECT_EQ(errno_info(to_errno(Status::closed))->py, PyError::connection);
  EXPECT_EQ(errno_info(to_errno(Status::shard_down))->py, PyError::connection);
  EXPECT_EQ(errno_info(to_errno(Status::server_error))->py, PyError::server);
  EXPECT_EQ(errno_info(to_errno(Status::io_error))->py, PyError::server);
}

TEST(Errors, EveryWireStatusHasItsStatus) {
  for (const auto& row : kWireStatusTable) {
    EXPECT_EQ(from_wire(row.wire), row.status) << proto::to_string(row.wire);
  }
  for (std::uint16_t v = 0; v < 64; ++v) {
    const auto wire = proto::status_from_wire(v);
    if (!wire) continue;
    const Status s = from_wire(*wire);
    EXPECT_EQ(s == Status::ok, *wire == proto::Status::ok) << v;
  }
}

// kv.h's list of return codes names every code of the table.
TEST(Errors, KvHDocumentsEveryCode) {
  std::ifstream in(RKV_KV_H_PATH);
  ASSERT_TRUE(in) << RKV_KV_H_PATH;
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& row : kErrnoTable) {
    if (row.err == 0) continue;
    EXPECT_NE(text.str().find(std::string(row.name)), std::string::npos) << row.name << " is not in kv.h";
  }
}

}  // namespace
}  // namespace rkv::kv::client
