"""Experiments 3 and 4: event-driven against --busy-poll, and clients scaling."""

import json
import os
import re
import subprocess

from .common import Proc, _last_line, fmt, log, ratio


class LoadExperiments:
    """Mixin of Bench (session.py): uses the session's kvd, kvload and rows."""

    # -------------------------------------------------------------- experiment 3
    def busypoll(self):
        size = 32
        sweep = {(r["op"], r["size"], r["depth"]): r for r in self.rows["sweep.csv"]}
        log("busy-poll: " + ("--busy-poll in this build: measuring both modes" if self.busy_poll else
                             "kvd/kvload have no --busy-poll in this build: event mode only (from the sweep)"))
        for depth in self.depths:
            for op in ("get", "set"):
                s = sweep.get((op, size, depth))
                row = {"mode": "event", "op": op, "size": size, "depth": depth}
                row.update(self._bp_fields(s))
                self.rows["busypoll.csv"].append(row)
                bp = {"mode": "busy-poll", "op": op, "size": size, "depth": depth, "ops": "", "ops_per_s": "",
                      "p50_us": "", "p99_us": "", "client_cpu_us_per_op": "", "server_cpu_us_per_op": "",
                      "status": "n/a: --busy-poll not available in this build"}
                if self.busy_poll:
                    bp.update(self._bp_measure(op, size, depth))
                self.rows["busypoll.csv"].append(bp)
        for events in (False, True):
            r = self.pingpong.get((32, events), {"status": "failed: not run"})
            self.rows["busypoll.csv"].append({
                "mode": "ibv_rc_pingpong " + ("-e (event)" if events else "(busy-poll)"), "op": "pingpong",
                "size": 32, "depth": 1, "ops": r.get("iters", ""),
                "ops_per_s": (1e6 / r["usec"]) if r.get("usec") else "", "p50_us": r.get("usec") or "",
                "p99_us": "", "client_cpu_us_per_op": r.get("cpu_us_per_iter") or "", "server_cpu_us_per_op": "",
                "status": r["status"] + ("" if r["status"] != "ok" else " (usec/iter as p50)")})

    @staticmethod
    def _bp_fields(s):
        if s is None:
            return {"ops": "", "ops_per_s": "", "p50_us": "", "p99_us": "", "client_cpu_us_per_op": "",
                    "server_cpu_us_per_op": "", "status": "failed: no sweep point"}
        return {k: s[k] for k in ("ops", "ops_per_s", "p50_us", "p99_us", "client_cpu_us_per_op",
                                  "server_cpu_us_per_op", "status")}

    def _bp_measure(self, op, size, depth):
        # A kvd in busy-poll mode for this point only.
        self.stop_kvd()
        saved = self.kvd
        try:
            args = [self.kvd, "--bind", self.addr, "--port", "0", "--log-level", "warn", "--busy-poll"]
            pr = Proc(args, stdout=subprocess.PIPE, stderr=open(os.path.join(self.tmp, "kvd.err"), "a"))
            line = pr.p.stdout.readline()
            m = re.search(r"listening on (\S+):(\d+)", line)
            if not m:
                pr.kill()
                return {"status": f"failed: kvd --busy-poll did not start: {line.strip()}"}
            self.kvd_proc, self.kvd_port = pr, int(m.group(2))
            keys = self.keys_for(size)
            wl = [self._line("set", k, size, 1) for k in keys]
            ml = [self._line(op, keys[i % len(keys)], size, i) for i in range(self.measured)]
            self.kvload_run(self.write_workload("bp-w.txt", wl), depth, len(wl), ["--busy-poll"])
            r = self.kvload_run(self.write_workload("bp-m.txt", ml), depth, len(ml), ["--busy-poll"])
            row = self._sweep_row(op, size, depth, len(wl), len(ml), r)
            return {k: row[k] for k in ("ops", "ops_per_s", "p50_us", "p99_us", "client_cpu_us_per_op",
                                        "server_cpu_us_per_op", "status")}
        finally:
            self.stop_kvd()
            self.kvd = saved

    # -------------------------------------------------------------- experiment 4
    def scaling(self):
        size, depth = 32, 32
        per_client = self.scaling_ops
        log(f"scaling: 1, 2, 4, 8 concurrent kvload clients, {size} B, depth {depth}, {per_client} ops each "
            "(alternating SET and GET)")
        base = None
        self.ensure_kvd()
        for n in (1, 2, 4, 8):
            paths = []
            for c in range(n):
                keys = [f"c{c}k{i:03d}" for i in range(self.scaling_keys)]
                wl = [self._line("set", k, size, 1) for k in keys]
                ml = [self._line("set" if i % 2 == 0 else "get", keys[i % len(keys)], size, i)
                      for i in range(per_client)]
                paths.append((self.write_workload(f"sc-w-{n}-{c}.txt", wl), self.write_workload(f"sc-m-{n}-{c}.txt", ml)))
            # warm-up (concurrently), then the measured runs start together
            self._concurrent([p[0] for p in paths], depth, self.scaling_keys)
            results = self._concurrent([p[1] for p in paths], depth, per_client)
            row = {"clients": n, "depth": depth, "depth_effective": "", "size": size, "ops_total": "", "errors": "",
                   "max_seconds": "", "aggregate_ops_per_s": "", "sum_client_ops_per_s": "", "speedup_vs_1": "",
                   "status": ""}
            reps = [r["report"] for r in results]
            if any(r is None for r in reps):
                bad = [r for r in results if r["report"] is None][0]
                row["status"] = f"failed: {sum(r is None for r in reps)}/{n} clients: " + _last_line(bad["stderr"])
            else:
                errors = sum(int(r["errors"]) for r in reps)
                ok = sum(int(r["ops"]) for r in reps) - errors
                maxs = max(float(r["seconds"]) for r in reps)
                row.update({"depth_effective": self.effective_depth(depth, reps[0]), "ops_total": ok,
                            "errors": errors, "max_seconds": maxs,
                            "aggregate_ops_per_s": ok / maxs if maxs > 0 else "",
                            "sum_client_ops_per_s": sum((int(r["ops"]) - int(r["errors"])) / float(r["seconds"])
                                                        for r in reps if float(r["seconds"]) > 0),
                            "status": "ok" if errors == 0 else f"partial: {errors} errors"})
                if n == 1:
                    base = row["aggregate_ops_per_s"]
                row["speedup_vs_1"] = ratio(row["aggregate_ops_per_s"] or None, base)
            self.rows["scaling.csv"].append(row)
            log(f"  {n} clients: {row['status']} {fmt(row['aggregate_ops_per_s'])} ops/s")

    def _concurrent(self, paths, depth, nops):
        self.ensure_kvd()
        procs = []
        for p in paths:
            argv = [self.kvload, "--server", self.addr, "--port", str(self.kvd_port), "--file", p, "--json",
                    "--depth", str(depth), "-q"]
            procs.append(Proc(argv))
        timeout = 240 + nops * len(paths) * (0.05 if self.sanitized else 0.02)
        results = []
        for pr in procs:
            rc, out, err = pr.wait(timeout)
            rep = None
            for line in out.splitlines():
                if line.strip().startswith("{"):
                    try:
                        rep = json.loads(line)
                    except ValueError:
                        pass
            results.append({"rc": rc, "report": rep, "stderr": err})
        return results
