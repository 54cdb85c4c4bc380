"""Experiment 6: the RDMA lab's one-sided GET measurement (bench/onesided), in the same session."""

import csv
import os

from .common import MIB, _last_line, log, run_timed


class LabExperiments:
    """Mixin of Bench (session.py): uses the session's kvd, build and rows."""

    # -------------------------------------------------------------- experiment 6
    def onesided(self):
        """SETs, GETs by message and GETs by RDMA READ at depth 1 (bench/onesided), 32 B and 64 KiB.

        The lab asks for 100,000 of each; the full mode runs that many for 32 B and
        what the byte budget allows for 64 KiB; the fast mode a few hundred."""
        exe = os.path.join(self.build, "bench", "onesided")
        wanted = 300 if self.fast else 100_000
        for size in (32, 64 * 1024):
            ops = self.ops_for(size, wanted)
            base = {"size": size, "ops": ops, "seconds": "", "ops_per_s": "", "mean_us": "", "messages_sent": ""}
            if not os.access(exe, os.X_OK):
                for op in ("SET", "GET (message)", "GET (RDMA READ)"):
                    self.rows["onesided.csv"].append(dict(base, op=op, status="n/a: no bench/onesided in this build"))
                continue
            self.ensure_kvd()
            path = os.path.join(self.tmp, f"onesided-{size}.csv")
            log(f"one-sided: {ops} SETs, GETs by message, GETs by RDMA READ at {size} B")
            rc, out, err, _ = run_timed([exe, "--server", self.addr, "--port", str(self.kvd_port), "--ops", str(ops),
                                         "--sizes", str(size), "--csv", path], 600 + ops * (size / MIB + 0.05))
            if rc != 0 or not os.path.exists(path):
                for op in ("SET", "GET (message)", "GET (RDMA READ)"):
                    self.rows["onesided.csv"].append(dict(base, op=op, status=f"failed: {_last_line(err or out)}"))
                continue
            with open(path, newline="") as f:
                for r in csv.DictReader(f):
                    self.rows["onesided.csv"].append({
                        "op": r["op"], "size": size, "ops": int(r["ops"]), "seconds": float(r["seconds"]),
                        "ops_per_s": float(r["ops_per_s"]), "mean_us": float(r["mean_us"]),
                        "messages_sent": int(r["messages_sent"]), "status": "ok"})
