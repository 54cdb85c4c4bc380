"""The Python package rkv against a real kvd over Soft-RoCE (docs/python.md).

Byte-exact round trips of bytes and numpy arrays (1 B, 4 KiB, 64 MiB) in both
GET modes, zero copy of a 64 MiB GET (the client's bytes_copied counter),
get_into in place, set_many/get_many of 1,000 keys, 100 concurrent aget on
one event loop, TTLs (set ttl_ms, expire, ttl), and the documented exceptions: missing key, oversize value,
dead server."""

from __future__ import annotations

import asyncio
import errno
import gc
import struct
import time

import numpy as np
import pytest

import rkv
from conftest import MAX_VALUE, Kvd

# 4 MiB: a rendezvous value in both directions. 64 MiB goes through
# test_get_64mib_copies_nothing and get_into (byte-exact there too); a 64 MiB
# round trip per case made these cases most of the suite's time in the guest.
SIZES = [1, 4096, 4 << 20]
MODES = ["rpc", "read"]


def pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


@pytest.fixture(params=MODES)
def client(request: pytest.FixtureRequest, kvd: Kvd):
    with rkv.Client(kvd.server, get_mode=request.param) as c:
        yield c


@pytest.mark.parametrize("size", SIZES)
def test_bytes_round_trip(client: rkv.Client, size: int) -> None:
    value = pattern(size, size).tobytes()
    key = f"bytes-{size}".encode()
    client.set(key, value)
    got = client.get(key)
    assert isinstance(got, memoryview)
    assert got.readonly
    assert got.nbytes == size
    assert got == value  # byte-exact
    assert bytes(client[key]) == value


@pytest.mark.parametrize("size", SIZES)
def test_numpy_round_trip(client: rkv.Client, size: int) -> None:
    arr = pattern(size, size + 1)
    if size % 4 == 0:
        arr = arr.view(np.float32)  # any dtype: the buffer's bytes go
    key = f"numpy-{size}"  # str keys are their UTF-8 bytes
    client.set(key, arr)
    got = client.get(key)
    assert got is not None
    back = np.frombuffer(got, dtype=arr.dtype)
    assert back.tobytes() == arr.tobytes()
    assert np.array_equal(back.view(np.uint8), arr.view(np.uint8))


def test_other_bytes_like(client: rkv.Client) -> None:
    data = bytearray(pattern(10_000, 7).tobytes())
    client.set(bytearray(b"ba"), data)
    client.set(memoryview(b"mv"), memoryview(data)[100:200])
    assert client.get(b"ba") == data
    assert client.get(b"mv") == data[100:200]
    client.set("text", "héllo")
    assert bytes(client.get("text")) == "héllo".encode()
    client.set(b"empty", b"")
    got = client.get(b"empty")
    assert got is not None and got.nbytes == 0
    with pytest.raises(TypeError):
        client.set(b"k", 12345)
    with pytest.raises(TypeError):
        client.set(b"k", np.arange(10)[::2])  # not contiguous


def test_get_64mib_copies_nothing(client: rkv.Client) -> None:
    size = 64 << 20
    arr = pattern(size, 99)
    client.set(b"big", arr)
    before = client.counters()
    got = client.get(b"big")
    after = client.counters()
    assert got is not None
    # No copy in C++: the value stays in the buffer it was RDMA-written or
    # read into (bytes_copied counts every value byte the client copies).
    assert after["bytes_copied"] == before["bytes_copied"]
    # No copy in Python: numpy reads the landing buffer through the view.
    back = np.frombuffer(got, dtype=np.uint8)
    assert not back.flags.owndata and not back.flags.writeable
    assert np.array_equal(back, arr)
    # The SET was zero-copy too (the server READ it from `arr`).
    assert after["sets_large"] >= 1
    # The view owns the landing buffer: released with the views.
    del back
    got.release()


def test_view_outlives_client(kvd: Kvd) -> None:
    value = pattern(1 << 20, 5).tobytes()
    with rkv.Client(kvd.server) as c:
        c.set(b"outlive", value)
        view = c.get(b"outlive")
    assert c.closed
    assert view == value
    gc.collect()
    assert view == value


def test_get_into_fills_numpy_in_place(client: rkv.Client) -> None:
    for size, seed in ((64 << 20, 11), (4096, 12), (1, 13)):
        src = pattern(size, seed)
        key = f"into-{size}"
        client.set(key, src)
        dst = np.zeros(size, dtype=np.uint8)
        address = dst.ctypes.data
        before = client.counters()
        n = client.get_into(key, dst)
        after = client.counters()
        assert n == size
        assert dst.ctypes.data == address  # the same array, filled in place
        assert np.array_equal(dst, src)
        assert after["gets_into"] == before["gets_into"] + 1
        if size >= 64 << 20:  # landed by RDMA straight into dst
            assert after["gets_into_direct"] == before["gets_into_direct"] + 1
            assert after["bytes_copied"] == before["bytes_copied"]
    # A larger buffer: only the value's bytes are written.
    big = np.full(8192, 0xEE, dtype=np.uint8)
    client.set(b"into-small", b"abc")
    assert client.get_into(b"into-small", big) == 3
    assert bytes(big[:3]) == b"abc" and np.all(big[3:] == 0xEE)
    assert client.get_into(b"no-such-key-into", big) is None
    with pytest.raises(rkv.TooLargeError):
        client.get_into("into-4096", np.zeros(100, dtype=np.uint8))
    with pytest.raises(rkv.TooLargeError):
        client.get_into(f"into-{64 << 20}", np.zeros(1 << 20, dtype=np.uint8))
    with pytest.raises(TypeError):
        client.get_into(b"into-small", b"read-only bytes")


