#pragma once
// Uring: a move-only RAII io_uring, the only liburing caller in the project.
//
// The ring's completions are signalled through an eventfd that the
// constructor registers with the Reactor (a reactor::Registration, like any
// other source); the destructor unregisters it. Every operation carries a
// callback, kept in a SlotTable (slot_table.hpp): the SQE's user_data is the
// SlotKey's pack() (slot + generation), never a pointer, and a completion
// whose slot was reused is dropped.
// Callbacks run on the reactor thread from the eventfd's readiness, never
// inline in the submitting call, so an owner may submit from a callback.
//
// Everything an operation needs until it completes (the iovec array, path
// strings) is copied into its slot and freed when the completion is taken;
// the memory the iovecs point at is the caller's and must stay valid until the
// callback ran.
//
// Destruction waits (bounded, 10 s) for operations still in flight, without
// running their callbacks, so the kernel never touches memory after its owner
// is gone. Thread: the reactor's.

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "reactor/reactor.hpp"

namespace rkv::reactor {

class Uring {
 public:
  // res: the CQE's result (bytes for a write, 0 for fsync/rename/unlink, the
  // new fd for openat, -errno on failure; -ECANCELED for an op whose linked
  // predecessor failed or was short).
  using Callback = std::function<void(int res)>;

  // Throws std::system_error if io_uring_queue_init, the eventfd or its
  // registration fails.
  Uring(Reactor& reactor, unsigned entries = 256);
  Uring(const Uring&) = delete;
  Uring& operator=(const Uring&) = delete;
  Uring(Uring&&) noexcept;
  Uring& operator=(Uring&&) noexcept;
  ~Uring();

  // Each returns 0 when the operation was submitted, -errno otherwise (the
  // callback then never runs).
  int writev(int fd, std::span<const iovec> iov, std::uint64_t offset, Callback cb);
  // writev, then (linked: only if the write wrote everything) fdatasync/fsync.
  // on_write gets the write's result, on_sync the sync's.
  int writev_then_sync(int fd, std::span<const iovec> iov, std::uint64_t offset, bool datasync, Callback on_write,
                       Callback on_sync);
  int fsync(int fd, bool datasync, Callback cb);
  int openat(int dirfd, const std::string& path, int flags, mode_t mode, Callback cb);
  int renameat(int dirfd, const std::string& from, const std::string& to, Callback cb);
  int unlinkat(int dirfd, const std::string& path, Callback cb);

  // Operations submitted whose completion has not been handled.
  [[nodiscard]] std::size_t in_flight() const noexcept;
  // Blocks until nothing is in flight (running callbacks) or `timeout` passed;
  // for shutdown paths only. Returns true if nothing is left in flight.
  bool wait_idle(std::chrono::milliseconds timeout);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace rkv::reactor
