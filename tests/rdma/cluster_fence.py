"""A member paused past its lease acknowledges no write (cluster_script,
cluster_replicas).

Run by tests/rdma/cluster_script.sh (kvd --replicas 0) and
cluster_replicas.sh (--replicas 1) inside scripts/cluster, with
RKV_CLUSTER, PAUSED_PID and PAUSED_ID (a member's kvd process and id),
REPLICAS (the members' --replicas) set and the rkv package on PYTHONPATH.
The classic long-GC-pause case (docs/cluster.md "Fencing"):
  - a client of that member alone connects, the member is paused
    (SIGSTOP), and 8 writes of keys of its own shards (by the map before
    the pause) are sent to it at once: they wait in its receive queue (the
    transport needs no help from the process), ahead of etcd's news;
  - it stays paused until etcd dropped it and the shard map names it the
    primary of no shard; then SIGCONT. Its first work is those writes,
    before any renewal or rejoin could reach etcd, and with the map it
    knew still naming it their primary: only its lease fence can refuse
    them. Every one must be refused with ESTALE (not_owner), none
    acknowledged;
  - a client of the cluster finds none of those writes anywhere;
  - before the pause, a key of each shard was written ("before") through
    a client of the cluster; with replicas, every one reads back from the
    new primaries once the map dropped the paused member (acknowledged
    writes survive it). Then each is written again ("after"). Once the
    member has joined again (under the lease it had: docs/cluster.md
    "Membership", A lease that lapsed; the map had dropped it meanwhile,
    so it comes back as a member without shards) and a later map names it
    the primary of some shards once more, it must not serve "before" for any:
    with replicas it serves "after" (it was caught up before it took the
    shard over); with none a miss (a member drops its keys of every shard
    it loses, Server::serve_shards, and takes shards over without their
    data), or "after" if that write reached it once it was back.
Each wait has a 120 s deadline; nothing is asserted on speed.
"""
import asyncio
import errno
import os
import signal
import sys
import time

import rkv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_follow import read_map  # noqa: E402
from placement_ref import shard_of  # noqa: E402

DEADLINE = 120.0
WRITES = 8  # fewer than a connection's credits: all of them reach its receive queue


