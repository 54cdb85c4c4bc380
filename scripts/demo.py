#!/usr/bin/env python3
"""scripts/demo: the store working, in one command (fresh Debian 12, root or sudo).

    scripts/demo [--build DIR] [--no-setup]

1. Installs what it needs and builds a release tree (scripts/setup --rdma DIR --
   -Dbuildtype=release -Db_lto=true -Dlog_level=warn -Dtests=disabled; default DIR
   build-demo).
2. Brings up RDMA with scripts/softroce run: a real device, Soft-RoCE in a
   network namespace, or a QEMU guest (see README.md).
3. Starts kvd with a data directory and waits until it says it listens.
4. Runs examples/Client1.txt and examples/Client2.txt at the same time, depth 32,
   --verify (every GET of a key the client wrote must return what it wrote).
5. A pass of one-sided GETs: every key written, 4 times, depth 32, by RDMA READ
   of kvd's index (--get-mode read), each checked against the value the examples
   leave in it (kvload --expect); kvd must receive no GET message.
6. Restarts kvd on the same directory: it must recover exactly as many records
   as the two clients had SETs acknowledged, and the same one-sided pass must
   find every value again.
7. Prints one table and stops everything it started (kvd, the guest or the
   network namespace it created), also when interrupted.

Exit status: 0 every check held; 1 a check failed; 2 bad flags; 128+N stopped by signal N.
With no packages installed it takes a few minutes; with packages and build
in place under two (most of it is the Soft-RoCE guest's boot).
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
SELF = os.path.realpath(__file__)
EXAMPLES = [os.path.join(REPO, "examples", f) for f in ("Client1.txt", "Client2.txt")]


def say(msg):
    print(f"demo: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="scripts/demo", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--build", metavar="DIR", default="build-demo", help="release build tree (default: build-demo)")
    p.add_argument("--no-setup", action="store_true",
                   help="install no packages (the build still runs when DIR is missing or stale)")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)  # the part run by scripts/softroce
    return p.parse_args(argv)


def on_sigterm(signo, _frame):
    raise SystemExit(128 + signo)  # runs every finally: kvd and the environment are stopped


# ------------------------------------------------------------------ host side
def host_main(args):
    t0 = time.monotonic()
    build = os.path.join(REPO, args.build) if not os.path.isabs(args.build) else args.build
    env = dict(os.environ)
    if args.no_setup:
        env["SETUP_NO_INSTALL"] = "1"
    with tempfile.NamedTemporaryFile("w+", prefix="rkv-demo-setup-", suffix=".log") as log:
        say(f"installing what is missing, building {os.path.relpath(build, REPO)}/ (release; minutes the first "
            f"time) ... log: {log.name}")
        rc = subprocess.call([os.path.join(REPO, "scripts", "setup"), "--rdma", build, "--", "-Dbuildtype=release",
                              "-Db_lto=true", "-Dlog_level=warn", "-Dtests=disabled"], env=env, stdout=log, stderr=log)
        if rc != 0:
            log.seek(0)
            sys.stderr.write("".join(log.readlines()[-40:]))
            say(f"scripts/setup failed (status {rc})")
            return 1
    t_build = time.monotonic() - t0
    softroce = os.path.join(REPO, "scripts", "softroce")
    mode = subprocess.run([softroce, "status"], capture_output=True, text=True).stdout.split("\n")[0]
    mode = mode.removeprefix("mode: ").strip() or "?"
    netns_before = netns_exists()
    say(f"RDMA environment: {mode}; running the demo there")
    # Its own process group, so that a signal reaches everything in it (softroce, and the demo
    # itself in the native and netns modes); softroce stops the guest it booted when it exits.
    child = subprocess.Popen([softroce, "run", sys.executable, SELF, "--inside", "--build", build],
                             process_group=0)

    def forward(signo, _frame):
        try:
            os.killpg(child.pid, signo)
        except ProcessLookupError:
            pass
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, forward)
    try:
        rc = child.wait()
    finally:
        # A network namespace softroce made for this run stays: remove it.
        if mode == "netns" and not netns_before and netns_exists():
            subprocess.call(["ip", "netns", "del", "softroce"])
    # The wrapper (scripts/demo) may have installed python3 and the packages
    # first: RKV_DEMO_WRAPPER_S says how long that took.
    pre = float(os.environ.get("RKV_DEMO_WRAPPER_S", "0") or 0)
    took = (f"{time.monotonic() - t0 + pre:.0f} s in all ({t_build + pre:.0f} s install + build"
            + (f", {pre:.0f} s of it installing python3 and the packages first" if pre else "") + ")")
    if rc > 128:
        say(f"stopped by signal {rc - 128}; everything it started is stopped; {took}")
        return rc
    if rc != 0:
        say(f"FAILED (status {rc}); {took}")
        return 1
    say(took)
    return 0


def netns_exists():
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return any(line.split()[:1] == ["softroce"] for line in out.splitlines())


# ------------------------------------------------------------------ inside the RDMA environment
class Kvd:
    """kvd as a child: stdout/stderr read by threads (no sleeps, no full pipes)."""

    def __init__(self, exe, addr, data):
        self.lines, self.cond = [], threading.Condition()
        self.p = subprocess.Popen([exe, "--bind", addr, "--port", "0", "--data-dir", data, "--log-level", "warn",
                                   "--stats-json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  preexec_fn=die_with_parent)
        for f in (self.p.stdout, self.p.stderr):
            threading.Thread(target=self._read, args=(f,), daemon=True).start()
        line = self.wait_for(lambda l: l.startswith("kvd: listening on "), 120)
        if line is None:
            self.stop()
            raise Failure("kvd did not start:\n" + self.tail())
        self.port = int(line.rsplit(":", 1)[1])
        self.recovered = next((l for l in self.snapshot() if l.startswith("kvd: recovered ")), "")

    def _read(self, f):
        for raw in f:
            with self.cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)  # one EOF marker per stream
            self.cond.notify_all()

    def snapshot(self):
        with self.cond:
            return [l for l in self.lines if l is not None]

    def wait_for(self, pred, timeout, start=0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for l in self.lines[start:]:
                    if l is not None and pred(l):
                        return l
                start = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self.lines.count(None) == 2:
                    return None
                self.cond.wait(left)

    def stats(self):
        with self.cond:
            start = len(self.lines)
        self.p.send_signal(signal.SIGUSR1)
        line = self.wait_for(lambda l: l.startswith("kvd: stats: "), 30, start)
        if line is None:
            raise Failure("kvd did not print its stats on SIGUSR1:\n" + self.tail())
        return json.loads(line[len("kvd: stats: "):])

    def tail(self, n=15):
        return "\n".join(self.snapshot()[-n:])

    def stop(self):
        """SIGTERM and wait (SIGKILL after 30 s); the exit status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