def test_delete_and_missing_key(client: rkv.Client) -> None:
    client.set(b"gone", b"x")
    assert client.delete(b"gone") is True
    assert client.delete(b"gone") is False
    assert client.get(b"gone") is None
    with pytest.raises(KeyError):
        client[b"gone"]
    with pytest.raises(KeyError):
        del client[b"gone"]
    client[b"back"] = b"y"
    del client[b"back"]
    assert client.get(b"back") is None


def test_ttl_expire_and_persist(client: rkv.Client) -> None:
    """set(ttl_ms=...), expire and ttl: "no key" (None) and "no expiry" (-1) apart; expired keys read as missing."""
    client.set(b"t-plain", b"v")
    assert client.ttl(b"t-plain") == -1
    assert client.ttl(b"t-none") is None
    assert client.expire(b"t-none", 100) is False
    client.set(b"t-long", b"v" * 50_000, ttl_ms=600_000)
    assert 590_000 < client.ttl(b"t-long") <= 600_000
    assert client.expire(b"t-long", 0) is True  # persist
    assert client.ttl(b"t-long") == -1
    client.set(b"t-short", b"s", ttl_ms=100)
    time.sleep(0.1 + 0.25 + 0.05)  # its TTL, the documented one-sided lag and a margin
    assert client.get(b"t-short") is None
    assert client.ttl(b"t-short") is None
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(rkv.InvalidArgument):
            client.set(b"t-bad", b"v", ttl_ms=bad)
    with pytest.raises(rkv.InvalidArgument):
        client.expire(b"t-plain", 10**20)


def test_many_1000_keys(client: rkv.Client) -> None:
    items = {f"many-{i}".encode(): pattern(1 + (i * 37) % 9000, i).tobytes() for i in range(1000)}
    client.set_many(items)
    keys = list(items) + [b"many-missing"]
    got = client.get_many(keys)
    assert len(got) == 1001
    for k, v in zip(keys[:-1], got[:-1]):
        assert v is not None and v == items[k]
    assert got[-1] is None
    client.set_many([(k, b"v2") for k in list(items)[:10]])  # pairs work too
    assert all(v == b"v2" for v in client.get_many(list(items)[:10]))


def test_100_concurrent_aget(client: rkv.Client) -> None:
    values = {f"aget-{i}".encode(): pattern(100 + i * 997, i).tobytes() for i in range(100)}
    client.set_many(values)

    async def main() -> list:
        keys = list(values) + [b"aget-missing"]
        results = await asyncio.gather(*(client.aget(k) for k in keys))
        await client.aset(b"aset", b"async value")
        assert bytes(await client.aget(b"aset")) == b"async value"
        buf = bytearray(64)
        assert await client.aget_into(b"aset", buf) == len(b"async value")
        assert await client.adelete(b"aset") is True
        assert await client.adelete(b"aset") is False
        return list(zip(keys, results))

    for k, v in asyncio.run(main()):
        if k == b"aget-missing":
            assert v is None
        else:
            assert v == values[k]
    assert client._in_flight == 0


def test_aget_mixed_with_sync_calls(client: rkv.Client) -> None:
    async def main() -> None:
        tasks = [asyncio.ensure_future(client.aget(f"aget-{i}".encode())) for i in range(50)]
        client.set(b"sync-between", b"s")  # sync calls while awaitables are in flight
        assert client.get_many([b"sync-between"])[0] == b"s"
        done = await asyncio.gather(*tasks)
        assert all(v is not None for v in done)

    client.set_many({f"aget-{i}".encode(): b"v" for i in range(50)})
    asyncio.run(main())


def test_oversize_value_and_key(client: rkv.Client) -> None:
    too_big = np.zeros(MAX_VALUE + 1, dtype=np.uint8)  # over kvd --max-value
    with pytest.raises(rkv.TooLargeError) as e:
        client.set(b"huge", too_big)
    assert e.value.errno == 7  # E2BIG
    assert isinstance(e.value, rkv.Error) and isinstance(e.value, ValueError)
    with pytest.raises(rkv.TooLargeError):
        client.set(b"k" * 1025, b"v")
    with pytest.raises(rkv.InvalidArgument):
        client.set(b"", b"v")
    client.set(b"still-works", b"ok")
    assert client.get(b"still-works") == b"ok"


