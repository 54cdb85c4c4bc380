"""Shared by the bench modules: paths, CSV headers, logging, child processes, number formatting."""

import csv
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time



REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
BENCH = os.path.join(REPO, "bench")
MIB = 1 << 20

# Every CSV's header: --check compares against these.
# onesided.csv's reference row: the fabric's rate of the READ a one-sided GET makes.
ONESIDED_FABRIC_OP = "ib_read_bw"
HEADERS = {
    "sweep.csv": [
        "op", "size", "depth", "depth_effective", "path", "control_msgs_per_op", "warmup_ops", "ops", "errors", "seconds",
        "ops_per_s", "mbps", "mean_us", "p50_us", "p99_us", "client_cpu_us_per_op", "server_cpu_us_per_op",
        "ref_tool", "ref_mbps", "ratio", "status"],
    "perftest.csv": ["tool", "size", "iters", "msg_rate_per_s", "mbps", "method", "wall_seconds",
                     "perftest_msg_rate_per_s", "perftest_MBps", "status"],
    "latency.csv": [
        "op", "size", "kv_mean_us", "kv_p50_us", "kv_p99_us", "ref_tool", "ref_usec_per_iter", "ratio_mean",
        "ratio_p50", "status"],
    "busypoll.csv": [
        "mode", "op", "size", "depth", "ops", "ops_per_s", "p50_us", "p99_us",
        "client_cpu_us_per_op", "server_cpu_us_per_op", "status"],
    "scaling.csv": [
        "op", "clients", "depth", "depth_effective", "size", "ops_total", "errors", "max_seconds",
        "aggregate_ops_per_s", "sum_client_ops_per_s", "speedup_vs_1", "status"],
    "shards.csv": [
        "servers", "clients", "depth", "size", "ops_total", "errors", "max_seconds", "aggregate_ops_per_s",
        "speedup_vs_1", "ops_per_server", "server_cpu_us_per_op", "status"],
    "durability.csv": ["fsync", "size", "depth", "ops", "ops_per_s", "p50_us", "p99_us", "errors", "log_fsyncs",
                       "status"],
    "onesided.csv": ["op", "size", "depth", "ops", "seconds", "ops_per_s", "mean_us", "messages_sent",
                     "reads_per_get", "status"],
    "tcp.csv": [
        "system", "transport", "tool", "op", "size", "depth", "concurrency", "ops", "ops_per_s",
        "mean_us", "p50_us", "p99_us", "server_cpu_us_per_op", "client_cpu_us_per_op", "status"],
    "idle.csv": ["connections", "rss_bytes", "rss_more_bytes", "conn_bytes", "registered_bytes", "conn_bytes_each",
                 "heap_bytes", "status"],
}
SUMMARY_TABLE_HEADER = "| experiment | KV figure | KV value | reference | reference value | ratio KV/ref |"
PLOTS = ["throughput.png", "latency.png", "scaling.png", "tcp.png"]



def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def kvd_listening(stdout, seconds=120):
    """Reads a starting kvd's stdout (text) up to its "listening on ADDR:PORT"
    line, for at most `seconds` between lines: (port, "") once it is seen,
    (None, the last line it printed) if the output ended or the time ran out
    first. Every bench script that starts kvd with --port 0 learns its port here."""
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        line = stdout.readline()
        if not line:
            break
        m = re.search(r"listening on (\S+):(\d+)", line)
        if m:
            return int(m.group(2)), ""
        last = line.strip() or last
    return None, last


def start_together(files, alive, timeout):
    """kvload --wait-start: waits until each of `files` names the pid of a
    connected kvload (or `alive()` turns false: one exited first; or
    `timeout` seconds passed), then sends SIGUSR1 to every pid read, so
    their runs start together, and removes the files. Returns how many
    were started."""
    deadline = time.monotonic() + timeout
    pids = {}
    while len(pids) < len(files) and alive() and time.monotonic() < deadline:
        for f in files:
            if f not in pids:
                try:
                    with open(f) as fh:
                        pids[f] = int(fh.read().strip())
                except (OSError, ValueError):
                    pass  # not there yet, or being written
        if len(pids) < len(files):
            time.sleep(0.02)
    for pid in pids.values():
        os.kill(pid, signal.SIGUSR1)
    for f in files:
        if os.path.exists(f):
            os.remove(f)
    return len(pids)


def die(msg, code=1):
    print(f"bench/run: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)



def default_build():
    for b in ("build-bench", "build"):
        if os.path.exists(os.path.join(REPO, b, "apps", "kvd")):
            return os.path.join(REPO, b)
    return os.path.join(REPO, "build-bench")


def required_tools():
    return ["ib_send_bw", "ib_write_bw", "ib_read_bw", "ibv_rc_pingpong", "ibv_devices",
            "redis-server", "redis-benchmark", "redis-cli", "memcached", "memcaslap", "gnuplot"]


def missing_tools():
    return [t for t in required_tools() if shutil.which(t) is None]



# ------------------------------------------------------------------ processes
class Proc:
    """A child in its own session (killed as a group) whose rusage we collect."""

    def __init__(self, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=None, env=None, stdin=None):
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=stdout, stderr=stderr, cwd=cwd, env=env, stdin=stdin,
                                  start_new_session=True, text=True)
        self.rusage = None
        self.rc = None

    def wait(self, timeout):
        """Waits (killing the group at the timeout); returns (rc, stdout, stderr)."""
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.p.communicate()
            err = (err or "") + f"\nbench: timed out after {timeout:.0f}s: {' '.join(self.argv[:3])}\n"
            self.rc = 124
            return 124, out or "", err
        self.rc = self.p.returncode
        return self.rc, out or "", err or ""

    def kill(self, sig=signal.SIGKILL):
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass


def run_timed(argv, timeout, env=None):
    """Runs argv to completion; returns (rc, stdout, stderr, cpu_seconds) where
    cpu_seconds is the child's user+system time from getrusage(RUSAGE_CHILDREN)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pr = Proc(argv, env=env)
    rc, out, err = pr.wait(timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, out, err, cpu


def proc_cpu_seconds(pid):
    """user+system CPU of a running process (the counters getrusage reports), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is state (field 3); utime is field 14, stime 15.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def fmt(x, digits=3):
    if x is None or x == "":
        return ""
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x)
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 1000:
        return f"{x:.0f}"
    if mag >= 1:
        return f"{x:.{max(digits - 1, 1)}f}"
    return f"{x:.{digits}g}"


def ratio(a, b):
    if a in (None, "") or b in (None, "") or not b:
        return None
    return a / b



def _hsize(n):
    n = int(n)
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def _last_line(text):
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return lines[-1][:200] if lines else "(no output)"


def _parse_redis_csv(out, op):
    # redis-benchmark 7 --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
    # "p95_latency_ms","p99_latency_ms","max_latency_ms"
    rows = list(csv.reader([l for l in out.splitlines() if l.startswith('"')]))
    if len(rows) < 2:
        return None
    head = rows[0]
    for r in rows[1:]:
        if r and r[0].upper() == op.upper():
            d = dict(zip(head, r))
            try:
                return {"ops_per_s": float(d["rps"]), "mean_us": float(d["avg_latency_ms"]) * 1000,
                        "p50_us": float(d["p50_latency_ms"]) * 1000, "p99_us": float(d["p99_latency_ms"]) * 1000}
            except (KeyError, ValueError):
                return None
    return None
