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
#include "reactor/slot_table.hpp"

namespace rkv::reactor {

// Named, not anonymous: Uring::State (external linkage) holds
// these, which GCC refuses (-Wsubobject-linkage) once the file is part of a
// unity build.
namespace uring_detail {

// One submitted operation, kept in the SlotTable until its completion is
// taken. The kernel gets pointers into the stored Op (iov, path, path2),
// never into a temporary, so they stay valid until the completion arrives.
struct Op {
  Uring::Callback cb;
  std::vector<iovec> iov;
  std::string path;
  std::string path2;
};

}  // namespace uring_detail
using uring_detail::Op;

struct Uring::State {
  io_uring ring{};
  bool ring_ok = false;
  EventFd efd;
  Registration watch;
  // Every operation from its submitting call until its completion is taken
  // (or its submission failed): SQE user_data is the SlotKey's pack(), so a
  // completion for an erased (reused) slot is stale. live() is what
  // in_flight() reports.
  SlotTable<Op> ops;

  ~State() {
    watch.reset();
    if (!ring_ok) return;
    // Wait (bounded) for what the kernel still works on: its buffers belong to
    // owners that are going away. Callbacks are not run.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ops.live() > 0 && std::chrono::steady_clock::now() < deadline) {
      __kernel_timespec ts{0, 100'000'000};
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) == 0 && cqe != nullptr) {
        take(cqe->user_data);  // the callback is destroyed, not run
        io_uring_cqe_seen(&ring, cqe);
      }
    }
    if (ops.live() > 0) spdlog::error("uring: {} operations still in flight at destruction", ops.live());
    io_uring_queue_exit(&ring);
  }

  // Removes the op for this user_data and hands back its callback; nullopt
  // if the key is stale. Erasing frees the op's iovec array and path strings.
  std::optional<Callback> take(std::uint64_t user_data) noexcept {
    const SlotKey key = SlotKey::unpack(user_data);
    Op* op = ops.find(key);
    if (op == nullptr) return std::nullopt;
    Callback cb = std::move(op->cb);
    ops.erase(key);
    return cb;
  }

  io_uring_sqe* sqe() noexcept {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    if (s == nullptr) {  // full: push what is queued, then retry once
      (void)io_uring_submit(&ring);
      s = io_uring_get_sqe(&ring);
    }
    return s;
  }

  // A failed submit leaves prepared SQEs in the ring (liburing published
  // the tail before io_uring_enter failed; the kernel reads them at the next
  // enter), so an op may not be erased while its SQE still points at its
  // iovecs and paths: turn the SQE into a no-op with key 0 (never a live
  // slot) first. It completes later and is dropped as stale.
  static void neutralize(io_uring_sqe* s) noexcept {
    io_uring_prep_nop(s);
    io_uring_sqe_set_data64(s, 0);
  }

  int submit() noexcept {
    for (;;) {
      const int rc = io_uring_submit(&ring);
      if (rc >= 0) return 0;
      if (rc == -EINTR) continue;
      return rc;
    }
  }

  // One unlinked operation: stores `op` (throws std::bad_alloc like any
  // allocation here, before the ring is touched), takes an SQE, lets `prep`
  // fill it from the stored op, submits. 0, or -errno with the op erased
  // (its callback never runs).
  template <class Prep>
  int submit_one(Op op, Prep prep) {
    const SlotKey key = ops.insert(std::move(op));
    io_uring_sqe* s = sqe();
    if (s == nullptr) {
      ops.erase(key);
      return -EBUSY;
    }
    prep(s, *ops.find(key));
    io_uring_sqe_set_data64(s, key.pack());
    if (const int rc = submit(); rc < 0) {
      neutralize(s);
      ops.erase(key);
      return rc;
    }
    return 0;
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

std::size_t Uring::in_flight() const noexcept { return state_ ? state_->ops.live() : 0; }

bool Uring::wait_idle(std::chrono::milliseconds timeout) {
  State& s = *state_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (s.ops.live() > 0 && std::chrono::steady_clock::now() < deadline) {
    __kernel_timespec ts{0, 50'000'000};
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&s.ring, &cqe, &ts) == 0 && cqe != nullptr) s.on_ready();
  }
  return s.ops.live() == 0;
}

int Uring::writev(int fd, std::span<const iovec> iov, std::uint64_t offset, Callback cb) {
  return state_->submit_one(Op{std::move(cb), {iov.begin(), iov.end()}, {}, {}}, [&](io_uring_sqe* sqe, Op& op) {
    io_uring_prep_writev(sqe, fd, op.iov.data(), static_cast<unsigned>(op.iov.size()), offset);
  });
}

int Uring::writev_then_sync(int fd, std::span<const iovec> iov, std::uint64_t offset, bool datasync,
                            Callback on_write, Callback on_sync) {
  State& s = *state_;
  if (io_uring_sq_space_left(&s.ring) < 2) (void)s.submit();
  if (io_uring_sq_space_left(&s.ring) < 2) return -EBUSY;
  // Both ops are stored before the ring is touched, so an allocation failure
  // leaves no half-prepared SQE behind.
  const SlotKey wk = s.ops.insert(Op{std::move(on_write), {iov.begin(), iov.end()}, {}, {}});
  SlotKey fk;
  try {
    fk = s.ops.insert(Op{std::move(on_sync), {}, {}, {}});
  } catch (...) {
    s.ops.erase(wk);
    throw;
  }
  const Op& wop = *s.ops.find(wk);
  io_uring_sqe* w = io_uring_get_sqe(&s.ring);
  io_uring_prep_writev(w, fd, wop.iov.data(), static_cast<unsigned>(wop.iov.size()), offset);
  io_uring_sqe_set_data64(w, wk.pack());
  io_uring_sqe_set_flags(w, IOSQE_IO_LINK);  // a failed or short write cancels the sync
  io_uring_sqe* f = io_uring_get_sqe(&s.ring);
  io_uring_prep_fsync(f, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
  io_uring_sqe_set_data64(f, fk.pack());
  if (const int rc = s.submit(); rc < 0) {
    State::neutralize(w);
    State::neutralize(f);
    s.ops.erase(wk);
    s.ops.erase(fk);
    return rc;
  }
  return 0;
}

int Uring::fsync(int fd, bool datasync, Callback cb) {
  return state_->submit_one(Op{std::move(cb), {}, {}, {}}, [&](io_uring_sqe* sqe, Op&) {
    io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
  });
}

int Uring::openat(int dirfd, const std::string& path, int flags, mode_t mode, Callback cb) {
  return state_->submit_one(Op{std::move(cb), {}, path, {}}, [&](io_uring_sqe* sqe, Op& op) {
    io_uring_prep_openat(sqe, dirfd, op.path.c_str(), flags, mode);
  });
}

int Uring::renameat(int dirfd, const std::string& from, const std::string& to, Callback cb) {
  return state_->submit_one(Op{std::move(cb), {}, from, to}, [&](io_uring_sqe* sqe, Op& op) {
    io_uring_prep_renameat(sqe, dirfd, op.path.c_str(), dirfd, op.path2.c_str(), 0);
  });
}

int Uring::unlinkat(int dirfd, const std::string& path, Callback cb) {
  return state_->submit_one(Op{std::move(cb), {}, path, {}}, [&](io_uring_sqe* sqe, Op& op) {
    io_uring_prep_unlinkat(sqe, dirfd, op.path.c_str(), 0);
  });
}

}  // namespace rkv::reactor
