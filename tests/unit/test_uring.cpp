// reactor::Uring: completions arrive through the reactor (eventfd), callbacks
// run from the loop, a failed write cancels its linked sync, /dev/full gives
// a real ENOSPC, openat/renameat/unlinkat work, slots are reused.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include "reactor/reactor.hpp"
#include "reactor/uring.hpp"

namespace rkv::reactor {
namespace {

using namespace std::chrono_literals;

template <typename Pred>
bool run_until(Reactor& r, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) r.run_once(100ms);
  return done();
}

TEST(Uring, WriteThenSyncThroughTheReactor) {
  Reactor r;
  char tmpl[] = "/tmp/rkv-uring-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  {
    Uring u(r);
    UniqueFd fd(::open((dir + "/f").c_str(), O_WRONLY | O_CREAT, 0644));
    ASSERT_TRUE(fd);
    std::string a = "hello ", b = "world";
    iovec iov[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
    int wres = 1, sres = 1;
    ASSERT_EQ(u.writev_then_sync(fd.get(), iov, 0, true, [&](int res) { wres = res; }, [&](int res) { sres = res; }), 0);
    EXPECT_EQ(wres, 1) << "callbacks never run inline";
    EXPECT_EQ(u.in_flight(), 2u);
    ASSERT_TRUE(run_until(r, [&] { return sres != 1; }));
    EXPECT_EQ(wres, 11);
    EXPECT_EQ(sres, 0);
    EXPECT_EQ(u.in_flight(), 0u);
    std::ifstream in(dir + "/f");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "hello world");

    int ren = 1, unl = 1, op = 1;
    ASSERT_EQ(u.renameat(AT_FDCWD, dir + "/f", dir + "/g", [&](int res) { ren = res; }), 0);
    ASSERT_TRUE(run_until(r, [&] { return ren != 1; }));
    EXPECT_EQ(ren, 0);
    ASSERT_EQ(u.openat(AT_FDCWD, dir + "/g", O_RDONLY | O_CLOEXEC, 0, [&](int res) { op = res; }), 0);
    ASSERT_TRUE(run_until(r, [&] { return op != 1; }));
    EXPECT_GE(op, 0);
    if (op >= 0) ::close(op);
    ASSERT_EQ(u.unlinkat(AT_FDCWD, dir + "/g", [&](int res) { unl = res; }), 0);
    ASSERT_TRUE(run_until(r, [&] { return unl != 1; }));
    EXPECT_EQ(unl, 0);
  }
  std::filesystem::remove_all(dir);
}

TEST(Uring, FailedWriteCancelsTheLinkedSync) {
  Reactor r;
  Uring u(r);
  UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(full);
  std::string a(100, 'x');
  iovec iov{a.data(), a.size()};
  int wres = 1, sres = 1;
  ASSERT_EQ(u.writev_then_sync(full.get(), {&iov, 1}, 0, true, [&](int res) { wres = res; }, [&](int res) { sres = res; }), 0);
  ASSERT_TRUE(run_until(r, [&] { return sres != 1; }));
  EXPECT_EQ(wres, -ENOSPC);
  EXPECT_EQ(sres, -ECANCELED);
}

TEST(Uring, SlotsAreReusedAndEveryCallbackRunsOnce) {
  Reactor r;
  Uring u(r, 4);  // 4 SQEs, 8 CQEs: 8 ops force an early submit, never overflow the CQ
  UniqueFd devnull(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(devnull);
  std::string a(10, 'x');
  iovec iov{a.data(), a.size()};
  int done = 0;
  for (int round = 0; round < 3; ++round) {
    int ran = 0;
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(u.writev(devnull.get(), {&iov, 1}, 0, [&](int res) {
        EXPECT_EQ(res, 10);
        ++ran;
      }), 0);
    }
    EXPECT_EQ(u.in_flight(), 8u);
    ASSERT_TRUE(run_until(r, [&] { return ran == 8; }));
    EXPECT_EQ(u.in_flight(), 0u);
    done += ran;
  }
  EXPECT_EQ(done, 24);
}

TEST(Uring, DestroyedWithWorkInFlightRunsNoCallback) {
  Reactor r;
  bool ran = false;
  {
    Uring u(r);
    UniqueFd devnull(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    std::string a(10, 'x');
    iovec iov{a.data(), a.size()};
    ASSERT_EQ(u.writev(devnull.get(), {&iov, 1}, 0, [&](int) { ran = true; }), 0);
  }  // waits for the kernel, drops the callback
  r.run_once(0ms);
  EXPECT_FALSE(ran);
  EXPECT_EQ(r.watch_count(), 0u);
}

}  // namespace
}  // namespace rkv::reactor
