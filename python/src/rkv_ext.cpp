// rkv._rkv: the Python extension under the `rkv` package (python/rkv/),
// a thin layer over the installed C API (kv.h) and nothing else: no C++ type
// of the client crosses into it, so it behaves as any program outside the
// tree that links librkv.
//
// Owns: one kv.h handle per _Client; the Python buffers of async operations
// in flight (a value being SET, a buffer being filled), keyed by the
// operation's tag, released when its completion is taken; completions that a
// batch call (set_many/get_many) took from kv_poll for someone else (the
// asyncio side), until _poll returns them.
//
// Zero copy: a key or value is read from the caller's object through the
// buffer protocol (no bytes object is made); a large SET is read by the
// server straight from it, with the GIL released while it is in flight. A
// GET returns a memoryview over a read-only _Value, which owns what kv_get_bin
// returned (for a large value the registered landing buffer it arrived in)
// and kv_release's it when the last view of it is released. get_into gives
// the caller's writable buffer to kv_get_into (RDMA straight into it).
//
// Thread: a handle is used from the thread that opened it (kv.h); every
// method checks it and raises rkv.Error from another thread. The GIL is
// released around every call that waits for the network; Python objects are
// touched only with it held.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/client/errors.hpp"
#include "kv/client/kv.h"

namespace py = pybind11;

