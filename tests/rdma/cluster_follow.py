"""A client follows a cluster's membership without reopening (cluster_script).

Run by tests/rdma/cluster_script.sh inside scripts/cluster, with RKV_CLUSTER,
RKV_KVD and SOFTROCE_ADDR set and the rkv package on PYTHONPATH. One
rkv.Client is opened on the cluster; then a new kvd joins and later leaves.
Checks, each with a 120 s deadline and none on speed:
  - the open client connects the new member and, once the members gave it
    its shards in the shard map, places keys on it (its stats show the
    member up, holding some of 300 new keys), each key on the primary that
    etcd's shard map names for the key's shard;
  - the member leaves (SIGTERM: it stops writing, revokes its lease, then
    serves reads until its clients disconnected): no write fails while it
    leaves, not even 20 writes of its own shards sent right after the
    SIGTERM (refused not_owner, placed again by the C API), the client drops
    it once the map no longer names it, the kvd then exits by itself, and
    300 more writes all succeed on the others, so placement no longer picks
    it;
  - the client's membership_changes counter counted the changes.
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import rkv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from placement_ref import shard_of  # noqa: E402  (docs/cluster.md "The shard map", reimplemented)

DEADLINE = 120.0


def fail(why: str) -> None:
    print(f"cluster_follow: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


def wait_for(what: str, check) -> None:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > DEADLINE:
            fail(f"{what}: not within {DEADLINE:.0f} s")
        time.sleep(0.2)


def read_map(cluster: str):
    """The shard map etcd holds (its v3 JSON gateway), or None."""
    host_port, name = cluster[len("etcd://"):].split("/", 1)
    body = json.dumps({"key": base64.b64encode(f"/rkv/{name}/map".encode()).decode()}).encode()
    with urllib.request.urlopen(f"http://{host_port}/v3/kv/range", data=body, timeout=10) as r:
        kvs = json.load(r).get("kvs", [])
    return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None


def on_their_primaries(keys: list, cluster: str) -> bool:
    """Whether each key is on its shard's primary, by a map that did not
    change during the check (False: it changed, or a key was elsewhere)."""
    m = read_map(cluster)
    if m is None:
        return False
    by_primary = {}
    for k in keys:
        by_primary.setdefault(m["shards"][shard_of(k, len(m["shards"]))]["owners"][0], []).append(k)
    for server, ks in by_primary.items():
        with rkv.Client(server) as one:
            if any(one.get(k) is None for k in ks):
                return False
    again = read_map(cluster)
    return again is not None and again["epoch"] == m["epoch"]


def main() -> None:
    cluster = os.environ["RKV_CLUSTER"]
    with rkv.Client(cluster) as c:
        before = c.stats()
        changes0 = c.counters()["membership_changes"]

        log = open(os.path.join(os.environ["WORK"], "kvd5.log"), "w+")
        kvd = subprocess.Popen([os.environ["RKV_KVD"], "--bind", os.environ["SOFTROCE_ADDR"], "--port", "0",
                                "--cluster", cluster, "--lease-ttl", "600", "--drain-timeout", "600"],
                               stdout=log, stderr=subprocess.STDOUT)
        new_id = None

        def listening() -> bool:
            nonlocal new_id
            if kvd.poll() is not None:
                log.seek(0)
                fail(f"the new kvd exited with {kvd.returncode}: {log.read()}")
            log.seek(0)
            for line in log:
                if line.startswith("kvd: listening on "):
                    new_id = line.split()[-1]
                    return True
            return False

        try:
            wait_for("the new kvd listening", listening)
            if new_id in before:
                fail(f"{new_id} was a member before it started: {sorted(before)}")
            # Any call runs the client's loop (the watch) and applies what it saw.
            wait_for(f"the open client connecting {new_id}", lambda: c.stats().get(new_id) is not None)
            # Its shards come with the next shard map (the members write it
            # once they saw it join): 300 keys at a time until it holds some
            # and every key of the round is on its map primary (a round the
            # client wrote with an older map is not).
            rounds = 0

            def holds_keys() -> bool:
                nonlocal rounds
                rounds += 1
                for i in range(300):
                    c.set(f"follow-{rounds}-{i}", f"value-{i}")
                for i in range(300):
                    got = c.get(f"follow-{rounds}-{i}")
                    if got is None or bytes(got) != f"value-{i}".encode():
                        fail(f"follow-{rounds}-{i} read back {got!r}")
                keys = [f"follow-{rounds}-{i}".encode() for i in range(300)]
                return int(c.stats()[new_id]["keys"]) > 0 and on_their_primaries(keys, cluster)

            wait_for(f"{new_id} holding some new keys, each key on its shard map primary", holds_keys)
            held = int(c.stats()[new_id]["keys"])
            print(f"cluster_follow: {new_id} joined; it holds {held} of the last 300 new keys")

            # SIGTERM: the kvd leaves the cluster first and serves until this
            # client dropped it (once the shard map no longer names it), so no
            # write fails while it leaves, and the ones after go to the others.
            # It stops writing at once (docs/cluster.md "Fencing"), so writes
            # of its own shards, sent before the map moves them, are refused
            # not_owner until the client has the new map: the C API places
            # them again, and none may fail.
            m = read_map(cluster)
            own = [k for k in (f"leaving-own-{i}" for i in range(2000))
                   if m["shards"][shard_of(k.encode(), len(m["shards"]))]["owners"][0] == new_id][:20]
            kvd.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            for k in own:
                try:
                    c.set(k, "v")
                except rkv.Error as e:
                    fail(f"{k}: a write of the leaver's shard while it left failed: {e}")
            writes = len(own)
            while c.stats().get(new_id) is not None:  # each call also applies what the watch saw
                try:
                    c.set(f"leaving-{writes}", "v")
                except rkv.Error as e:
                    fail(f"leaving-{writes}: a write while {new_id} left failed: {e}")
                writes += 1
                if time.monotonic() - t0 > DEADLINE:
                    fail(f"the open client did not see {new_id} leave within {DEADLINE:.0f} s")
            rc = kvd.wait(timeout=DEADLINE)
            if rc != 0:
                fail(f"the new kvd exited with {rc} on SIGTERM")
            print(f"cluster_follow: {new_id} left; {writes} writes while it left, none failed")
        finally:
            if kvd.poll() is None:
                kvd.kill()
                kvd.wait()

        for i in range(300):
            try:
                c.set(f"after-{i}", "v")
            except rkv.Error as e:
                fail(f"after-{i}: a write after {new_id} left failed: {e}")
        if c.stats().get(new_id) is not None:
            fail(f"{new_id} is still up in the client after it left")
        changes = c.counters()["membership_changes"]
        if changes < changes0 + 2:  # at least one for the join and one for the leave
            fail(f"membership_changes went from {changes0} to {changes} over a join and a leave")
        print("cluster_follow: ok")


if __name__ == "__main__":
    main()
