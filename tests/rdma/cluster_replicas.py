"""Replicated shards survive a primary's kill -9 (cluster_replicas).

Run by tests/rdma/cluster_replicas.sh inside `scripts/cluster 3 --replicas 1`,
with RKV_CLUSTER and RKV_SERVERS set and the rkv package on PYTHONPATH:

  cluster_replicas.py write   waits (120 s at most) until the shard map is
                              settled over the 3 members (below), then writes
                              through a client of the cluster:
                              SETs of mixed sizes (eager and rendezvous, up to
                              200 KB), a DEL of every 7th key, a TTL of an
                              hour on every 5th, and INCRs (a handler's write)
  cluster_replicas.py check VICTIM
                              after VICTIM was killed (kill -9), once the map
                              names it nowhere: every acknowledged write reads
                              back byte-exact (deleted keys absent, the TTL
                              kept, the counter's count) within 120 s, and
                              prints how long after its start that took
  cluster_replicas.py backs MEMBER
                              prints how many shards the map makes MEMBER a
                              backup of
  cluster_replicas.py read    reads back every write of `write` at once
                              (with RKV_READ_FROM=backups: from the backups)
                              and prints how many GETs that took
  cluster_replicas.py settled MEMBER...
                              waits (120 s at most) until the shard map is
                              settled over the MEMBERs: every shard has one
                              backup, every owner is in sync (its primary
                              caught it up), no member waits to take a
                              shard over, and each primary's shards are
                              backed by the other members about evenly
                              (counts at most 1 apart: docs/cluster.md,
                              rule 4's backups)

With `--ack replicas` (kvd's default) a write is acknowledged once the
shard's backup applied it, so nothing acknowledged may be missing after its
primary dies. Without replication (--replicas 0) the victim's keys are gone
and the check fails at its deadline. Nothing is asserted on speed.
"""
import os
import sys
import time

import rkv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_follow import read_map  # noqa: E402

DEADLINE = 120.0
KEYS = 120
SIZES = (100, 5000, 70000, 300, 200000, 3000)
INCRS = 5


def fail(why: str) -> None:
    print(f"cluster_replicas: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


def value_of(i: int) -> bytes:
    size = SIZES[i % len(SIZES)]
    unit = f"<{i}:{size}>".encode()
    return (unit * (size // len(unit) + 1))[:size]


def deleted(i: int) -> bool:
    return i % 7 == 3


def with_ttl(i: int) -> bool:
    return i % 5 == 1 and not deleted(i)


def settled_map(cluster: str, members: set) -> bool:
    m = read_map(cluster)
    if m is None or m.get("replicas") != 1:
        return False
    shards = m["shards"]
    width = min(2, len(members))  # a primary and its one backup, while there are two members
    return (all(len(s["owners"]) == width and s["in_sync"] == s["owners"] and "taker" not in s for s in shards)
            and set().union(*(set(s["owners"]) for s in shards)) == members
            and all(max(c.values()) - min(c.values()) <= 1 for c in backed(shards, members).values()))


def backed(shards: list, members: set) -> dict:
    """Per primary: how many of its shards each other member backs."""
    out = {p: {m: 0 for m in members if m != p} for p in members}
    for s in shards:
        for b in s["owners"][1:]:
            if s["owners"][0] in out and b in out[s["owners"][0]]:
                out[s["owners"][0]][b] += 1
    return {p: c for p, c in out.items() if c}


def settled(cluster: str, members: set) -> None:
    t0 = time.monotonic()
    while not settled_map(cluster, members):
        if time.monotonic() - t0 > DEADLINE:
            m = read_map(cluster)
            spread = backed(m["shards"], members) if m else None
            fail(f"no settled shard map over {sorted(members)} after {DEADLINE} s: {m}; backups per primary: {spread}")
        time.sleep(0.5)
    print(f"cluster_replicas: the map settled over {len(members)} member(s) in {time.monotonic() - t0:.1f} s")


def write(cluster: str, members: set) -> None:
    settled(cluster, members)
    with rkv.Client(cluster) as c:
        for i in range(KEYS):
            key = f"rep-{i}"
            c.set(key, value_of(i), ttl_ms=3_600_000 if with_ttl(i) else None)
            if deleted(i):
                c.delete(key)
        for _ in range(INCRS):
            c.incr("rep-counter")
    dels = sum(deleted(i) for i in range(KEYS))
    print(f"cluster_replicas: wrote {KEYS} keys ({dels} deleted) and {INCRS} INCRs ({KEYS + dels + INCRS} writes)")


def problems(c) -> list:
    out = []
    for i in range(KEYS):
        key = f"rep-{i}"
        got = c.get(key)
        if deleted(i):
            if got is not None:
                out.append(f"{key} was deleted and reads back {len(got)} bytes")
        elif got is None:
            out.append(f"{key} is missing")
        elif bytes(got) != value_of(i):
            out.append(f"{key} reads back {len(got)} bytes, not its {len(value_of(i))}")
        elif with_ttl(i) and (c.ttl(key) or -1) < 0:  # None: no key; -1: no TTL
            out.append(f"{key} lost its TTL")
    n = c.get("rep-counter")
    if n is None or bytes(n) != str(INCRS).encode():
        out.append(f"rep-counter reads {None if n is None else bytes(n)!r}, not {INCRS}")
    return out


def read(cluster: str) -> None:
    with rkv.Client(cluster) as c:
        found = problems(c)
    if found:
        fail(f"{len(found)} problem(s) reading back, e.g. {found[:5]}")
    print(f"cluster_replicas: read back every write ({KEYS + 1} GETs)")


def check(cluster: str, victim: str) -> None:
    t0 = time.monotonic()
    while True:
        m = read_map(cluster)
        if m is not None and all(victim not in s["owners"] for s in m["shards"]):
            break
        if time.monotonic() - t0 > DEADLINE:
            fail(f"the map still names {victim} after {DEADLINE} s: {m}")
        time.sleep(0.2)
    dropped = time.monotonic() - t0
    last = ["nothing read yet"]
    while True:
        try:
            with rkv.Client(cluster) as c:
                last = problems(c)
        except rkv.Error as e:  # a client whose map still lags
            last = [f"{type(e).__name__}: {e}"]
        if not last:
            break
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{len(last)} problem(s) {DEADLINE} s after the kill, e.g. {last[:5]}")
        time.sleep(0.5)
    print(f"cluster_replicas: every acknowledged write read back {time.monotonic() - t0:.1f} s after the "
          f"check began (the map dropped {victim} after {dropped:.1f} s)")


def main() -> None:
    cluster = os.environ["RKV_CLUSTER"]
    if sys.argv[1:2] == ["write"]:
        write(cluster, set(os.environ["RKV_SERVERS"].split(",")))
    elif sys.argv[1:2] == ["read"]:
        read(cluster)
    elif sys.argv[1:2] == ["backs"] and len(sys.argv) == 3:
        m = read_map(cluster)
        print(0 if m is None else sum(sys.argv[2] in s["owners"][1:] for s in m["shards"]))
    elif sys.argv[1:2] == ["check"] and len(sys.argv) == 3:
        check(cluster, sys.argv[2])
    elif sys.argv[1:2] == ["settled"] and len(sys.argv) > 2:
        settled(cluster, set(sys.argv[2:]))
    else:
        fail(f"usage: cluster_replicas.py write | read | backs MEMBER | check VICTIM | settled MEMBER... "
             f"(got {sys.argv[1:]})")


if __name__ == "__main__":
    main()
