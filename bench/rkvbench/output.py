"""Outputs: one CSV per experiment, gnuplot PNGs, summary.md with the ratio table."""

import csv
import os
import subprocess

from .common import HEADERS, MIB, ONESIDED_FABRIC_OP, PLOTS, SUMMARY_TABLE_HEADER, _hsize, _last_line, fmt, log, ratio


class Outputs:
    """Mixin of Bench (session.py): uses the session's kvd, kvload and rows."""

    # -------------------------------------------------------------- output
    def write_csvs(self):
        for name, header in HEADERS.items():
            with open(os.path.join(self.out, name), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                for r in self.rows[name]:
                    w.writerow([fmt(r.get(h, ""), 4) for h in header])
        with open(os.path.join(self.out, "environment.txt"), "w") as f:
            for k, v in self.env.items():
                f.write(f"{k}: {v}\n")

    def plots(self):
        d = self.out
        sw = self.rows["sweep.csv"]
        pt = self.rows["perftest.csv"]
        # throughput data: one block per series (gnuplot "index")
        series = []
        for op in ("set", "get"):
            for depth in self.depths:
                pts = [(r["size"], r["mbps"]) for r in sw if r["op"] == op and r["depth"] == depth
                       and r["status"].startswith(("ok", "partial")) and r["mbps"]]
                eff = [r["depth_effective"] for r in sw if r["op"] == op and r["depth"] == depth]
                label = f"kvload {op.upper()} depth {depth}" + (f" (effective {eff[0]})" if eff and eff[0] != depth else "")
                series.append((label, pts))
        for tool in ("ib_send_bw", "ib_write_bw", "ib_read_bw"):
            series.append((tool, [(r["size"], r["mbps"]) for r in pt if r["tool"] == tool and r["status"] == "ok"]))
        with open(os.path.join(d, "throughput.dat"), "w") as f:
            for label, pts in series:
                f.write(f"# {label}\n")
                for x, y in pts or [("NaN", "NaN")]:
                    f.write(f"{x} {y}\n")
                f.write("\n\n")
        styles = ["lc rgb '#1f77b4' pt 7", "lc rgb '#1f77b4' pt 5 dt 2", "lc rgb '#d62728' pt 7",
                  "lc rgb '#d62728' pt 5 dt 2", "lc rgb '#2ca02c' pt 9 lw 2", "lc rgb '#9467bd' pt 11 lw 2",
                  "lc rgb '#ff7f0e' pt 13 lw 2"]
        plots = ", \\\n     ".join(
            f"'throughput.dat' index {i} using 1:2 with linespoints {styles[i % len(styles)]} title \"{label}\" noenhanced"
            for i, (label, _) in enumerate(series))
        na = [r for r in sw if r["status"].startswith("n/a")]
        na_note = ""
        if na:
            first = min(r["size"] for r in na)
            na_note = (f"set label 1 \"kvload points from {_hsize(first)} up: n/a (not supported by this build)\" "
                       "at graph 0.02, graph 0.04 font ',9'\n")
        env = self._plot_env()
        self._gnuplot("throughput.gp", f"""
set terminal pngcairo size 1100,700 font 'DejaVu Sans,10'
set output 'throughput.png'
set title "Throughput against value size: KV beside perftest\\n{{/*0.8 {env}}}"
set logscale x 2
set logscale y 10
set format x '%.0s%cB'
set xlabel 'value / message size (bytes, log2)'
set ylabel 'Mbit/s (value bytes, log10)'
set key outside right top
set grid
{na_note}plot {plots}
""")
        # latency bars
        lat = self.rows["latency.csv"]
        with open(os.path.join(d, "latency.dat"), "w") as f:
            f.write("label p50 p99\n")
            for r in lat:
                if r["op"] == "pingpong":
                    lab = f"{r['ref_tool'].replace('ibv_rc_pingpong', 'pingpong')} {_hsize(r['size'])}"
                    v = r["ref_usec_per_iter"] if r["status"] == "ok" else 0
                    f.write(f"\"{lab}\" {v or 0} 0\n")
                else:
                    lab = f"kv {r['op'].upper()} {_hsize(r['size'])}" + ("" if r["status"] == "ok" else " (n/a)")
                    f.write(f"\"{lab}\" {r['kv_p50_us'] or 0} {r['kv_p99_us'] or 0}\n")
        self._gnuplot("latency.gp", f"""
set terminal pngcairo size 1100,650 font 'DejaVu Sans,10'
set output 'latency.png'
set title "Latency at depth 1: kvload p50/p99 beside ibv_rc_pingpong usec/iter (round trip)\\n{{/*0.8 {env}}}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set ylabel 'microseconds'
set logscale y 10
set yrange [1:*]
set xtics rotate by -30 font ',9'
set grid ytics
set key top left
plot 'latency.dat' using 2:xtic(1) title 'p50 (pingpong: usec/iter)' lc rgb '#1f77b4', \\
     '' using 3 title 'p99' lc rgb '#ff7f0e'
""")
        sc = [r for r in self.rows["scaling.csv"] if r["op"] == "mixed" and r["status"].startswith(("ok", "partial"))]
        with open(os.path.join(d, "scaling.dat"), "w") as f:
            base = sc[0]["aggregate_ops_per_s"] if sc and sc[0]["clients"] == 1 else None
            for r in sc or [{"clients": "NaN", "aggregate_ops_per_s": "NaN"}]:
                ideal = base * r["clients"] if base else "NaN"
                f.write(f"{r['clients']} {r['aggregate_ops_per_s']} {ideal}\n")
        self._gnuplot("scaling.gp", f"""
set terminal pngcairo size 900,600 font 'DejaVu Sans,10'
set output 'scaling.png'
set title "Clients scaling: aggregate ops/s, 32 B values, depth 32, alternating SET/GET\\n{{/*0.8 {env}}}"
set xlabel 'concurrent kvload clients'
set ylabel 'aggregate ops/s'
set xtics (1, 2, 4, 8)
set xrange [0.5:8.5]
set yrange [0:*]
set grid
set key top left
plot 'scaling.dat' using 1:2 with linespoints lw 2 pt 7 title 'kvd (one thread)', \\
     '' using 1:3 with lines dt 2 lc rgb 'gray' title 'linear from 1 client'
""")
        tc = self.rows["tcp.csv"]
        with open(os.path.join(d, "tcp.dat"), "w") as f:
            f.write("label rdmakv redis memcached\n")
            for size in self.tcp_sizes:
                for depth in self.depths:
                    for op in ("set", "get"):
                        vals = []
                        for sysname in ("rdmakv", "redis", "memcached"):
                            r = [x for x in tc if x["system"] == sysname and x["size"] == size
                                 and x["depth"] == depth and x["op"] == op]
                            v = r[0]["ops_per_s"] if r and str(r[0]["status"]).startswith("ok") else 0
                            vals.append(v or 0)
                        f.write(f"\"{op.upper()} {_hsize(size)} d{depth}\" {vals[0]} {vals[1]} {vals[2]}\n")
        self._gnuplot("tcp.gp", f"""
set terminal pngcairo size 1100,650 font 'DejaVu Sans,10'
set output 'tcp.png'
set title "RDMA KV against TCP stores on 127.0.0.1 (same session; 0 = n/a)\\n{{/*0.8 {env}}}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel 'ops/s'
set yrange [0:*]
set grid ytics
set key top right
set xtics font ',9'
plot 'tcp.dat' using 2:xtic(1) title 'rdmakv (kvload)' lc rgb '#1f77b4', \\
     '' using 3 title 'redis (redis-benchmark, pipeline = depth)' lc rgb '#d62728', \\
     '' using 4 title 'memcached (memcaslap, connections = depth)' lc rgb '#2ca02c'
""")

    def _plot_env(self):
        e = self.env
        return f"{e['device']}, {e['mode'].split(' ')[0]}, {e['date']}".replace('"', "'")

    def _gnuplot(self, name, text):
        path = os.path.join(self.out, name)
        with open(path, "w") as f:
            f.write(text.lstrip())
        r = subprocess.run(["gnuplot", name], cwd=self.out, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            self.notes.append(f"gnuplot {name} failed: {_last_line(r.stderr)}")
            log(f"gnuplot {name}: {r.stderr.strip()[-400:]}")

    def _targets(self):
        """Issue 12's figures, each a ratio of this session, with the bound it asks for."""
        L = ["## Targets (issue 12)\n",
             "| figure | this store | reference, same session | ratio | wanted | met |", "|---|---|---|---|---|---|"]

        def ok(r):
            return r is not None and str(r.get("status", "")).startswith("ok")

        def one(rows, **kw):
            got = [r for r in rows if all(r.get(k) == v for k, v in kw.items())]
            return got[0] if got else None

        def row(name, kv, kv_text, ref, ref_text, want, bound, lower_is_better=False):
            if kv is None or (ref is None and not lower_is_better):
                L.append(f"| {name} | {kv_text or 'not measured'} | {ref_text or 'not measured'} | | {want} | "
                         "not measured in this mode |")
                return
            q = ratio(kv, ref) if not lower_is_better else kv
            met = (q is not None) and (q < bound if lower_is_better else q >= bound)
            L.append(f"| {name} | {kv_text} | {ref_text} | {'' if lower_is_better else fmt(q)} | {want} | "
                     f"{'yes' if met else 'no'} |")

        tc = self.rows["tcp.csv"]
        for depth, want, bound in ((1, "≥ 5", 5.0), (32, "≥ 1.0", 1.0)):
            for op in ("set", "get"):
                k = one(tc, system="rdmakv", op=op, size=32, depth=depth)
                r = one(tc, system="redis", op=op, size=32, depth=depth)
                k, r = (k if ok(k) else None), (r if ok(r) else None)
                row(f"32 B {op.upper()} depth {depth}, default flags / redis-benchmark `-P {depth}`",
                    k and k["ops_per_s"], k and f"{fmt(k['ops_per_s'])} ops/s ({k['ops']} ops)",
                    r and r["ops_per_s"], r and f"{fmt(r['ops_per_s'])} ops/s ({r['ops']} ops)", want, bound)
            if depth == 1:
                idle = one(self.rows["busypoll.csv"], mode="idle: default")
                v = idle["server_cpu_us_per_op"] if ok(idle) else None
                row("idle kvd, default flags, one connection open (% of a core)", v,
                    "" if v is None else f"{fmt(v)} %", None, "", "< 2 %", 2.0,
                    lower_is_better=True)
        sw = self.rows["sweep.csv"]
        for op, tool in (("set", "ib_read_bw"), ("get", "ib_write_bw")):
            k = one(sw, op=op, size=MIB, depth=self.large_depth)
            k = k if ok(k) and k.get("ref_mbps") not in (None, "") else None
            row(f"1 MiB {op.upper()} depth {self.large_depth} / `{tool}` 1 MiB",
                k and k["mbps"], k and f"{fmt(k['mbps'])} Mbit/s",
                k and k["ref_mbps"], k and f"{fmt(k['ref_mbps'])} Mbit/s", "≥ 0.9", 0.9)
        osd = self.rows["onesided.csv"]
        k = one(osd, op="GET (RDMA READ)", size=32, depth=32)
        r = one(osd, op="GET (message)", size=32, depth=32)
        k, r = (k if ok(k) else None), (r if ok(r) else None)
        row("32 B GET by RDMA READ depth 32 / GET by message depth 32", k and k["ops_per_s"],
            k and f"{fmt(k['ops_per_s'])} ops/s ({k['ops']} ops)", r and r["ops_per_s"],
            r and f"{fmt(r['ops_per_s'])} ops/s", "≥ 1.0", 1.0)
        L.append(self._server_cpu_row())
        L.append("")
        return L

    def _targets31(self):
        """Issue 31's figures (many clients, medium values, one READ per one-sided GET, server CPU), each
        against its reference of this session; what no experiment measures yet says so."""
        L = ["## Targets (issue 31)\n",
             "| figure | this store | reference, same session | ratio | wanted | met |", "|---|---|---|---|---|---|"]

        def ok(r):
            return r is not None and str(r.get("status", "")).startswith("ok")

        def one(rows, **kw):
            got = [r for r in rows if all(r.get(k) == v for k, v in kw.items()) and ok(r)]
            return got[0] if got else None

        def row(name, q, kv_text, ref_text, want, met):
            met = met if isinstance(met, str) else ('not measured in this mode' if met is None
                                                    else 'yes' if met else 'no')
            L.append(f"| {name} | {kv_text} | {ref_text} | {'' if q is None else fmt(q)} | {want} | {met} |")

        top = max(self.scaling_clients)
        sc = one(self.rows["scaling.csv"], op="mixed", clients=top)
        q = sc and sc.get("speedup_vs_1")
        q = float(q) if q not in (None, "") else None
        row(f"{top} kvload processes ÷ 1, 32 B, depth 32, aggregate (alternating SET/GET)", q,
            sc and f"{fmt(sc['aggregate_ops_per_s'])} ops/s" or "not measured", "1 process of the same run",
            "≥ 0.5", None if q is None else q >= 0.5)
        for op in ("set", "get"):
            k = one(self.rows["scaling.csv"], op=op, clients=top)
            q = k and k.get("speedup_vs_1")
            q = float(q) if q not in (None, "") else None
            row(f"{top} kvload processes ÷ 1, 32 B {op.upper()}, depth 32, aggregate", q,
                k and f"{fmt(k['aggregate_ops_per_s'])} ops/s" or "not measured", "1 process of the same run",
                "≥ 0.5", None if q is None else q >= 0.5)
            r = one(self.rows["tcp.csv"], system="redis", op=op, size=32, concurrency=f"{top} processes, pipeline 32")
            q = ratio(k["aggregate_ops_per_s"], r["ops_per_s"]) if k and r else None
            row(f"{top} kvload processes / {top} redis-benchmark processes `-P 32`, 32 B {op.upper()}, aggregate", q,
                k and f"{fmt(k['aggregate_ops_per_s'])} ops/s" or "not measured",
                r and f"{fmt(r['ops_per_s'])} ops/s" or "not measured", "≥ 1.0", None if q is None else q >= 1.0)
        for size in (4096, 65536):
            for op, tool in (("set", "ib_read_bw"), ("get", "ib_write_bw")):
                k = one(self.rows["sweep.csv"], op=op, size=size, depth=32)
                q = k and k.get("ratio")
                q = float(q) if q not in (None, "") else None
                row(f"{size // 1024} KiB {op.upper()} depth 32 / `{tool} -s {size}` (operations per second)", q,
                    k and f"{fmt(k['ops_per_s'])} ops/s" or "not measured",
                    k and k.get("ref_mbps") not in (None, "") and f"{fmt(k['ref_mbps'])} Mbit/s" or "not measured",
                    "≥ 0.8", None if q is None else q >= 0.8)
                c = k and k.get("control_msgs_per_op")
                c = float(c) if c not in (None, "") else None
                row(f"control messages per {size // 1024} KiB {op.upper()}, depth 32 (client counters: requests "
                    "sent + replies received, per operation)", None,
                    "not measured" if c is None else f"{fmt(c)} per op",
                    "SET: 2 by the server's READ (kvload's default), 1 into a grant (`--grants on`, slower so far: "
                    "docs/performance.md); GET: 1, the reply in the WRITE's immediate",
                    "≤ 1.0 (half of 2)" if op == "set" else "≤ 1.0",
                    None if c is None else c <= 1.0)
        osd = self.rows["onesided.csv"]
        k = one(osd, op="GET (RDMA READ)", size=32, depth=32)
        r = one(osd, op="GET (message)", size=32, depth=32)
        rpg = k and k.get("reads_per_get")
        rpg = float(rpg) if rpg not in (None, "") else None
        row("RDMA READs per 32 B one-sided GET, depth 32 (client counters)", None,
            "not measured" if rpg is None else f"{fmt(rpg)} READs per GET", "", "≤ 1.1",
            None if rpg is None else rpg <= 1.1)
        q = ratio(k["ops_per_s"], r["ops_per_s"]) if k and r else None
        row("32 B GET by RDMA READ / GET by message, depth 32", q,
            k and f"{fmt(k['ops_per_s'])} ops/s" or "not measured", r and f"{fmt(r['ops_per_s'])} ops/s" or "",
            "≥ 0.6", None if q is None else q >= 0.6)
        # What bounds the row above on this device: a one-sided GET is one READ of the
        # key's neighborhood, so it cannot outrun the fabric's rate of that READ.
        fab = one(osd, op=ONESIDED_FABRIC_OP)
        fab_text = fab and f"{fmt(fab['ops_per_s'])} READs/s" or "not measured"
        q = ratio(k["ops_per_s"], fab["ops_per_s"]) if k and fab else None
        row(f"32 B GET by RDMA READ, depth 32 / `ib_read_bw -s {fab['size'] if fab else 1024} -t 32` "
            "(the one READ each makes), operations per second", q,
            k and f"{fmt(k['ops_per_s'])} ops/s" or "not measured", fab_text, "(its bound: 1.0)", "a bound, not a target")
        q = ratio(fab["ops_per_s"], r["ops_per_s"]) if fab and r else None
        row("the most the fabric allows for GET by RDMA READ / GET by message: "
            f"`{ONESIDED_FABRIC_OP}`'s READs/s / GETs by message/s", q, fab_text,
            r and f"{fmt(r['ops_per_s'])} ops/s" or "", "≥ 0.6 for the target above to be reachable",
            "a bound, not a target")
        idle = [r for r in self.rows["idle.csv"] if ok(r)]
        base = next((r for r in idle if r["connections"] == 0), None)
        most = max(idle, key=lambda r: r["connections"], default=None)
        if base is None or most is None or most["connections"] == 0:
            row("kvd's memory with 1,000 idle connections over none", None, "not measured", "", "≤ 64 MiB", None)
        else:
            registered = most["registered_bytes"] - base["registered_bytes"]
            more = max(most["rss_more_bytes"], registered)
            row(f"kvd's memory with {most['connections']:,} idle connections over none (RSS and registered)", None,
                f"RSS +{fmt(most['rss_more_bytes'] / MIB)} MiB, registered +{fmt(registered / MIB)} MiB",
                "kvd with none, same run", "≤ 64 MiB at 1,000",
                None if most["connections"] < 1000 else more <= 64 * MIB)
        ns = [float(c["ns_per_op_median"]) for c in self._server_cpu_cases()]
        row("server CPU per 32 B op, natively, worst case (`bench/cpu`)", None,
            "not measured" if not ns else f"{fmt(max(ns))} ns ({fmt(min(ns))}-{fmt(max(ns))} over {len(ns)} cases)",
            "", "≤ 150 ns", None if not ns else max(ns) <= 150)
        L.append("")
        return L

    def _server_cpu_cases(self):
        """bench/cpu's cpu.csv rows of 32 B cases with a timing, this session's (empty if it did not run)."""
        try:
            with open(os.path.join(self.out, "cpu", "cpu.csv"), newline="") as f:
                return [r for r in csv.DictReader(f) if r.get("value_size") == "32" and r.get("ns_per_op_median")]
        except OSError:
            return []

    def _server_cpu_row(self):
        """Issue 12's server cost from bench/cpu's cpu.csv (bench/run ran it on the host before the guest)."""
        name = "server CPU per 32 B op, natively (`bench/cpu` on the host, before the guest)"
        rows = self._server_cpu_cases()
        if not rows:
            return f"| {name} | not measured in this session | | | ≤ 300 ns | |"
        ns = [float(r["ns_per_op_median"]) for r in rows]
        ir = [int(r["ir_per_op_server"]) for r in rows if r.get("ir_per_op_server")]
        text = f"{fmt(min(ns))}-{fmt(max(ns))} ns over {len(rows)} cases (median of each)"
        if ir:
            text += f", {min(ir)}-{max(ir)} instructions in the server"
        return f"| {name} | {text} | | | ≤ 300 ns | {'yes' if max(ns) <= 300 else 'no'} |"

    def summary(self):
        L = []
        e = self.env
        L.append("# rdmakv benchmark summary\n")
        L.append(f"**Environment:** {self.env_line()}.\n")
        mode = ("smoke (the fewest ops that run every experiment: a check of the outputs, not figures)"
                if self.smoke else "fast (few sizes, few ops: a quick look, noisier than the full run)"
                if self.fast else "full")
        L.append(f"Mode: {mode}; "
                 f"{self.warm} warm-up + {self.measured} measured ops per point at depth 1, "
                 f"{self.measured_deep} at a greater depth"
                 + (f", at most {self.byte_budget // MIB} MiB of values per point (fewer ops for large values; "
                    "the `ops` column says how many)" if self.byte_budget else "") + ".\n")
        if e["mode"].startswith("guest"):
            L.append("Everything here ran in one emulated (TCG) guest: absolute figures say little about real "
                     "hardware; compare ratios within this run only.\n")
        if self.sanitized or self.binfo.get("buildtype") not in ("release", "plain"):
            L.append(f"**Build is {self.binfo.get('buildtype')} with sanitizers {self.binfo.get('sanitize')}:** "
                     "the KV figures are not representative.\n")
        L.extend(self._targets())
        L.extend(self._targets31())
        L.append("## Notes\n")
        notes = list(self.notes)
        if not self.depth_works:
            notes.append("kvload in this build runs one operation at a time (`--depth` is accepted but has no "
                         "effect yet): depth-32 rows ran at effective depth 1 (`depth_effective` column).")
        if not self.busy_poll:
            notes.append("Experiment 3 (polling modes): kvd/kvload have no `--busy-poll` in this build; those "
                         "rows are `n/a`. The fabric-level comparison is given by ibv_rc_pingpong polled vs `-e`.")
        notes.append("Polling (experiment 3): `default` is kvd and kvload as shipped (spin, then block: after any "
                     "completion or post they poll for `--poll-us` before arming the CQ and sleeping); `events` "
                     "sleeps at once (`--poll-us 0`); `busy-poll` never sleeps. Idle CPU: % of one core over the "
                     "idle window, read from /proc.")
        na = [r for r in self.rows["sweep.csv"] if r["status"].startswith("n/a")]
        if na:
            notes.append(f"{len(na)} sweep points are `n/a: not supported by this build` (values of "
                         f"{_hsize(min(r['size'] for r in na))} and up take the rendezvous path, which kvload "
                         "reports as errors until it lands).")
        failed = [f"{k}: {r.get('op', r.get('tool', ''))} {r.get('size', '')} {r['status']}"
                  for k, rows in self.rows.items() for r in rows if str(r.get("status", "")).startswith("failed")]
        if failed:
            notes.append(f"{len(failed)} measurements failed: " + "; ".join(failed[:8])
                         + (" ..." if len(failed) > 8 else ""))
        notes.append("References: eager SET/GET (key + value < 4 KiB, one SEND each way) ↔ ib_send_bw; "
                     "rendezvous SET (the server pulls the value with RDMA READ) ↔ ib_read_bw; rendezvous GET "
                     "(the server writes the value into the client's buffer) ↔ ib_write_bw. Latency ↔ "
                     "ibv_rc_pingpong usec/iter (one SEND each way, like one KV op; `-e` = completion "
                     "events, as kvd/kvload use). Mbit/s count value bytes only.")
        notes.append("Redis: redis-benchmark, 1 connection, pipeline = depth. memcached: memcaslap, "
                     "connections = depth with one request in flight each (it has no pipelining), mean latency "
                     "only; its GET runs start with its own preload of SETs, whose first statistics period is "
                     "dropped. Server CPU per op: the server's user+system time (/proc, the counters "
                     "getrusage reports) over the measured run / ops; client CPU per op: getrusage of the "
                     "client process.")
        for n in notes:
            L.append(f"- {n}")
        L.append("")
        L.append("## KV figures against their references\n")
        L.append(SUMMARY_TABLE_HEADER)
        L.append("|---|---|---|---|---|---|")
        for r in self.rows["sweep.csv"]:
            kv = fmt(r["mbps"]) + " Mbit/s" if r["status"].startswith(("ok", "partial")) else r["status"]
            L.append(f"| sweep | {r['op'].upper()} {_hsize(r['size'])} depth {r['depth']}"
                     f"{'' if r['depth_effective'] == r['depth'] else ' (eff. ' + str(r['depth_effective']) + ')'}"
                     f" ({r['path']}) | {kv} | {r['ref_tool']} | {fmt(r['ref_mbps'])} Mbit/s | {fmt(r['ratio'])} |")
        for r in self.rows["latency.csv"]:
            if r["op"] == "pingpong":
                continue
            kv = (f"mean {fmt(r['kv_mean_us'])} µs (p50 {fmt(r['kv_p50_us'])}, p99 {fmt(r['kv_p99_us'])})"
                  if r["status"] == "ok" else r["status"])
            L.append(f"| latency | {r['op'].upper()} {_hsize(r['size'])} depth 1 | {kv} | {r['ref_tool']} "
                     f"(mean) | {fmt(r['ref_usec_per_iter'])} µs/iter | {fmt(r['ratio_mean'])} "
                     f"(p50: {fmt(r['ratio_p50'])}) |")
        bp = self.rows["busypoll.csv"]
        for r in bp:
            if r["mode"] != "default" or r["op"] == "idle":
                continue
            kv = (f"{fmt(r['ops_per_s'])} ops/s, p50 {fmt(r['p50_us'])} µs, CPU {fmt(r['client_cpu_us_per_op'])} + "
                  f"{fmt(r['server_cpu_us_per_op'])} µs/op (client + server)" if r["status"] == "ok" else r["status"])
            for other_mode in ("events (--poll-us 0)", "busy-poll"):
                other = [x for x in bp if x["mode"] == other_mode and x["op"] == r["op"] and x["depth"] == r["depth"]]
                o = other[0] if other else {"status": "n/a"}
                ref = (f"{fmt(o['ops_per_s'])} ops/s, p50 {fmt(o['p50_us'])} µs"
                       if str(o["status"]).startswith("ok") else o["status"])
                L.append(f"| polling | default {r['op'].upper()} 32 B depth {r['depth']} | {kv} | {other_mode} | "
                         f"{ref} | {fmt(ratio(r['ops_per_s'] or None, o.get('ops_per_s') or None))} |")
        idle = {r["mode"]: r for r in bp if r["op"] == "idle"}
        d = idle.get("idle: default")
        if d is not None:
            for other_mode in ("events (--poll-us 0)", "busy-poll"):
                o = idle.get(f"idle: {other_mode}", {"status": "n/a"})
                kv = (f"kvd {fmt(d['server_cpu_us_per_op'])} %, kvload {fmt(d['client_cpu_us_per_op'])} % of a core"
                      if str(d["status"]).startswith("ok") else d["status"])
                ref = (f"kvd {fmt(o['server_cpu_us_per_op'])} %, kvload {fmt(o['client_cpu_us_per_op'])} %"
                       if str(o["status"]).startswith("ok") else o["status"])
                L.append(f"| polling | idle CPU, default (one connection open) | {kv} | idle, {other_mode} | {ref} "
                         f"| {fmt(ratio(d.get('server_cpu_us_per_op') or None, o.get('server_cpu_us_per_op') or None))}"
                         " (kvd) |")
        pp = [r for r in bp if r["op"] == "pingpong"]
        if len(pp) == 2 and all(r["status"].startswith("ok") for r in pp):
            L.append(f"| polling | ibv_rc_pingpong -e 32 B | {fmt(pp[1]['p50_us'])} µs/iter, CPU "
                     f"{fmt(pp[1]['client_cpu_us_per_op'])} µs/iter | ibv_rc_pingpong (polling) | "
                     f"{fmt(pp[0]['p50_us'])} µs/iter, CPU {fmt(pp[0]['client_cpu_us_per_op'])} µs/iter | "
                     f"{fmt(ratio(pp[1]['p50_us'], pp[0]['p50_us']))} |")
        send32 = [r for r in self.rows["perftest.csv"] if r["tool"] == "ib_send_bw" and r["size"] == 32
                  and r["status"] == "ok"]
        scaling = self.rows["scaling.csv"]
        for r in scaling:
            kv = (f"{fmt(r['aggregate_ops_per_s'])} ops/s" if r["status"].startswith(("ok", "partial"))
                  else r["status"])
            base = next((b for b in scaling if b["op"] == r["op"] and b["clients"] == 1), None)
            what = "alternating SET/GET" if r["op"] == "mixed" else r["op"].upper()
            L.append(f"| scaling | {r['clients']} client{'s' if r['clients'] > 1 else ''}, 32 B {what}, depth 32"
                     f"{'' if r['depth_effective'] in ('', 32) else ' (eff. ' + str(r['depth_effective']) + ')'}"
                     f" | {kv} | 1 client | {fmt(base and base['aggregate_ops_per_s'])} ops/s | "
                     f"{fmt(r['speedup_vs_1'])} |")
        if send32:
            top = max((r["aggregate_ops_per_s"] for r in scaling if r["aggregate_ops_per_s"]), default=None)
            L.append(f"| scaling | best aggregate, 32 B | {fmt(top)} ops/s | ib_send_bw 32 B message rate | "
                     f"{fmt(send32[0]['msg_rate_per_s'])} msg/s | {fmt(ratio(top, send32[0]['msg_rate_per_s']))} |")
        sh = self.rows["shards.csv"]
        one = [r for r in sh if r["servers"] == 1 and r["status"] == "ok"]
        for r in sh:
            kv = (f"{fmt(r['aggregate_ops_per_s'])} ops/s (per server {r['ops_per_server']})"
                  if r["status"].startswith(("ok", "partial")) else r["status"])
            ref = f"{fmt(one[0]['aggregate_ops_per_s'])} ops/s" if one else "not run"
            L.append(f"| shards | {r['servers']} kvd, {r['clients']} client{'s' if r['clients'] > 1 else ''} over "
                     f"the list, 32 B, depth 32 | {kv} | 1 kvd | {ref} | {fmt(r['speedup_vs_1'])} |")
        osd = self.rows["onesided.csv"]
        for r in osd:
            if r["op"] in ("GET (message)", ONESIDED_FABRIC_OP):
                continue
            ref_op = "GET (message)"
            o = [x for x in osd if x["op"] == ref_op and x["size"] == r["size"] and x["depth"] == r["depth"]]
            o = o[0] if o else {"status": "not run", "ops_per_s": "", "mean_us": ""}
            kv = (f"{fmt(r['ops_per_s'])} ops/s, mean {fmt(r['mean_us'])} µs, {r['messages_sent']} messages"
                  if r["status"] == "ok" else r["status"])
            ref = f"{fmt(o['ops_per_s'])} ops/s, mean {fmt(o['mean_us'])} µs" if o["status"] == "ok" else o["status"]
            L.append(f"| one-sided | {r['op']} {_hsize(r['size'])} depth {r['depth']}, {r['ops']} ops | {kv} | "
                     f"{ref_op} | {ref} | {fmt(ratio(r['ops_per_s'] or None, o.get('ops_per_s') or None))} |")
        for f in (x for x in osd if x["op"] == ONESIDED_FABRIC_OP):
            k = [x for x in osd if x["op"] == "GET (RDMA READ)" and x["depth"] == f["depth"] and x["status"] == "ok"]
            kv = f"{fmt(k[0]['ops_per_s'])} ops/s" if k else "not run"
            ref = f"{fmt(f['ops_per_s'])} READs/s" if str(f["status"]).startswith("ok") else f["status"]
            L.append(f"| one-sided | GET (RDMA READ) {_hsize(k[0]['size']) if k else ''} depth {f['depth']} | {kv} | "
                     f"`{f['op']} -s {f['size']} -t {f['depth']}` (the READ each GET makes) | {ref} | "
                     f"{fmt(ratio(k[0]['ops_per_s'] if k else None, f['ops_per_s'] or None))} |")
        du = self.rows["durability.csv"]
        for r in du:
            if r["fsync"] == "never" or not r["fsync"]:
                if not r["fsync"]:
                    L.append(f"| durability | SET, --fsync never/batch/always | {r['status']} | | | |")
                continue
            o = [x for x in du if x["fsync"] == "never" and x["size"] == r["size"] and x["depth"] == r["depth"]]
            o = o[0] if o else {"status": "not run", "ops_per_s": "", "p50_us": ""}
            kv = (f"{fmt(r['ops_per_s'])} ops/s, p50 {fmt(r['p50_us'])} µs, {r['log_fsyncs']} fsyncs"
                  if str(r["status"]).startswith("ok") else r["status"])
            ref = f"{fmt(o['ops_per_s'])} ops/s, p50 {fmt(o['p50_us'])} µs" if str(o["status"]).startswith("ok") \
                else o["status"]
            L.append(f"| durability | SET {_hsize(r['size'])} depth {r['depth']}, --fsync {r['fsync']} | {kv} | "
                     f"--fsync never | {ref} | {fmt(ratio(r['ops_per_s'] or None, o.get('ops_per_s') or None))} |")
        tc = self.rows["tcp.csv"]
        for r in [x for x in tc if x["system"] == "rdmakv"]:
            for other in ("redis", "memcached"):
                o = [x for x in tc if x["system"] == other and x["op"] == r["op"] and x["size"] == r["size"]
                     and x["depth"] == r["depth"]]
                o = o[0] if o else {"status": "not run", "ops_per_s": ""}
                kv = f"{fmt(r['ops_per_s'])} ops/s" if str(r["status"]).startswith("ok") else r["status"]
                ref = f"{fmt(o['ops_per_s'])} ops/s" if str(o["status"]).startswith("ok") else o["status"]
                L.append(f"| tcp | {r['op'].upper()} {_hsize(r['size'])} depth {r['depth']} | {kv} | "
                         f"{other} ({o.get('tool', '')}) | {ref} | "
                         f"{fmt(ratio(r['ops_per_s'] or None, o.get('ops_per_s') or None))} |")
        L.append("")
        L.append("## CPU time per operation (TCP comparison)\n")
        L.append("| system | op | size | depth | ops/s | server CPU µs/op | client CPU µs/op | status |")
        L.append("|---|---|---|---|---|---|---|---|")
        for r in tc:
            many = " (" + r["concurrency"] + ")" if "processes" in str(r["concurrency"]) else ""
            L.append(f"| {r['system']}{many} | {r['op'].upper()} | {_hsize(r['size'])} | {r['depth']} | {fmt(r['ops_per_s'])} | "
                     f"{fmt(r['server_cpu_us_per_op'])} | {fmt(r['client_cpu_us_per_op'])} | {r['status']} |")
        L.append("")
        L.append("## Files\n")
        L.append("CSV: " + ", ".join(f"`{k}`" for k in HEADERS) + ". Plots: " + ", ".join(f"`{p}`" for p in PLOTS)
                 + " (gnuplot scripts `*.gp` and data `*.dat` beside them). Environment: `environment.txt`.\n")
        for p in PLOTS:
            L.append(f"![{p}]({p})\n")
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write("\n".join(L))