def fail(why: str) -> None:
    print(f"cluster_fence: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


def primary_nowhere(cluster: str, member: str):
    """The epoch of the map now if it names `member` the primary of no shard, else None."""
    m = read_map(cluster)
    return m["epoch"] if m is not None and all(s["owners"][0] != member for s in m["shards"]) else None


def its_keys(cluster: str, member: str) -> list:
    """WRITES keys whose shard `member` is the primary of in the map now."""
    m = read_map(cluster)
    if m is None:
        fail("no shard map")
    keys = []
    for i in range(100000):
        k = f"fenced-{i}"
        if m["shards"][shard_of(k.encode(), len(m["shards"]))]["owners"][0] == member:
            keys.append(k)
            if len(keys) == WRITES:
                return keys
    fail(f"{member} is the primary of no shard: {m}")


async def fenced_writes(client: "rkv.Client", keys: list, cluster: str, member: str, pid: int) -> list:
    os.kill(pid, signal.SIGSTOP)
    tasks = [asyncio.ensure_future(client.aset(k, b"late")) for k in keys]
    await asyncio.sleep(0.5)  # the loop sends them; they wait in the paused kvd's receive queue
    t0 = time.monotonic()
    while (dropped := primary_nowhere(cluster, member)) is None:
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{member} dropped from the map while paused: not within {DEADLINE:.0f} s")
        await asyncio.sleep(0.2)
    os.kill(pid, signal.SIGCONT)
    return dropped, await asyncio.gather(*tasks, return_exceptions=True)


def held_keys(cluster: str) -> list:
    """A key of each shard."""
    n = len(read_map(cluster)["shards"])
    keys = {}
    for i in range(100000):
        keys.setdefault(shard_of(f"held-{i}".encode(), n), f"held-{i}")
        if len(keys) == n:
            break
    return list(keys.values())


def value(v) -> bytes:
    return None if v is None else bytes(v)


def served_again(cluster: str, member: str, dropped: int, keys: list) -> list:
    """The keys whose shard a map later than epoch `dropped` (one that named
    `member` the primary of nothing) names `member` the primary of."""
    m = read_map(cluster)
    if m is None or m["epoch"] <= dropped:
        return []
    return [k for k in keys if m["shards"][shard_of(k.encode(), len(m["shards"]))]["owners"][0] == member]


def main() -> None:
    cluster = os.environ["RKV_CLUSTER"]
    pid = int(os.environ["PAUSED_PID"])
    member = os.environ["PAUSED_ID"]
    replicas = int(os.environ.get("REPLICAS", "0"))
    keys = its_keys(cluster, member)
    # The writes wait as long as the pause lasts (up to DEADLINE): the op
    # timeout must not fail them first.
    os.environ["RKV_TIMEOUT_MS"] = str(int(3 * DEADLINE * 1000))
    leases = read_map(cluster)["leases"]
    held = held_keys(cluster)
    with rkv.Client(cluster) as c:
        for k in held:
            c.set(k, b"before")
    with rkv.Client(member) as paused:  # a static list of that member alone: connected now
        try:
            dropped, results = asyncio.run(fenced_writes(paused, keys, cluster, member, pid))
        finally:
            os.kill(pid, signal.SIGCONT)  # whatever happened, never leave it stopped
    acked = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    if acked:
        fail(f"the paused member acknowledged writes {acked} after its shards had a new primary")
    wrong = [(i, r) for i, r in enumerate(results) if getattr(r, "errno", None) != errno.ESTALE]
    if wrong:
        fail(f"writes refused otherwise than ESTALE (not_owner): {wrong}")
    with rkv.Client(cluster) as c:
        found = [k for k in keys if c.get(k) is not None]
        if found:
            fail(f"refused writes {found} are readable from the cluster")
        lost = {k: v for k in held if (v := value(c.get(k))) != b"before"} if replicas else {}
        if lost:
            # What each read, its shard's owners now, and the members' leases
            # before and now: a member other than the paused one that lost its
            # lease too shows as a new lease (the map had dropped it).
            m = read_map(cluster) or {"shards": [], "leases": {}}
            n = len(m["shards"])
            owners = {k: m["shards"][shard_of(k.encode(), n)]["owners"] for k in lost} if n else {}
            fail(f"acknowledged writes lost when the paused member was dropped: {lost}; their owners now: {owners}; "
                 f"leases before the pause: {leases}, now: {m['leases']}")
        for k in held:
            c.set(k, b"after")
    print(f"cluster_fence: {WRITES} writes sent to {member} while paused past its lease: all refused (ESTALE)"
          + (f"; all {len(held)} writes acknowledged before the pause read back" if replicas else ""))
    t0 = time.monotonic()
    while not (back_keys := served_again(cluster, member, dropped, held)):
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{member} is not again the primary of any of its {len(held)} old shards within "
                 f"{DEADLINE:.0f} s: {read_map(cluster)}")
        time.sleep(0.2)
    with rkv.Client(member) as back:  # retries not_owner until its map is this one
        served = {k: value(back.get(k)) for k in back_keys}
    # With replicas: the value written while it was away. Without: never
    # "before" (a miss, or "after" if that write came once it was back).
    wrong = {k: v for k, v in served.items() if (v != b"after" if replicas else v == b"before")}
    if wrong:
        fail(f"{member}, primary again after it was dropped, serves {wrong}")
    print(f"cluster_fence: {member} joined again, primary of {len(back_keys)} shards: "
          + ("each key served as written while it was away" if replicas else
             f"no value it held before served ({sum(v is None for v in served.values())} misses)"))


if __name__ == "__main__":
    main()