namespace {

// ---- exceptions ------------------------------------------------------------

struct Errors {
  PyObject* base = nullptr;        // rkv.Error
  PyObject* connection = nullptr;  // rkv.ConnectionError
  PyObject* too_large = nullptr;   // rkv.TooLargeError (also ValueError)
  PyObject* invalid = nullptr;     // rkv.InvalidArgument (also ValueError)
  PyObject* server = nullptr;      // rkv.ServerError
  PyObject* no_memory = nullptr;   // rkv.OutOfMemory (also MemoryError)
  PyObject* no_handler = nullptr;  // rkv.NoHandlerError (EOPNOTSUPP: call of an opcode the server lacks)
  PyObject* handler_failed = nullptr;  // rkv.HandlerFailedError (EREMOTEIO; a ServerError)
  PyObject* refused = nullptr;     // rkv.RefusedError (EDOM; also ValueError)
};
Errors g_err;

// The class for a C API code: its row of the one error table
// (kv/client/errors.hpp); rkv.Error for a code the table lacks.
PyObject* error_type(int code) {
  using rkv::kv::client::PyError;
  const rkv::kv::client::ErrnoInfo* row = rkv::kv::client::errno_info(code);
  switch (row != nullptr ? row->py : PyError::base) {
    case PyError::none:
    case PyError::base: return g_err.base;
    case PyError::connection: return g_err.connection;
    case PyError::too_large: return g_err.too_large;
    case PyError::invalid: return g_err.invalid;
    case PyError::server: return g_err.server;
    case PyError::no_memory: return g_err.no_memory;
    case PyError::no_handler: return g_err.no_handler;
    case PyError::handler_failed: return g_err.handler_failed;
    case PyError::refused: return g_err.refused;
  }
  return g_err.base;
}

// An exception instance for an errno from the C API, with .errno and .message.
py::object make_error(int code, const std::string& msg) {
  py::handle type(error_type(code));
  py::object e = type(py::str(msg));
  e.attr("errno") = code;
  e.attr("message") = py::str(msg);
  return e;
}

[[noreturn]] void raise_error(int code, const std::string& msg) {
  py::object e = make_error(code, msg);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
  throw py::error_already_set();
}

// ---- values handed to Python -------------------------------------------------

// What kv_get_bin or kv_poll returned: read-only through the buffer protocol;
// kv_release'd with the last reference (any thread may release it).
struct Value {
  void* ptr = nullptr;
  std::size_t len = 0;
  Value(void* p, std::size_t n) noexcept : ptr(p), len(n) {}
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value() { kv_release(static_cast<char*>(ptr)); }
};

py::object as_memoryview(void* ptr, std::size_t len) {
  auto owner = py::cast(std::make_unique<Value>(ptr, len));
  return py::memoryview(owner);
}

// A time to live in ms: None or an int >= 0 (0: none). A bool, a float or a
// negative int: rkv.InvalidArgument (the C API refuses one over its largest).
std::uint64_t ttl_arg(py::handle ttl, const char* name) {
  if (ttl.is_none()) return 0;
  if (!PyLong_Check(ttl.ptr()) || PyBool_Check(ttl.ptr())) {
    raise_error(EINVAL, std::string(name) + " must be an int (milliseconds) or None");
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(ttl.ptr(), &overflow);
  if (overflow != 0 || v < 0) {
    raise_error(EINVAL, std::string(name) + " must be 0 .. 3153600000000 (about 100 years)");
  }
  return static_cast<std::uint64_t>(v);
}

// ---- buffers taken from Python objects ---------------------------------------

// A key or value: a str (its UTF-8 bytes) or any object with the buffer
// protocol (C-contiguous). Released with the GIL held.
class Bytes {
 public:
  Bytes() = default;
  Bytes(py::handle obj, bool writable, const char* what) {
    if (!writable && PyUnicode_Check(obj.ptr())) {
      Py_ssize_t n = 0;
      const char* p = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
      if (p == nullptr) throw py::error_already_set();
      str_ = py::reinterpret_borrow<py::object>(obj);
      data_ = const_cast<char*>(p);
      len_ = static_cast<std::size_t>(n);
      return;
    }
    if (PyObject_GetBuffer(obj.ptr(), &view_, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      const std::string type = py::str(py::type::handle_of(obj).attr("__name__"));
      throw py::type_error(std::string(what) + " must be " +
                           (writable ? "a writable C-contiguous buffer (bytearray, numpy array, ...)"
                                     : "bytes-like (bytes, bytearray, memoryview, numpy array) or str") +
                           ", not " + type);
    }
    held_ = true;
    data_ = view_.buf;
    len_ = static_cast<std::size_t>(view_.len);
  }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  Bytes(Bytes&& o) noexcept : view_(o.view_), held_(o.held_), str_(std::move(o.str_)), data_(o.data_), len_(o.len_) {
    o.held_ = false;
  }
  Bytes& operator=(Bytes&& o) noexcept {
    if (this != &o) {
      reset();
      view_ = o.view_;
      held_ = o.held_;
      str_ = std::move(o.str_);
      data_ = o.data_;
      len_ = o.len_;
      o.held_ = false;
    }
    return *this;
  }
  ~Bytes() { reset(); }
  void reset() noexcept {
    if (held_) PyBuffer_Release(&view_);
    held_ = false;
  }
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return len_; }

 private:
  Py_buffer view_{};
  bool held_ = false;
  py::object str_;
  void* data_ = nullptr;
  std::size_t len_ = 0;
};

// ---- the client --------------------------------------------------------------

// What an async operation's completion turns into (completion()). incr,
// cas and call are sync only (kv.h has no async form of them).
enum class AsyncKind : std::uint8_t { set, get, del, get_into };

class Handle {
 public:
  Handle(const std::string& servers, py::object get_mode, py::object poll_us) : owner_(std::this_thread::get_id()) {
    std::string mode = get_mode.is_none() ? std::string() : py::cast<std::string>(get_mode);
    std::string poll;
    if (!poll_us.is_none()) {
      if (py::isinstance<py::str>(poll_us)) {
        poll = py::cast<std::string>(poll_us);
      } else {
        const long long v = py::cast<long long>(poll_us);
        if (v < 0) raise_error(EINVAL, "rkv.Client: poll_us must be 0 or more, or \"busy\"");
        poll = std::to_string(v);
      }
    }
    std::string name = servers;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_open_opts(name.data(), mode.c_str(), poll.c_str(), &h_);
    }
    if (rc != 0) raise_error(rc, kv_last_error(nullptr));
    server_ = servers;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (h_ == nullptr) return;
    if (std::this_thread::get_id() != owner_) {
      // kv_close must run on the owner thread: leak the handle rather than break it.
      PyErr_WarnEx(PyExc_ResourceWarning, "rkv.Client collected on another thread without close(): leaked", 1);
      return;
    }
    close();
  }

  void close() {
    check_thread();
    if (h_ == nullptr) return;
    kv_close(h_);  // ends every transfer: nothing reads or writes the buffers below any more
    h_ = nullptr;
    for (auto& c : stash_) kv_release(static_cast<char*>(c.value));
    stash_.clear();
    pending_.clear();  // releases the Python buffers (GIL held)
  }
  [[nodiscard]] bool closed() const noexcept { return h_ == nullptr; }
  [[nodiscard]] const std::string& server() const noexcept { return server_; }

  // ---- sync ----
  void set(py::handle key, py::handle value, py::object ttl_ms) {
    void* h = live();
    const Bytes k(key, false, "key");
    const Bytes v(value, false, "value");
    const std::uint64_t ttl = ttl_arg(ttl_ms, "ttl_ms");
    int rc = 0;
    {
      py::gil_scoped_release nogil;  // the server READs a large value straight from v
      rc = ttl != 0 ? kv_set_ttl(h, k.data(), k.size(), v.data(), v.size(), ttl)
                    : kv_set_bin(h, k.data(), k.size(), v.data(), v.size());
    }
    if (rc != 0) raise_error(rc, kv_last_error(h));
  }

  bool expire(py::handle key, py::object ttl_ms) {
    void* h = live();
    const Bytes k(key, false, "key");
    const std::uint64_t ttl = ttl_arg(ttl_ms, "ttl_ms");
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_expire(h, k.data(), k.size(), ttl);
    }
    if (rc == ENOENT) return false;
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return true;
  }