def test_incr_cas_and_call(client: rkv.Client) -> None:
    client.delete(b"py-counter")
    assert client.incr(b"py-counter") == 1
    assert client.incr(b"py-counter", 41) == 42
    assert client.incr("py-counter", -50) == -8
    assert client.get(b"py-counter") == b"-8"
    client.set(b"py-text", b"not a number")
    with pytest.raises(rkv.RefusedError) as e:
        client.incr(b"py-text")
    assert e.value.errno == 33 and isinstance(e.value, ValueError)  # EDOM
    assert client.get(b"py-text") == b"not a number"  # unchanged
    client.set(b"py-max", str(2**63 - 1))
    with pytest.raises(rkv.RefusedError):
        client.incr(b"py-max")  # overflow

    client.set(b"py-cas", b"one")
    assert client.cas(b"py-cas", b"two", b"three") is False
    assert client.get(b"py-cas") == b"one"
    assert client.cas(b"py-cas", b"one", np.frombuffer(b"three", dtype=np.uint8)) is True
    assert client.get(b"py-cas") == b"three"
    client.delete(b"py-missing")
    assert client.cas(b"py-missing", b"", b"x") is False

    # The raw CALL of kvd's INCR (docs/protocol.md: key_len u16, key, delta i64).
    reply = client.call(rkv.OP_INCR, struct.pack("<H", 10) + b"py-counter" + struct.pack("<q", 10))
    assert isinstance(reply, memoryview) and reply.readonly
    assert struct.unpack("<q", reply) == (2,)
    assert client.get(b"py-counter") == b"2"
    with pytest.raises(rkv.RefusedError):
        client.call(rkv.OP_INCR, b"\x01")  # malformed request bytes
    with pytest.raises(rkv.NoHandlerError) as e2:
        client.call(0x1234, b"anything")
    assert e2.value.errno == 95  # EOPNOTSUPP
    with pytest.raises(rkv.InvalidArgument):
        client.call(0x10000)
    assert client.get(b"py-counter") == b"2"  # the connection still works


def test_stats(client: rkv.Client) -> None:
    s = client.stats()
    assert isinstance(s, dict) and s
    assert all(isinstance(k, str) for k in s)
    assert s.get("connections", 0) >= 1


def test_connect_errors(kvd: Kvd) -> None:
    with pytest.raises(rkv.ConnectionError):
        rkv.Client(f"{kvd.addr}:1")  # nothing listens there
    with pytest.raises(rkv.InvalidArgument):
        rkv.Client(kvd.server, get_mode="sideways")
    with pytest.raises(rkv.InvalidArgument):
        rkv.Client("host:notaport")


def test_closed_client(kvd: Kvd) -> None:
    c = rkv.Client(kvd.server)
    c.close()
    c.close()  # idempotent
    with pytest.raises(rkv.ConnectionError):
        c.get(b"x")


def test_dead_server() -> None:
    k = Kvd()
    try:
        c = rkv.Client(k.server, poll_us=0)
        c.set(b"before", b"alive")
        k.kill()
        with pytest.raises(rkv.ConnectionError) as e:
            for _ in range(3):  # the first call may find the connection failed, or fail during the request
                c.set(b"after", b"dead")
                c.get(b"before")
        assert e.value.errno in (errno.ECONNRESET, errno.ENOTCONN), e.value.message
        with pytest.raises(rkv.ConnectionError) as e:
            c.get(b"before")
        assert e.value.errno == errno.ENOTCONN, e.value.message

        async def aget() -> None:
            await c.aget(b"before")

        with pytest.raises(rkv.ConnectionError):
            asyncio.run(aget())
        c.close()
    finally:
        k.stop()


# The one error table (src/kv/client/errors.hpp), every row through Python:
# the exception for each code carries it, and is of the class whose docstring
# lists it (the extension writes each class's codes from the same table).
# A connection's failure and a server's are different classes by code alone.
def codes_of(cls: type) -> list[str]:
    doc = cls.__doc__ or ""
    return doc.split("Codes: ", 1)[1].rstrip(".").split(", ") if "Codes: " in doc else []


def test_error_table() -> None:
    from rkv import _rkv

    rows = _rkv._error_table()
    assert len(rows) >= 20
    classes = [rkv.ConnectionError, rkv.TooLargeError, rkv.InvalidArgument, rkv.ServerError, rkv.OutOfMemory,
               rkv.NoHandlerError, rkv.RefusedError]
    for code, name, text in rows:
        if code == 0:
            continue
        e = _rkv._error_for(code, f"test: {name}")
        assert isinstance(e, rkv.Error), name
        assert e.errno == code and e.message == f"test: {name}", name
        assert text and text != "unknown error", name
        if code == errno.EREMOTEIO:
            assert type(e) is rkv.HandlerFailedError
        documented = [c for c in [rkv.Error, *classes, rkv.HandlerFailedError] if name in codes_of(c)]
        assert documented == [type(e)], (name, documented)
    assert type(_rkv._error_for(errno.ECONNRESET, "m")) is rkv.ConnectionError
    assert type(_rkv._error_for(errno.EIO, "m")) is rkv.ServerError
    assert type(_rkv._error_for(errno.EBADF, "m")) is rkv.Error  # not a code of kv.h
