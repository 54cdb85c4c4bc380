"""A member paused past its lease acknowledges no write (cluster_script).

Run by tests/rdma/cluster_script.sh inside scripts/cluster, with
RKV_CLUSTER, PAUSED_PID and PAUSED_ID (a member's kvd process and id) set
and the rkv package on PYTHONPATH. The classic long-GC-pause case
(docs/cluster.md "Fencing"):
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
  - before the pause, a key of each of its shards was written to it
    ("before"). Once it has joined again (a new incarnation) and the map
    names it the primary of some of those shards once more, it must not
    serve those values: another member was their primary meanwhile, so
    what it held may be stale, and a member drops its keys of every shard
    it loses (Server::serve_shards). With no replicas they are gone: a miss.
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


def primary_nowhere(cluster: str, member: str) -> bool:
    m = read_map(cluster)
    return m is not None and all(s["owners"][0] != member for s in m["shards"])


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
    while not primary_nowhere(cluster, member):
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{member} dropped from the map while paused: not within {DEADLINE:.0f} s")
        await asyncio.sleep(0.2)
    os.kill(pid, signal.SIGCONT)
    return await asyncio.gather(*tasks, return_exceptions=True)


def held_keys(cluster: str, member: str) -> list:
    """A key of each shard `member` is the primary of in the map now."""
    m = read_map(cluster)
    n = len(m["shards"])
    keys = {}
    for i in range(100000):
        k = f"held-{i}"
        s = shard_of(k.encode(), n)
        if m["shards"][s]["owners"][0] == member:
            keys.setdefault(s, k)
    return list(keys.values())


def served_again(cluster: str, member: str, lease: int, keys: list) -> list:
    """The keys whose shard the map names `member`, under a lease other than
    `lease`, the primary of."""
    m = read_map(cluster)
    if m is None or m["leases"].get(member, lease) == lease:
        return []
    return [k for k in keys if m["shards"][shard_of(k.encode(), len(m["shards"]))]["owners"][0] == member]


def main() -> None:
    cluster = os.environ["RKV_CLUSTER"]
    pid = int(os.environ["PAUSED_PID"])
    member = os.environ["PAUSED_ID"]
    keys = its_keys(cluster, member)
    # The writes wait as long as the pause lasts (up to DEADLINE): the op
    # timeout must not fail them first.
    os.environ["RKV_TIMEOUT_MS"] = str(int(3 * DEADLINE * 1000))
    lease = read_map(cluster)["leases"][member]
    with rkv.Client(member) as paused:  # a static list of that member alone: connected now
        held = held_keys(cluster, member)
        for k in held:
            paused.set(k, b"before")
        try:
            results = asyncio.run(fenced_writes(paused, keys, cluster, member, pid))
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
    print(f"cluster_fence: {WRITES} writes sent to {member} while paused past its lease: all refused (ESTALE)")
    t0 = time.monotonic()
    while not (back_keys := served_again(cluster, member, lease, held)):
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{member} is not again the primary of any of its {len(held)} old shards within "
                 f"{DEADLINE:.0f} s: {read_map(cluster)}")
        time.sleep(0.2)
    with rkv.Client(member) as back:  # retries not_owner until its map is this one
        stale = [k for k in back_keys if back.get(k) is not None]
    if stale:
        fail(f"{member}, primary again under a new lease, serves what it held before for {stale}")
    print(f"cluster_fence: {member} joined again, primary of {len(back_keys)} of its {len(held)} old shards: "
          "none of its old values served")


if __name__ == "__main__":
    main()
