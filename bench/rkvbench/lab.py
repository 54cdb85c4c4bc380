"""Experiments 6 and 7: the RDMA lab's one-sided GET measurement (bench/onesided) and the cost of
durability (bench/durability), in the same session."""

import csv
import os
import shutil
import sys

from .common import BENCH, MIB, ONESIDED_FABRIC_OP, _last_line, fmt, log, run_timed

# The READ a one-sided GET makes: the key's neighborhood, 8 buckets of 128 bytes
# (proto::kNeighborhoodBytes; a 32 B value and its key are inline in the entry).
NEIGHBORHOOD_BYTES = 1024


class LabExperiments:
    """Mixin of Bench (session.py): uses the session's kvd, build and rows."""

    # -------------------------------------------------------------- experiment 6
    def onesided(self):
        """SETs, GETs by message and GETs by RDMA READ at depth 1 (bench/onesided), 32 B and 64 KiB;
        then 32 B GETs both ways at depth 32 (kvload).

        The lab asks for 100,000 of each; the full mode runs that many for 32 B and
        what the byte budget allows for 64 KiB; the fast mode a few hundred, the smoke run ten."""
        exe = os.path.join(self.build, "bench", "onesided")
        wanted = self.onesided_ops
        for size in (32, 64 * 1024):
            ops = self.ops_for(size, wanted)
            base = {"size": size, "depth": 1, "ops": ops, "seconds": "", "ops_per_s": "", "mean_us": "", "messages_sent": "",
                    "reads_per_get": ""}
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
                        "messages_sent": int(r["messages_sent"]), "reads_per_get": "", "status": "ok", "depth": 1})
        self._onesided_deep()

    def _onesided_deep(self):
        """32 B GETs at depth 32 (issue 12's figure), by RDMA READ (`kvload --get-mode read`: the READs of
        many GETs posted as one chain) and by message, against the session's kvd, read mode first; then
        the fabric's own rate of the READ each one-sided GET makes (`ib_read_bw -s 1024 -t 32`): the
        most one-sided GETs at depth 32 can do on this device, whatever the client does."""
        size, depth = 32, 32
        keys = self.keys_for(size)
        ops = self.ops_for(size, self.measured_deep)
        self.ensure_kvd()
        log(f"one-sided: {ops} GETs of {size} B at depth {depth} by RDMA READ and by message (kvload)")
        self.kvload_run(self.write_workload("os-w.txt", [self._line("set", k, size, 1) for k in keys]), depth,
                        len(keys))
        ml = self.write_workload("os-m.txt", [self._line("get", keys[i % len(keys)], size, i) for i in range(ops)])
        for op, mode in (("GET (RDMA READ)", "read"), ("GET (message)", "rpc")):
            r = self.kvload_run(ml, depth, ops, ("--get-mode", mode))
            row = {"op": op, "size": size, "depth": depth, "ops": ops, "seconds": "", "ops_per_s": "", "mean_us": "",
                   "messages_sent": "", "reads_per_get": ""}
            rep = r["report"]
            if rep is None or int(rep.get("errors", 0)) != 0:
                row["status"] = (f"failed: kvload exit {r['rc']}: {_last_line(r['stderr'])}" if rep is None
                                 else f"failed: {rep['errors']}/{ops} errors")
            else:
                secs = float(rep["seconds"])
                row.update({"seconds": secs, "ops_per_s": int(rep["ops"]) / secs if secs > 0 else "",
                            "mean_us": rep["latency_ns"]["mean"] / 1000, "status": "ok"})
                if mode == "rpc":
                    row["messages_sent"] = int(rep["ops"])
                else:  # a GET the index cannot answer falls back to a message
                    client = rep.get("client", {})
                    row["messages_sent"] = client.get("onesided_fallbacks", "")
                    gets, reads = client.get("onesided_gets"), client.get("onesided_reads")
                    row["reads_per_get"] = reads / gets if gets and reads is not None else ""
            self.rows["onesided.csv"].append(row)
            log(f"  {op} {size} B depth {depth}: {row['status']} {fmt(row['ops_per_s'])} ops/s")
        iters = max(self.perftest_iters, 50)
        p = self._perftest_one("ib_read_bw", NEIGHBORHOOD_BYTES, iters, ("-t", str(depth)))
        self.rows["onesided.csv"].append({
            "op": ONESIDED_FABRIC_OP, "size": NEIGHBORHOOD_BYTES, "depth": depth, "ops": iters, "seconds": "",
            "ops_per_s": p["msg_rate_per_s"], "mean_us": "", "messages_sent": "", "reads_per_get": "",
            "status": p["status"] if p["status"] != "ok" else f"ok ({p['method']})"})
        log(f"  {ONESIDED_FABRIC_OP} {NEIGHBORHOOD_BYTES} B -t {depth}: {p['status']} {fmt(p['msg_rate_per_s'])} READs/s")

    # -------------------------------------------------------------- experiment 7
    def durability(self):
        """kvd --fsync never|batch|always, SETs of 32 B and 64 KiB at depth 1 and 32 (bench/durability).

        The data directories go under the output directory, which in a guest is
        the repository shared over 9p: an fsync there reaches the host's disk,
        not the guest's tmpfs (where fsync would be nearly free)."""
        self.stop_kvd()  # its own kvd per point
        data_root = os.path.join(self.out, "durability-data")
        path = os.path.join(self.tmp, "durability.csv")
        ops = self.durability_ops  # fsync over 9p costs ~10s of ms each
        log(f"durability: --fsync never|batch|always, {ops} SETs per point, data on {data_root}")
        rc, out, err, _ = run_timed([os.path.join(BENCH, "durability"), "--build", self.build, "--ops", str(ops),
                                     "--depths", self.durability_depths, "--sizes", self.durability_sizes,
                                     "--out", path, "--data-root", data_root],
                                    3600, env=dict(os.environ, BENCH_PYTHON=sys.executable))
        shutil.rmtree(data_root, ignore_errors=True)
        fs_line = [l for l in out.splitlines() if l.startswith("# data directory on:")]
        if fs_line:
            self.notes.append("Durability: " + fs_line[0][2:] + ".")
        if rc != 0 or not os.path.exists(path):
            self.rows["durability.csv"].append({"fsync": "", "size": "", "depth": "", "ops": "", "ops_per_s": "",
                                               "p50_us": "", "p99_us": "", "errors": "", "log_fsyncs": "",
                                               "status": f"failed: {_last_line(err or out)}"})
            return
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                size = 65536 if r["size"] == "64k" else int(r["size"])
                self.rows["durability.csv"].append({
                    "fsync": r["fsync"], "size": size, "depth": int(r["depth"]), "ops": int(r["ops"]),
                    "ops_per_s": float(r["ops_per_s"]), "p50_us": float(r["p50_us"]), "p99_us": float(r["p99_us"]),
                    "errors": int(r["errors"]), "log_fsyncs": r["log_fsyncs"],
                    "status": "ok" if r["errors"] == "0" else f"partial: {r['errors']} errors"})
