"""Experiment 8: several servers. 1, 2, 3 kvd on the one device, kvload clients each over the whole
list (`--server a,b,c`: every key on its placement's server), aggregate ops/s."""

import os
import re
import signal
import subprocess

from .common import Proc, _last_line, fmt, log, proc_cpu_seconds, ratio


class ShardExperiments:
    """Mixin of Bench (session.py): uses the session's kvd (the list's first server), kvload and rows."""

    # -------------------------------------------------------------- experiment 8
    def shards(self):
        size, depth = 32, 32
        clients, per_client = self.shard_clients, self.shard_ops
        log(f"shards: {', '.join(map(str, self.shard_counts))} kvd on {self.dev}, {clients} kvload "
            f"client{'s' if clients > 1 else ''} over the list, {size} B, depth {depth}, {per_client} ops each "
            "(SET then GET of each key)")
        extra = []  # (Proc, port) of the kvd beside the session's
        base = None
        try:
            for n in self.shard_counts:
                row = {"servers": n, "clients": clients, "depth": depth, "size": size, "ops_total": "",
                       "errors": "", "max_seconds": "", "aggregate_ops_per_s": "", "speedup_vs_1": "",
                       "ops_per_server": "", "server_cpu_us_per_op": "", "status": ""}
                err = None
                while err is None and 1 + len(extra) < n:
                    err = self._start_shard_kvd(extra)
                self.ensure_kvd()
                if err is None:
                    procs = [self.kvd_proc.p] + [p.p for p, _ in extra[:n - 1]]
                    ports = [self.kvd_port] + [port for _, port in extra[:n - 1]]
                    err = self._shard_point(row, n, procs, ports, size, depth, clients, per_client)
                if err:
                    row["status"] = err
                if n == 1 and row["status"] == "ok":
                    base = row["aggregate_ops_per_s"]
                row["speedup_vs_1"] = ratio(row["aggregate_ops_per_s"] or None, base)
                self.rows["shards.csv"].append(row)
                log(f"  {n} kvd: {row['status']} {fmt(row['aggregate_ops_per_s'])} ops/s "
                    f"(per server {row['ops_per_server']})")
        finally:
            for pr, _ in extra:
                pr.p.send_signal(signal.SIGTERM)
                try:
                    pr.p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pr.kill()
                    pr.p.wait()
        self.notes.append(
            f"Shards (experiment 8): {', '.join(map(str, self.shard_counts))} kvd on the one device, {clients} kvload "
            f"process{'es' if clients > 1 else ''} each over the whole list (`--server a,b,c`, depth 32 across "
            f"the servers). Every kvd and every kvload is one thread, and here they all share "
            f"{os.cpu_count()} CPU{'s' if os.cpu_count() != 1 else ''} (and, in a guest, the one emulated rxe "
            "device): a kvd added brings no core of its own, so the aggregate cannot grow with the servers "
            "and the rows measure what the spread costs (one connection per server, more processes on the "
            "same cores), not scale-out. On separate machines each kvd adds its core and memory. "
            "`ops_per_server`: how placement spread the operations (list order).")

    def _start_shard_kvd(self, extra):
        """One more kvd (as the session's, port 0); appended to extra. An error text, or None."""
        args = [self.kvd, "--bind", self.addr, "--port", "0", "--log-level", "warn"]
        pr = Proc(args, stdout=subprocess.PIPE,
                  stderr=open(os.path.join(self.tmp, f"kvd-shard{len(extra) + 1}.err"), "a"))
        line = pr.p.stdout.readline()
        m = re.search(r"listening on (\S+):(\d+)", line)
        if not m:
            pr.kill()
            pr.p.wait()
            return f"failed: kvd {len(extra) + 2} did not start: {line.strip()}"
        extra.append((pr, int(m.group(2))))
        return None

    def _shard_point(self, row, n, procs, ports, size, depth, clients, per_client):
        """Fills row for n servers; returns an error text or None."""
        servers = ",".join(f"{self.addr}:{p}" for p in ports)
        paths = []
        for c in range(clients):
            keys = [f"s{n}c{c}k{i:03d}" for i in range(self.shard_keys)]
            warm = [self._line("set", k, size, 1) for k in keys]
            # SET, then GET, of each key in turn: every GET finds its key (per-key order holds at depth).
            ml = [self._line("set" if i % 2 == 0 else "get", keys[(i // 2) % len(keys)], size, i)
                  for i in range(per_client)]
            paths.append((self.write_workload(f"sh-w-{n}-{c}.txt", warm),
                          self.write_workload(f"sh-m-{n}-{c}.txt", ml)))
        if not self.smoke:  # the smoke run's measured workload SETs its keys itself
            self._shard_clients(servers, [p[0] for p in paths], depth, self.shard_keys)
        cpu0 = [proc_cpu_seconds(p.pid) for p in procs]
        results = self._shard_clients(servers, [p[1] for p in paths], depth, per_client)
        cpu1 = [proc_cpu_seconds(p.pid) for p in procs]
        reps = [r["report"] for r in results]
        if any(r is None for r in reps):
            bad = [r for r in results if r["report"] is None][0]
            return f"failed: {sum(r is None for r in reps)}/{clients} clients: " + _last_line(bad["stderr"])
        errors = sum(int(r["errors"]) for r in reps)
        ok = sum(int(r["ops"]) for r in reps) - errors
        maxs = max(float(r["seconds"]) for r in reps)
        per_server = [0] * n
        for r in reps:
            for i, s in enumerate(r.get("shards", [])[:n]):
                per_server[i] += int(s["ops"])
        row.update({"ops_total": ok, "errors": errors, "max_seconds": maxs,
                    "aggregate_ops_per_s": ok / maxs if maxs > 0 else "",
                    "ops_per_server": "/".join(map(str, per_server)),
                    "status": "ok" if errors == 0 else f"partial: {errors} errors"})
        if None not in cpu0 and None not in cpu1 and ok > 0:
            row["server_cpu_us_per_op"] = 1e6 * sum(b - a for a, b in zip(cpu0, cpu1)) / ok
        return None

    def _shard_clients(self, servers, paths, depth, nops):
        procs = [Proc([self.kvload, "--server", servers, "--file", p, "--json", "--depth", str(depth), "-q"])
                 for p in paths]
        return self._wait_clients(procs, nops)
