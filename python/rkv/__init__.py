"""rkv: a Python client of the RDMA key-value store, with zero-copy values.

    import rkv, numpy as np

    with rkv.Client("192.0.2.1:7471") as c:          # get_mode="rpc" | "read", poll_us=200 | "busy"
        c.set(b"weights", np.arange(1 << 20, dtype=np.float32))   # sent from the array itself
        view = c.get(b"weights")                       # read-only memoryview of the landing buffer
        arr = np.frombuffer(view, dtype=np.float32)    # still no copy
        out = np.empty(1 << 20, dtype=np.float32)
        c.get_into(b"weights", out)                    # RDMA straight into `out`
        c.set_many({b"a": b"1", b"b": b"2"}); c.get_many([b"a", b"b"])
        # in a coroutine: await c.aget(b"a"), await c.aset(b"a", b"3")
        c.incr(b"hits"); c.cas(b"a", b"1", b"9"); c.call(0x1000, b"req")   # user operations
        c.set(b"session", b"...", ttl_ms=30_000); c.expire(b"a", 5_000); c.ttl(b"a")  # time to live

    rkv.Client("10.0.0.1:7471,10.0.0.2:7471,10.0.0.3:7471")   # keys spread over three servers

Keys and values are any bytes-like object (bytes, bytearray, memoryview,
numpy arrays and anything else with the buffer protocol, C-contiguous) or str
(stored as its UTF-8 bytes). A key is 1 to 1024 bytes; a value up to the
server's limit (kvd --max-value, 256 MiB by default).

Zero copy and lifetimes:

* set(key, value): a value of 4 KiB and more is read by the server with an
  RDMA READ straight from the caller's buffer while set() waits (the GIL is
  released meanwhile; the buffer is held through the buffer protocol, so a
  bytearray cannot be resized under it). Do not modify the buffer from
  another thread during the call. Smaller values are copied into a message.
* get(key) returns a read-only memoryview. A large value (4 KiB and more) is
  a view of the very memory the server RDMA-wrote (or the client RDMA-read)
  it into: nothing copies it, in C++ or Python. That memory belongs to the
  view: it is freed when the last view of it (and of anything made from it
  without a copy, e.g. numpy.frombuffer) is gone or released with
  memoryview.release(). It does not depend on the client: it stays valid
  after close(). Small values are a view of a small malloc'd copy.
* get_into(key, buffer) fills the caller's writable buffer (e.g. a
  preallocated numpy array) by RDMA directly; the buffer is registered with
  the RDMA device for that call only. It must stay alive and untouched until
  the call returns (for aget_into: until the awaitable completes).
* aset(key, value): the value's buffer is held (and must not change) until
  the awaitable completes, also if it is cancelled (the operation itself is
  not: its result is dropped).

Many in flight: set_many/get_many submit a whole list at once (pipelined on
the connection: up to 16 on the wire, up to 1024 queued in the handle) and
return when all completed. The asyncio interface (aget, aset, adelete,
aget_into) submits the operation and returns a future; the client's file
descriptor (kv_fd) is watched by the running event loop (loop.add_reader),
which completes the futures. No thread is started. One client belongs to
one thread, and its async calls to one event loop.

Errors (all rkv.Error, with .errno and .message from the C API):
    rkv.ConnectionError   no server, refused, unreachable, timed out, the
                          connection failed or the client is closed; over
                          several servers: the key's server is down (EHOSTDOWN)
    rkv.TooLargeError     key over 1024 bytes, value over the server's limit,
                          value longer than get_into's buffer (a ValueError)
    rkv.InvalidArgument   empty key, bad server name or option (a ValueError)
    rkv.ServerError       the server failed the request
    rkv.OutOfMemory       out of memory here or in the server's store
    rkv.NoHandlerError    call(): the server has no handler for the opcode
    rkv.HandlerFailedError call(): the handler failed (a ServerError)
    rkv.RefusedError      call()/incr(): the handler refused the request,
                          e.g. incr of a non-integer (a ValueError)
A missing key is not an error for get() (None) and delete() (False);
client[key] and del client[key] raise KeyError.

Threads and the GIL: a client is used from the thread that created it (other
threads get rkv.Error); every call that waits for the network releases the
GIL, so other Python threads run meanwhile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Tuple, Union

if TYPE_CHECKING:
    import asyncio

from ._rkv import (  # noqa: F401  (re-exported)
    DEFAULT_PORT,
    MAX_PENDING,
    OP_CAS,
    OP_INCR,
    ConnectionError,
    Error,
    HandlerFailedError,
    InvalidArgument,
    NoHandlerError,
    OutOfMemory,
    RefusedError,
    ServerError,
    TooLargeError,
    _Client,
)

__all__ = [
    "Client",
    "Error",
    "ConnectionError",
    "TooLargeError",
    "InvalidArgument",
    "ServerError",
    "OutOfMemory",
    "NoHandlerError",
    "HandlerFailedError",
    "RefusedError",
    "DEFAULT_PORT",
    "MAX_PENDING",
    "OP_INCR",
    "OP_CAS",
]

Key = Union[bytes, bytearray, memoryview, str, Any]  # anything with the buffer protocol


class Client(_Client):
    """A connection to one kvd server, or to several (one connection each).

    Client(server, get_mode=None, poll_us=None)

    server    "host" or "host:port" (port 7471 when omitted; "[v6addr]:port"),
              or a comma-separated list of them: each key then lives on the
              server placement picks (docs/protocol.md "Several servers"); a
              server that is down makes its keys raise rkv.ConnectionError
              (errno EHOSTDOWN) while the others keep serving, and it is
              reconnected in the background; call() (no key) raises
              rkv.InvalidArgument; stats() gives {server: its counters or
              None while down}. Or a cluster, "etcd://HOST:PORT/NAME"
              (docs/cluster.md): its members and shard map, followed
              while the client is open (a key goes to its shard's
              primary; a member that joins takes its share of the shards;
              one that left is None in stats()); changes are applied at
              the client's calls
    get_mode  "rpc" (GET messages answered by the server) or "read"
              (one-sided: GETs by RDMA READ of the server's index, no message);
              None: the RKV_GET_MODE environment variable, else "rpc"
    poll_us   after each completion keep polling this many microseconds
              before sleeping (0: events only; "busy": never sleep); None:
              RKV_POLL_US, else 200

    Raises rkv.ConnectionError when the server cannot be reached and
    rkv.InvalidArgument for a bad name or option. A context manager: the
    connection closes at the end of the with block.
    """

    def __init__(self, server: str, get_mode: Optional[str] = None,
                 poll_us: Union[int, str, None] = None) -> None:
        super().__init__(server, get_mode, poll_us)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._reading = False

    # ---- context manager and mapping sugar ----
    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<rkv.Client {self.server!r}{' closed' if self.closed else ''}>"

    def __getitem__(self, key: Key) -> memoryview:
        """client[key]: the value (as get), KeyError when there is no such key."""
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def __setitem__(self, key: Key, value: Any) -> None:
        """client[key] = value: set."""
        self.set(key, value)

    def __delitem__(self, key: Key) -> None:
        """del client[key]: delete, KeyError when there was no such key."""
        if not self.delete(key):
            raise KeyError(key)

    def close(self) -> None:
        """Close the connection (idempotent). Values already returned stay
        valid; awaitables still pending fail with rkv.ConnectionError."""
        futures, self._futures = getattr(self, "_futures", {}), {}
        self._stop_reading()
        super().close()
        for fut in futures.values():
            if not fut.done():
                fut.set_exception(ConnectionError("rkv.Client: closed with the operation in flight"))

    def set_many(self, items: Union[Mapping[Any, Any], Iterable[Tuple[Any, Any]]]) -> None:
        """Store many (key, value) pairs (a dict or an iterable of pairs),
        pipelined on the connection; returns when all are stored. A failure
        raises (the first one's class) after all completed."""
        try:
            super().set_many(items)
        finally:
            self._kick()

    def get_many(self, keys: Iterable[Key]) -> "list[Optional[memoryview]]":
        """The values of many keys, pipelined: a list of memoryview (as get)
        or None, in the order of keys. A failure raises after all completed."""
        try:
            return super().get_many(keys)
        finally:
            self._kick()

    def _kick(self) -> None:
        # A batch may have taken completions of awaitables from the handle.
        if self._futures and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._on_readable)

    # ---- asyncio ----
    async def aget(self, key: Key) -> Optional[memoryview]:
        """await client.aget(key): as get(), without blocking the event loop."""
        return await self._start(self._submit_get(key))

    async def aget_into(self, key: Key, buffer: Any) -> Optional[int]:
        """await client.aget_into(key, buffer): as get_into(); the buffer is
        written until the awaitable completes."""
        return await self._start(self._submit_get_into(key, buffer))

    async def aset(self, key: Key, value: Any) -> None:
        """await client.aset(key, value): as set(); the value's buffer is
        held and must not change until the awaitable completes."""
        await self._start(self._submit_set(key, value))

    async def adelete(self, key: Key) -> bool:
        """await client.adelete(key): as delete()."""
        return await self._start(self._submit_delete(key))

    def _start(self, tag: int) -> "asyncio.Future[Any]":
        # Imported here, not with the package: whoever runs an event loop
        # imported asyncio already, and importing it (ssl, logging,
        # concurrent.futures) was 57 of the 82 ms `import rkv` took natively.
        import asyncio

        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._futures:
                raise Error("rkv.Client: async calls from two event loops at once")
            self._stop_reading()
            self._loop = loop
        fut = loop.create_future()
        self._futures[tag] = fut
        if not self._reading:
            loop.add_reader(self.fileno(), self._on_readable)
            self._reading = True
        # A batch call (get_many) may have taken completions for us already:
        # the fd does not show those, so look at once.
        loop.call_soon(self._on_readable)
        return fut

    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            done = self._poll(256)
        except Error as e:  # the event loop failed: every future fails
            futures, self._futures = self._futures, {}
            self._stop_reading()
            for fut in futures.values():
                if not fut.done():
                    fut.set_exception(e)
            return
        for tag, err, result in done:
            fut = self._futures.pop(tag, None)
            if fut is None or fut.done():  # cancelled: the result is dropped
                continue
            if err is not None:
                fut.set_exception(err)
            else:
                fut.set_result(result)
        if not self._futures:
            self._stop_reading()

    def _stop_reading(self) -> None:
        if getattr(self, "_reading", False) and self._loop is not None:
            try:
                self._loop.remove_reader(self.fileno())
            except Exception:  # the loop is closed already
                pass
        self._reading = False
