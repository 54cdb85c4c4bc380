"""A client follows a cluster's membership without reopening (cluster_script).

Run by tests/rdma/cluster_script.sh inside scripts/cluster, with RKV_CLUSTER,
RKV_KVD and SOFTROCE_ADDR set and the rkv package on PYTHONPATH. One
rkv.Client is opened on the cluster; then a new kvd joins and later leaves.
Checks, each with a 120 s deadline and none on speed:
  - the open client connects the new member and places keys on it (its
    stats show the member up, holding some of 300 new keys);
  - the member leaves (SIGTERM: it revokes its lease, then serves until its
    clients disconnected): no write fails while it leaves, the client drops
    it, the kvd then exits by itself, and 300 more writes all succeed on
    the others, so placement no longer picks it;
  - the client's membership_changes counter counts both changes.
"""
import os
import signal
import subprocess
import sys
import time

import rkv

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
            for i in range(300):
                c.set(f"follow-{i}", f"value-{i}")
            for i in range(300):
                got = c.get(f"follow-{i}")
                if got is None or bytes(got) != f"value-{i}".encode():
                    fail(f"follow-{i} read back {got!r}")
            held = int(c.stats()[new_id]["keys"])
            if held == 0:
                fail(f"{new_id} holds none of 300 new keys: the client does not place keys on it")
            print(f"cluster_follow: {new_id} joined; it holds {held} of 300 new keys")

            # SIGTERM: the kvd leaves the cluster first and serves until this
            # client dropped it, so no write fails while it leaves, and the
            # ones after go to the others.
            kvd.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            writes = 0
            while c.counters()["membership_changes"] < changes0 + 2:  # each write also applies what the watch saw
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
        print("cluster_follow: ok")


if __name__ == "__main__":
    main()
