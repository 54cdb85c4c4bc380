// Uring: see uring.hpp.
#include "reactor/uring.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "reactor/event_fd.hpp"

namespace rkv::reactor {

namespace {

struct Op {
  std::uint32_t generation = 1;
  bool in_use = false;
  Uring::Callback cb;
  std::vector<iovec> iov;
  std::string path;
  std::string path2;
};

}  // namespace

struct Uring::State {
  io_uring ring{};
  bool ring_ok = false;
  EventFd efd;
  Registration watch;
  std::vector<Op> ops;
  std::vector<std::uint32_t> free;
  std::size_t in_flight = 0;

  ~State() {
    watch.reset();
    if (!ring_ok) return;
    // Wait (bounded) for what the kernel still works on: its buffers belong to
    // owners that are going away. Callbacks are not run.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
      __kernel_timespec ts{0, 100'000'000};
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) == 0 && cqe != nullptr) {
        take(cqe->user_data);
        io_uring_cqe_seen(&ring, cqe);
      }
    }
    if (in_flight > 0) spdlog::error("uring: {} operations still in flight at destruction", in_flight);
    io_uring_queue_exit(&ring);
  }

  // The slot's callback for this user_data, or nullopt if stale.
  std::optional<Callback> take(std::uint64_t user_data) noexcept {
    const auto slot = static_cast<std::uint32_t>(user_data);
    const auto gen = static_cast<std::uint32_t>(user_data >> 32);
    if (slot >= ops.size() || !ops[slot].in_use || ops[slot].generation != gen) return std::nullopt;
    Op& op = ops[slot];
    Callback cb = std::move(op.cb);
    op.cb = nullptr;
    op.in_use = false;
    op.iov.clear();
    op.path.clear();
    op.path2.clear();
    op.generation = op.generation + 1 == 0 ? 1 : op.generation + 1;
    free.push_back(slot);
    --in_flight;
    return cb;
  }

  std::uint32_t alloc(Callback cb) {
    std::uint32_t slot;
    if (!free.empty()) {
      slot = free.back();
      free.pop_back();
    } else {
      ops.emplace_back();
      slot = static_cast<std::uint32_t>(ops.size() - 1);
    }
    ops[slot].in_use = true;
    ops[slot].cb = std::move(cb);
    ++in_flight;
    return slot;
  }
  // Undo alloc() for an op that was never submitted.
  void unalloc(std::uint32_t slot) noexcept { (void)take(user_data(slot)); }
  std::uint64_t user_data(std::uint32_t slot) const noexcept {
    return (std::uint64_t{ops[slot].generation} << 32) | slot;
  }

  io_uring_sqe* sqe() noexcept {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    if (s == nullptr) {  // full: push what is queued, then retry once
      (void)io_uring_submit(&ring);
      s = io_uring_get_sqe(&ring);
    }
    return s;
  }

  int submit() noexcept {
    for (;;) {
      const int rc = io_uring_submit(&ring);
      if (rc >= 0) return 0;
      if (rc == -EINTR) continue;
      return rc;
    }
  }

  void on_ready() noexcept {
    try {
      (void)efd.consume();
    } catch (const std::exception& e) {
      spdlog::error("uring: eventfd read failed: {}", e.what());
    }
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_peek_cqe(&ring, &cqe) != 0 || cqe == nullptr) return;
      const std::uint64_t ud = cqe->user_data;
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      auto cb = take(ud);
      if (!cb) {
        SPDLOG_DEBUG("uring: stale completion {:#x} dropped", ud);
        continue;
      }
      if (*cb) (*cb)(res);
    }
  }
};

Uring::Uring(Reactor& reactor, unsigned entries) : state_(std::make_unique<State>()) {
  State& s = *state_;
  if (const int rc = io_uring_queue_init(entries, &s.ring, 0); rc < 0) {
    throw std::system_error(-rc, std::system_category(), "io_uring_queue_init");
  }
  s.ring_ok = true;
  if (const int rc = io_uring_register_eventfd(&s.ring, s.efd.fd()); rc < 0) {
    throw std::system_error(-rc, std::system_category(), "io_uring_register_eventfd");
  }
  State* raw = &s;
  s.watch = reactor.watch(s.efd.fd(), EPOLLIN, [raw](std::uint32_t) { raw->on_ready(); });
}

Uring::Uring(Uring&&) noexcept = default;
Uring& Uring::operator=(Uring&&) noexcept = default;
Uring::~Uring() = default;