class Failure(Exception):
    pass


LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    """In the child before exec: SIGKILL it when the demo dies, however it dies (PR_SET_PDEATHSIG)."""
    LIBC.prctl(1, signal.SIGKILL)


class Demo:
    def __init__(self, build):
        self.addr = os.environ["SOFTROCE_ADDR"]
        self.mode = os.environ.get("SOFTROCE_MODE", "native")
        self.kvd_exe = os.path.join(build, "apps", "kvd")
        self.kvload = os.path.join(build, "apps", "kvload")
        self.work = tempfile.mkdtemp(prefix="rkv-demo-")
        self.data = os.path.join(self.work, "data")
        self.kvd = None
        self.checks = []  # (what, held)
        self.rows = []
        self.gets_by_message = []

    def check(self, held, what):
        self.checks.append((what, bool(held)))
        if not held:
            say(f"check failed: {what}")
        return held

    def kvload_json(self, argv, timeout=600, stdin=None):
        r = subprocess.run([self.kvload, "--server", self.addr, "--port", str(self.kvd.port), *argv],
                           input=stdin, capture_output=True, timeout=timeout)
        report = None
        for line in r.stdout.decode(errors="replace").splitlines():
            if line.startswith("{"):
                report = json.loads(line)
        return r, report

    def run(self):
        say(f"kvd --data-dir {self.data} on {self.addr} ...")
        self.kvd = Kvd(self.kvd_exe, self.addr, self.data)
        self.clients()
        self.onesided("one-sided GETs (depth 32)")
        self.restart()

    def clients(self):
        procs = []
        for i, f in enumerate(EXAMPLES, 1):
            acks = os.path.join(self.work, f"acks{i}")
            argv = [self.kvload, "--server", self.addr, "--port", str(self.kvd.port), "--file", f, "--depth", "32",
                    "--verify", "--json", "--ack-log", acks]
            procs.append((f, acks, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        say("Client1.txt and Client2.txt at the same time, depth 32, --verify ...")
        self.acked = 0
        for f, acks, p in procs:
            out, err = p.communicate(timeout=600)
            rep = next((json.loads(l) for l in out.decode().splitlines() if l.startswith("{")), None)
            name = os.path.basename(f)
            if not self.check(p.returncode == 0 and rep and rep["errors"] == 0 and rep["mismatches"] == 0,
                              f"{name}: exit 0, no errors, no mismatches"):
                sys.stderr.write(err.decode(errors="replace")[-2000:])
            self.rows.append((f"{name} (depth 32, --verify)", rep))
            self.acked += count_lines(acks)
        # What the store must hold now: each key one file alone writes has that file's last
        # value (kvload --expect takes the last SET of a key); keys both write hold either.
        sets = [[l.rstrip("\n") for l in open(f) if l.startswith("SET ")] for f in EXAMPLES]
        keys = [{l.split(" ", 2)[1] for l in s} for s in sets]
        self.keys = sorted(keys[0] | keys[1])
        self.expect = os.path.join(self.work, "expect.txt")
        with open(self.expect, "w") as f:
            for i, s in enumerate(sets):
                f.writelines(l + "\n" for l in s if l.split(" ", 2)[1] not in keys[1 - i])
        rnd = random.Random(1)
        lines = []
        for _ in range(4):
            rnd.shuffle(self.keys)
            lines += [f"GET {k}" for k in self.keys]
        self.gets = os.path.join(self.work, "gets.txt")
        with open(self.gets, "w") as f:
            f.write("\n".join(lines) + "\n")

    def onesided(self, label):
        """Every key 4 times by RDMA READ, checked against what the clients wrote (--expect)."""
        say(f"{label}: every key 4 times by RDMA READ, checked against the examples' values ...")
        before = self.kvd.stats()["gets"]
        r, rep = self.kvload_json(["--file", self.gets, "--expect", self.expect, "--depth", "32",
                                   "--get-mode", "read", "--json"])
        gets = self.kvd.stats()["gets"] - before
        if not self.check(r.returncode == 0 and rep and rep["errors"] == 0 and rep["mismatches"] == 0,
                          f"{label}: exit 0, no errors, no mismatches"):
            sys.stderr.write(r.stderr.decode(errors="replace")[-2000:])
        self.check(gets == 0, f"{label}: kvd received no GET message ({gets})")
        self.rows.append((label, rep))
        self.gets_by_message.append(gets)

    def restart(self):
        say("restarting kvd on the same data directory ...")
        self.check(self.kvd.stop() == 0, "kvd exits 0 on SIGTERM")
        self.kvd = Kvd(self.kvd_exe, self.addr, self.data)
        words = self.kvd.recovered.split()
        self.recovered = int(words[2]) if len(words) > 2 and words[2].isdigit() else None
        self.recovered_line = self.kvd.recovered.removeprefix("kvd: ").split(" from ")[0]
        self.check(self.recovered == self.acked,
                   f"kvd recovered every acknowledged SET ({self.recovered} of {self.acked})")
        self.onesided("the same after a restart")
        self.check(self.kvd.stop() == 0, "kvd exits 0 on SIGTERM")
        self.kvd = None

    def table(self):
        env = {"guest": "Soft-RoCE in a QEMU guest", "netns": "Soft-RoCE in a network namespace",
               "native": "RDMA device"}.get(self.mode, self.mode)
        print(f"\nrkv demo: kvd on {self.addr} ({env}), --data-dir {self.data} (removed at the end)\n")
        w = max(len(name) for name, _ in self.rows) if self.rows else 10
        head = f"{'run':<{w}} {'ops':>5} {'ops/s':>7} {'p50':>8} {'p99':>8} {'errors':>6} {'mismatches':>10}"
        print(head)
        print("-" * len(head))
        for name, rep in self.rows:
            if rep is None:
                print(f"{name:<{w}} (no report: see above)")
                continue
            lat = rep.get("latency_ns", {})
            print(f"{name:<{w}} {rep['ops']:>5} {rep['ops_per_s']:>7.0f} {duration(lat.get('p50', 0)):>8} "
                  f"{duration(lat.get('p99', 0)):>8} {rep['errors']:>6} {rep['mismatches']:>10}")
        print()
        if getattr(self, "recovered_line", None):
            print(f"restart: kvd {self.recovered_line}; the clients had {self.acked} SETs acknowledged")
        if self.gets_by_message:
            print(f"one-sided: kvd received {sum(self.gets_by_message)} GET messages in those passes "
                  "(each GET was RDMA READs of its index and memory)")
        failed = [w for w, held in self.checks if not held]
        if failed:
            print(f"\nFAILED: {len(failed)} of {len(self.checks)} checks: " + "; ".join(failed))
        else:
            print(f"\nall {len(self.checks)} checks held")
        return 0 if self.checks and not failed else 1

    def close(self):
        if self.kvd is not None:
            self.kvd.stop()
            self.kvd = None
        shutil.rmtree(self.work, ignore_errors=True)


def duration(ns):
    """A latency for people: 850 us, 12.5 ms, 1.37 s."""
    if ns < 1e6:
        return f"{ns / 1e3:.0f} us"
    if ns < 1e9:
        return f"{ns / 1e6:.3g} ms"
    return f"{ns / 1e9:.3g} s"


def count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def inside_main(args):
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_sigterm)
    demo = Demo(args.build)
    try:
        demo.run()
    except Failure as e:
        demo.check(False, str(e).split("\n")[0])
        print(e, file=sys.stderr)
    except subprocess.TimeoutExpired as e:
        demo.check(False, f"timed out: {' '.join(map(str, e.cmd[:3]))}")
    finally:
        demo.close()
    return demo.table()


def main(argv):
    args = parse_args(argv)
    if args.inside:
        return inside_main(args)
    return host_main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