  py::object ttl(py::handle key) {
    void* h = live();
    const Bytes k(key, false, "key");
    std::int64_t left = -1;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_ttl(h, k.data(), k.size(), &left);
    }
    if (rc == ENOENT) return py::none();
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return py::int_(left);
  }

  py::object get(py::handle key) {
    void* h = live();
    const Bytes k(key, false, "key");
    void* value = nullptr;
    std::size_t len = 0;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_get_bin(h, k.data(), k.size(), &value, &len);
    }
    if (rc == ENOENT) return py::none();
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return as_memoryview(value, len);
  }

  py::object get_into(py::handle key, py::handle buffer) {
    void* h = live();
    const Bytes k(key, false, "key");
    const Bytes b(buffer, true, "buffer");
    std::size_t len = 0;
    int rc = 0;
    {
      py::gil_scoped_release nogil;  // the value is RDMA-written or read into b
      rc = kv_get_into(h, k.data(), k.size(), b.data(), b.size(), &len);
    }
    if (rc == ENOENT) return py::none();
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return py::int_(len);
  }

  bool del(py::handle key) {
    void* h = live();
    const Bytes k(key, false, "key");
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_del(h, k.data(), k.size());
    }
    if (rc == ENOENT) return false;
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return true;
  }

  // ---- user-defined operations (kv_incr, kv_cas, kv_call) ----
  long long incr(py::handle key, long long delta) {
    void* h = live();
    const Bytes k(key, false, "key");
    std::int64_t result = 0;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_incr(h, k.data(), k.size(), static_cast<std::int64_t>(delta), &result);
    }
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return static_cast<long long>(result);
  }

  bool cas(py::handle key, py::handle expected, py::handle value) {
    void* h = live();
    const Bytes k(key, false, "key");
    const Bytes e(expected, false, "expected");
    const Bytes v(value, false, "value");
    int swapped = 0;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = kv_cas(h, k.data(), k.size(), e.data(), e.size(), v.data(), v.size(), &swapped);
    }
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return swapped != 0;
  }

  // The reply as a read-only memoryview (a large reply is a view of the
  // memory it was RDMA-read into, like get()'s values).
  py::object call(int op, py::handle request) {
    if (op < 0 || op > 0xFFFF) raise_error(EINVAL, "call: op must be 0..65535, not " + std::to_string(op));
    void* h = live();
    const Bytes r(request, false, "request");
    void* reply = nullptr;
    std::size_t reply_len = 0;
    int rc = 0;
    {
      py::gil_scoped_release nogil;  // a large request is RDMA-read from r
      rc = kv_call(h, static_cast<std::uint16_t>(op), r.data(), r.size(), &reply, &reply_len);
    }
    if (rc != 0) raise_error(rc, kv_last_error(h));
    return as_memoryview(reply, reply_len);
  }

  // One server: its counters. Several (kv_stats: "# shard ID up|down|gone"
  // and then that server's lines): {ID: counters, or None while it is down
  // or after it left the cluster}.
  py::dict stats() {
    const std::string text = text_call(&kv_stats);
    constexpr std::string_view kShard = "# shard ";
    if (!text.starts_with(kShard)) return parse_lines(text);
    py::dict per_server;
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string head = text.substr(at, end - at);  // "# shard ID up|down"
      std::size_t next = text.find("\n# shard ", end);  // the next server's line
      next = next == std::string::npos ? text.size() : next + 1;
      const std::size_t sp = head.rfind(' ');
      const std::string id = head.substr(kShard.size(), sp > kShard.size() ? sp - kShard.size() : 0);
      if (head.ends_with(" up")) {
        const std::size_t body = std::min(end + 1, next);
        per_server[py::str(id)] = parse_lines(text.substr(body, next - body));
      } else {
        per_server[py::str(id)] = py::none();
      }
      at = next;
    }
    return per_server;
  }
  py::dict counters() { return parse_lines(text_call(&kv_counters)); }

  // ---- pipelined batches ----
  // Every operation of the batch is submitted (up to KV_MAX_PENDING at once,
  // 16 on the wire) and completed before this returns; one error raises
  // (after all completed), naming how many failed.
  void set_many(py::handle items) {
    void* h = live();
    py::object seq = py::reinterpret_borrow<py::object>(items);
    if (py::hasattr(items, "items")) seq = items.attr("items")();
    std::vector<Bytes> keys;
    std::vector<Bytes> values;
    for (py::handle item : py::iter(seq)) {
      const py::tuple pair = py::cast<py::tuple>(item);
      if (pair.size() != 2) throw py::value_error("set_many: items must be (key, value) pairs");
      keys.emplace_back(pair[0], false, "key");
      values.emplace_back(pair[1], false, "value");
    }
    std::vector<kv_completion> done(keys.size());
    const Batch b = run_batch(h, keys.size(), done, [&](std::size_t i, std::uint64_t tag) {
      return kv_set_async(h, keys[i].data(), keys[i].size(), values[i].data(), values[i].size(), tag);
    });
    raise_batch(b, "set_many");
  }

  py::list get_many(py::handle keys_in) {
    void* h = live();
    std::vector<Bytes> keys;
    for (py::handle k : py::iter(keys_in)) keys.emplace_back(k, false, "key");
    std::vector<kv_completion> done(keys.size());
    const Batch b = run_batch(h, keys.size(), done, [&](std::size_t i, std::uint64_t tag) {
      return kv_get_async(h, keys[i].data(), keys[i].size(), tag);
    });
    py::list out;
    for (auto& c : done) {  // every value is owned by a view (or released) before an error is raised
      if (c.status == 0 && c.value != nullptr) {
        void* v = c.value;
        c.value = nullptr;
        out.append(as_memoryview(v, c.value_len));
      } else {
        out.append(py::none());
      }
    }
    raise_batch(b, "get_many");
    return out;
  }

  // ---- async primitives (the asyncio layer in rkv/__init__.py) ----
  std::uint64_t submit_set(py::handle key, py::handle value) {
    void* h = live();
    Bytes k(key, false, "key");
    Bytes v(value, false, "value");
    return submit(AsyncKind::set, std::move(v), [&](std::uint64_t tag) {
      return kv_set_async(h, k.data(), k.size(), pending_.at(tag).buf.data(), pending_.at(tag).buf.size(), tag);
    });
  }
  std::uint64_t submit_get(py::handle key) {
    void* h = live();
    Bytes k(key, false, "key");
    return submit(AsyncKind::get, Bytes(), [&](std::uint64_t tag) { return kv_get_async(h, k.data(), k.size(), tag); });
  }
  std::uint64_t submit_get_into(py::handle key, py::handle buffer) {
    void* h = live();
    Bytes k(key, false, "key");
    Bytes b(buffer, true, "buffer");
    return submit(AsyncKind::get_into, std::move(b), [&](std::uint64_t tag) {
      return kv_get_into_async(h, k.data(), k.size(), pending_.at(tag).buf.data(), pending_.at(tag).buf.size(), tag);
    });
  }
  std::uint64_t submit_del(py::handle key) {
    void* h = live();
    Bytes k(key, false, "key");
    return submit(AsyncKind::del, Bytes(), [&](std::uint64_t tag) { return kv_del_async(h, k.data(), k.size(), tag); });
  }

  // Completions ready now, as (tag, error or None, result): get -> memoryview
  // or None, get_into -> int or None, delete -> bool, set -> None.
  py::list poll(int max) {
    void* h = live();
    if (max <= 0) max = 1;
    std::vector<kv_completion> got(static_cast<std::size_t>(max));
    std::size_t n = 0;
    while (n < got.size() && !stash_.empty()) {
      got[n++] = stash_.front();
      stash_.pop_front();
    }
    if (n < got.size()) {
      const int rc = kv_poll(h, got.data() + n, static_cast<int>(got.size() - n), 0);
      if (rc < 0) {
        for (std::size_t i = 0; i < n; ++i) stash_.push_front(got[n - 1 - i]);  // kept for the next call
        raise_error(-rc, kv_last_error(h));
      }
      n += static_cast<std::size_t>(rc);
    }
    py::list out;
    for (std::size_t i = 0; i < n; ++i) out.append(completion(h, got[i]));
    return out;
  }
  [[nodiscard]] int fileno() {
    void* h = live();
    return kv_fd(h);
  }
  [[nodiscard]] std::size_t in_flight() const noexcept { return pending_.size(); }

 private:
  struct Pending {
    AsyncKind kind = AsyncKind::get;
    Bytes buf;  // set: the value; get_into: the buffer being filled
  };
  struct Batch {
    std::size_t failed = 0;
    int first_code = 0;
    std::string first_msg;
  };

  void check_thread() const {
    if (std::this_thread::get_id() != owner_) {
      raise_error(0, "rkv.Client: used from a thread other than the one that opened it (one client per thread)");
    }
  }
  void* live() const {
    check_thread();
    if (h_ == nullptr) raise_error(ENOTCONN, "rkv.Client: the client is closed");
    return h_;
  }

  std::string text_call(int (*fn)(void*, char**)) {
    void* h = live();
    char* text = nullptr;
    int rc = 0;
    {
      py::gil_scoped_release nogil;
      rc = fn(h, &text);
    }
    if (rc != 0) raise_error(rc, kv_last_error(h));
    std::string s(text);
    kv_release(text);
    return s;
  }

  static py::dict parse_lines(const std::string& text) {
    py::dict d;
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      const std::size_t sp = line.find(' ');
      if (sp == std::string::npos || sp == 0) continue;
      const std::string name = line.substr(0, sp);
      const std::string val = line.substr(sp + 1);
      char* stop = nullptr;
      errno = 0;
      const unsigned long long n = std::strtoull(val.c_str(), &stop, 10);
      if (errno == 0 && stop != val.c_str() && *stop == '\0') {
        d[py::str(name)] = py::int_(n);
      } else {
        d[py::str(name)] = py::str(val);
      }
    }
    return d;
  }

  // Submits n operations (submit(i, tag)) and polls until each completed into
  // done[i], GIL released throughout. Completions of other tags (asyncio
  // operations) go to stash_ for _poll.
  template <typename Submit>
  Batch run_batch(void* h, std::size_t n, std::vector<kv_completion>& done, Submit submit) {
    Batch b;
    const std::uint64_t base = next_tag_;
    next_tag_ += n;
    py::gil_scoped_release nogil;
    std::vector<kv_completion> got(256);
    std::size_t next = 0;
    std::size_t left = n;
    auto take = [&](int timeout) {
      const int rc = kv_poll(h, got.data(), static_cast<int>(got.size()), timeout);
      if (rc < 0) return rc;
      for (int i = 0; i < rc; ++i) {
        const kv_completion& c = got[static_cast<std::size_t>(i)];
        if (c.tag >= base && c.tag < base + n) {
          done[c.tag - base] = c;
          --left;
        } else {
          stash_.push_back(c);
        }
      }
      return 0;
    };
    while (next < n) {
      const int rc = submit(next, base + next);
      if (rc == EAGAIN) {
        if (const int p = take(-1); p < 0) return fail_rest(b, -p, h, done, next, n, left);
        continue;
      }
      if (rc != 0) {
        done[next].status = rc;
        note(b, rc, kv_last_error(h));
        --left;
      }
      ++next;
    }
    while (left > 0) {
      if (const int p = take(-1); p < 0) return fail_rest(b, -p, h, done, n, n, left);
    }
    // Completions only: a refused submit (tag still 0; tags start at 1) was counted above.
    for (const auto& c : done) {
      if (c.tag != 0 && c.status != 0 && c.status != ENOENT) note(b, c.status, kv_last_error(h));
    }
    return b;
  }
  static void note(Batch& b, int code, const char* msg) {
    if (b.failed++ == 0) {
      b.first_code = code;
      b.first_msg = msg;
    }
  }
  // The event loop failed (kv_poll < 0): nothing more completes on this handle.
  static Batch fail_rest(Batch& b, int code, void* h, std::vector<kv_completion>& done, std::size_t from,
                         std::size_t n, std::size_t) {
    for (std::size_t i = from; i < n; ++i) done[i].status = code;
    note(b, code, kv_last_error(h));
    return b;
  }
  void raise_batch(const Batch& b, const char* what) {
    if (b.failed == 0) return;
    raise_error(b.first_code, std::string(what) + ": " + std::to_string(b.failed) + " operation(s) failed; the first: " +
                                  b.first_msg);
  }

  template <typename Fn>
  std::uint64_t submit(AsyncKind kind, Bytes buf, Fn fn) {
    void* h = h_;
    const std::uint64_t tag = next_tag_++;
    pending_.emplace(tag, Pending{kind, std::move(buf)});
    int rc = fn(tag);
    if (rc == EAGAIN) {
      // KV_MAX_PENDING submitted and not returned: take what completed (for
      // _poll) and wait for one if none has.
      int p = 0;
      {
        py::gil_scoped_release nogil;
        std::vector<kv_completion> got(256);
        p = kv_poll(h, got.data(), static_cast<int>(got.size()), -1);
        for (int i = 0; i < p; ++i) stash_.push_back(got[static_cast<std::size_t>(i)]);
      }
      rc = p < 0 ? -p : fn(tag);
    }
    if (rc != 0) {
      pending_.erase(tag);
      raise_error(rc, kv_last_error(h));
    }
    return tag;
  }

  py::tuple completion(void* h, kv_completion& c) {
    const auto it = pending_.find(c.tag);
    AsyncKind kind = AsyncKind::get;
    if (it != pending_.end()) {
      kind = it->second.kind;
      pending_.erase(it);  // the buffer is the caller's again
    }
    py::object result = py::none();
    py::object err = py::none();
    if (c.status != 0 && c.status != ENOENT) {
      kv_release(static_cast<char*>(c.value));
      err = make_error(c.status, kv_last_error(h));
    } else {
      switch (kind) {
        case AsyncKind::get:
          if (c.status == 0) result = as_memoryview(c.value, c.value_len);
          break;
        case AsyncKind::get_into:
          if (c.status == 0) result = py::int_(c.value_len);
          break;
        case AsyncKind::del: result = py::bool_(c.status == 0); break;
        case AsyncKind::set: break;
      }
    }
    return py::make_tuple(c.tag, err, result);
  }

  std::thread::id owner_;
  void* h_ = nullptr;
  std::string server_;
  std::uint64_t next_tag_ = 1;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::deque<kv_completion> stash_;
};