std::size_t Uring::in_flight() const noexcept { return state_ ? state_->in_flight : 0; }

bool Uring::wait_idle(std::chrono::milliseconds timeout) {
  State& s = *state_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (s.in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    __kernel_timespec ts{0, 50'000'000};
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&s.ring, &cqe, &ts) == 0 && cqe != nullptr) s.on_ready();
  }
  return s.in_flight == 0;
}

int Uring::writev(int fd, std::span<const iovec> iov, std::uint64_t offset, Callback cb) {
  State& s = *state_;
  io_uring_sqe* sqe = s.sqe();
  if (sqe == nullptr) return -EBUSY;
  const std::uint32_t slot = s.alloc(std::move(cb));
  s.ops[slot].iov.assign(iov.begin(), iov.end());
  io_uring_prep_writev(sqe, fd, s.ops[slot].iov.data(), static_cast<unsigned>(iov.size()), offset);
  io_uring_sqe_set_data64(sqe, s.user_data(slot));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(slot);
    return rc;
  }
  return 0;
}

int Uring::writev_then_sync(int fd, std::span<const iovec> iov, std::uint64_t offset, bool datasync,
                            Callback on_write, Callback on_sync) {
  State& s = *state_;
  if (io_uring_sq_space_left(&s.ring) < 2) (void)s.submit();
  if (io_uring_sq_space_left(&s.ring) < 2) return -EBUSY;
  io_uring_sqe* w = io_uring_get_sqe(&s.ring);
  const std::uint32_t ws = s.alloc(std::move(on_write));
  s.ops[ws].iov.assign(iov.begin(), iov.end());
  io_uring_prep_writev(w, fd, s.ops[ws].iov.data(), static_cast<unsigned>(iov.size()), offset);
  io_uring_sqe_set_data64(w, s.user_data(ws));
  io_uring_sqe_set_flags(w, IOSQE_IO_LINK);  // a failed or short write cancels the sync
  io_uring_sqe* f = io_uring_get_sqe(&s.ring);
  const std::uint32_t fs = s.alloc(std::move(on_sync));
  io_uring_prep_fsync(f, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
  io_uring_sqe_set_data64(f, s.user_data(fs));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(ws);
    s.unalloc(fs);
    return rc;
  }
  return 0;
}

int Uring::fsync(int fd, bool datasync, Callback cb) {
  State& s = *state_;
  io_uring_sqe* sqe = s.sqe();
  if (sqe == nullptr) return -EBUSY;
  const std::uint32_t slot = s.alloc(std::move(cb));
  io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
  io_uring_sqe_set_data64(sqe, s.user_data(slot));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(slot);
    return rc;
  }
  return 0;
}

int Uring::openat(int dirfd, const std::string& path, int flags, mode_t mode, Callback cb) {
  State& s = *state_;
  io_uring_sqe* sqe = s.sqe();
  if (sqe == nullptr) return -EBUSY;
  const std::uint32_t slot = s.alloc(std::move(cb));
  s.ops[slot].path = path;
  io_uring_prep_openat(sqe, dirfd, s.ops[slot].path.c_str(), flags, mode);
  io_uring_sqe_set_data64(sqe, s.user_data(slot));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(slot);
    return rc;
  }
  return 0;
}

int Uring::renameat(int dirfd, const std::string& from, const std::string& to, Callback cb) {
  State& s = *state_;
  io_uring_sqe* sqe = s.sqe();
  if (sqe == nullptr) return -EBUSY;
  const std::uint32_t slot = s.alloc(std::move(cb));
  s.ops[slot].path = from;
  s.ops[slot].path2 = to;
  io_uring_prep_renameat(sqe, dirfd, s.ops[slot].path.c_str(), dirfd, s.ops[slot].path2.c_str(), 0);
  io_uring_sqe_set_data64(sqe, s.user_data(slot));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(slot);
    return rc;
  }
  return 0;
}

int Uring::unlinkat(int dirfd, const std::string& path, Callback cb) {
  State& s = *state_;
  io_uring_sqe* sqe = s.sqe();
  if (sqe == nullptr) return -EBUSY;
  const std::uint32_t slot = s.alloc(std::move(cb));
  s.ops[slot].path = path;
  io_uring_prep_unlinkat(sqe, dirfd, s.ops[slot].path.c_str(), 0);
  io_uring_sqe_set_data64(sqe, s.user_data(slot));
  if (const int rc = s.submit(); rc < 0) {
    s.unalloc(slot);
    return rc;
  }
  return 0;
}

}  // namespace rkv::reactor