// A class of rkv's errors; its doc ends with the codes the error table gives it.
PyObject* new_error(py::module_& m, const char* name, rkv::kv::client::PyError cls, const char* doc,
                    PyObject* bases) {
  const std::string full = std::string("rkv.") + name;
  std::string text = doc;
  std::string codes;
  for (const auto& row : rkv::kv::client::kErrnoTable) {
    if (row.py == cls) codes += (codes.empty() ? "" : ", ") + std::string(row.name);
  }
  if (!codes.empty()) text += " Codes: " + codes + ".";
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), text.c_str(), bases, nullptr);
  if (t == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(t);
  return t;
}

}  // namespace

PYBIND11_MODULE(_rkv, m) {
  m.doc() = "The C extension under the rkv package (use `import rkv`).";
  using rkv::kv::client::PyError;
  g_err.base = new_error(m, "Error", PyError::base,
                         "Base of rkv's errors. .errno: the C API's errno code (kv.h); .message: its text.", nullptr);
  g_err.connection = new_error(m, "ConnectionError", PyError::connection,
                               "The connection could not be made, was closed or failed (ECONNRESET: during the "
                               "request); EHOSTDOWN: a client over several servers, the key's server is down "
                               "(reconnecting).",
                               g_err.base);
  {
    py::tuple bases = py::make_tuple(py::handle(g_err.base), py::handle(PyExc_ValueError));
    g_err.too_large = new_error(m, "TooLargeError", PyError::too_large,
                                "A key over 1024 bytes, a value over the server's limit, or (get_into) a value "
                                "longer than the buffer.",
                                bases.ptr());
    g_err.invalid =
        new_error(m, "InvalidArgument", PyError::invalid, "An empty key, a bad server name or option.", bases.ptr());
  }
  g_err.server = new_error(m, "ServerError", PyError::server,
                           "The server failed the request (internal, remote access or disk error).", g_err.base);
  {
    py::tuple bases = py::make_tuple(py::handle(g_err.base), py::handle(PyExc_MemoryError));
    g_err.no_memory = new_error(m, "OutOfMemory", PyError::no_memory, "Out of memory here or in the server's store.",
                                bases.ptr());
  }
  g_err.no_handler = new_error(m, "NoHandlerError", PyError::no_handler,
                               "The server has no handler for the call's opcode.", g_err.base);
  g_err.handler_failed = new_error(m, "HandlerFailedError", PyError::handler_failed,
                                   "The server's handler of the call failed (it logs why).", g_err.server);
  {
    py::tuple bases = py::make_tuple(py::handle(g_err.base), py::handle(PyExc_ValueError));
    g_err.refused = new_error(m, "RefusedError", PyError::refused,
                              "The handler refused the request (incr: the value is not a 64-bit decimal "
                              "integer, or the sum overflows; nothing changed).",
                              bases.ptr());
  }
  // The error table, for tests/python: (errno, name, kv_strerror text) per
  // row, and the exception the extension raises for a code.
  m.def("_error_table", [] {
    py::list rows;
    for (const auto& row : rkv::kv::client::kErrnoTable) {
      rows.append(py::make_tuple(row.err, std::string(row.name), std::string(kv_strerror(row.err))));
    }
    return rows;
  });
  m.def("_error_for", [](int code, const std::string& msg) { return make_error(code, msg); });
  m.attr("MAX_PENDING") = KV_MAX_PENDING;
  m.attr("OP_INCR") = 0x0100;
  m.attr("OP_CAS") = 0x0101;
  m.attr("DEFAULT_PORT") = KV_DEFAULT_PORT;

  py::class_<Value>(m, "_Value", py::buffer_protocol(), "A value returned by a GET (read-only; see rkv.Client.get).")
      .def_buffer([](Value& v) {
        return py::buffer_info(v.ptr, 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(v.len)}, {static_cast<py::ssize_t>(1)}, true);
      });

  py::class_<Handle>(m, "_Client", "The connection under rkv.Client (see there).")
      .def(py::init<const std::string&, py::object, py::object>(), py::arg("servers"), py::arg("get_mode") = py::none(),
           py::arg("poll_us") = py::none())
      .def("close", &Handle::close,
           "Close the connection (idempotent). Values already returned stay valid; async operations in flight "
           "fail with rkv.ConnectionError.")
      .def_property_readonly("closed", &Handle::closed, "True once close() ran.")
      .def_property_readonly("server", &Handle::server, "The server name the client was opened with.")
      .def("set", &Handle::set, py::arg("key"), py::arg("value"), py::arg("ttl_ms") = py::none(),
           "Store value under key. Both bytes-like (or str, as UTF-8). A value of 4 KiB and more is read by the "
           "server straight from the caller's buffer (no copy), with the GIL released until it is stored. "
           "ttl_ms (int > 0): the key expires that many milliseconds later; None or 0: no expiry (a TTL the key "
           "had is cleared).")
      .def("expire", &Handle::expire, py::arg("key"), py::arg("ttl_ms"),
           "The key expires ttl_ms milliseconds from now (0: it persists). True if the key exists, False if not.")
      .def("ttl", &Handle::ttl, py::arg("key"),
           "The key's remaining time to live in milliseconds, -1 when it has no expiry, None when there is no "
           "such key.")
      .def("get", &Handle::get, py::arg("key"),
           "The value of key as a read-only memoryview, or None when there is no such key. A large value "
           "(4 KiB and more) is a view of the memory it was RDMA-written into (no copy); that memory is freed "
           "when the last view of it is released (del, or memoryview.release()). It stays valid after close().")
      .def("get_into", &Handle::get_into, py::arg("key"), py::arg("buffer"),
           "Fill the caller's writable C-contiguous buffer (bytearray, numpy array, ...) with the value of key "
           "and return its length in bytes, or None when there is no such key. A large value is RDMA-written "
           "or read into buffer directly (registered for this call only). rkv.TooLargeError when the value is "
           "longer than the buffer.")
      .def("delete", &Handle::del, py::arg("key"), "Remove key; True if it existed, False if there was no such key.")
      .def("incr", &Handle::incr, py::arg("key"), py::arg("delta") = 1,
           "Add delta to key's value (a 64-bit decimal integer as text; a missing key counts as 0), store the "
           "sum and return it (kvd's INCR, opcode 0x0100). rkv.RefusedError: not such an integer, or overflow.")
      .def("cas", &Handle::cas, py::arg("key"), py::arg("expected"), py::arg("value"),
           "Set key to value only if it exists and equals expected byte for byte (kvd's CAS, 0x0101); True when "
           "it was set.")
      .def("call", &Handle::call, py::arg("op"), py::arg("request") = py::bytes(),
           "Run the server's handler of user opcode op (0..65535; docs/protocol.md \"CALL\") on request "
           "(bytes-like or str) and return its reply as a read-only memoryview. rkv.NoHandlerError: no such "
           "handler; rkv.HandlerFailedError: it failed; rkv.RefusedError: it refused the request. Calls are not "
           "ordered with the keyed operations.")
      .def("stats", &Handle::stats,
           "The server's counters (its STATS reply) as a dict name -> int. A client over several servers: "
           "{server: that dict, or None while the server is down}, each server by its identity "
           "(\"host:port\", docs/protocol.md).")
      .def("counters", &Handle::counters,
           "This client's counters as a dict name -> int (bytes_copied: value bytes the client copied; "
           "gets_into_direct: get_into calls that landed by RDMA; registrations; ...).")
      .def("set_many", &Handle::set_many, py::arg("items"),
           "Store many (key, value) pairs (a dict or an iterable of pairs), pipelined on the connection; "
           "returns when all are stored. One failure raises after all completed.")
      .def("get_many", &Handle::get_many, py::arg("keys"),
           "The values of many keys (a list of memoryview or None, in the order of keys), pipelined.")
      .def("fileno", &Handle::fileno, "The handle's kv_fd: readable when _poll has something to do.")
      .def("_submit_set", &Handle::submit_set)
      .def("_submit_get", &Handle::submit_get)
      .def("_submit_get_into", &Handle::submit_get_into)
      .def("_submit_delete", &Handle::submit_del)
      .def("_poll", &Handle::poll, py::arg("max") = 256)
      .def_property_readonly("_in_flight", &Handle::in_flight);
}
