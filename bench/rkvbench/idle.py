"""Experiment 9: what idle client connections cost kvd (bench/idle)."""

import os

from .common import BENCH, _last_line, fmt, log, run_timed


class IdleExperiments:
    """Mixin of Bench (session.py): runs bench/idle, which starts a kvd of its
    own with default flags, holds COUNT idle connections with
    bench/idle_conns for each COUNT, and reads kvd's own SIGUSR1 statistics
    (no connection of its own): resident memory, registered connection
    buffers and live heap against the same kvd with none."""

    def idle(self):
        counts = self.idle_counts
        log(f"idle: kvd's memory with {', '.join(map(str, counts))} idle connections (bench/idle)")
        argv = [os.path.join(BENCH, "idle"), "--build", self.build] + [str(c) for c in counts]
        rc, out, err, _ = run_timed(argv, 600 + 2 * max(counts))
        rows = self._parse_idle(out)
        if rc != 0 or not rows:
            self.rows["idle.csv"].append({"connections": max(counts), "rss_bytes": "", "rss_more_bytes": "",
                                          "conn_bytes": "", "registered_bytes": "", "conn_bytes_each": "",
                                          "heap_bytes": "",
                                          "status": f"failed: bench/idle exit {rc}: {_last_line(out + err)}"})
            return
        for r in rows:
            self.rows["idle.csv"].append(r)
            log(f"  {r['connections']} connections: RSS {fmt(r['rss_bytes'])} B "
                f"(+{fmt(r['rss_more_bytes'])}), buffers held {fmt(r['conn_bytes'])} B, "
                f"registered {fmt(r['registered_bytes'])} B")

    @staticmethod
    def _parse_idle(out):
        """bench/idle's table: a header, then `COUNT RSS MORE CONN_BYTES POOL_BYTES EACH HEAP` per line
        ("-" for the differences of the line with none)."""
        rows = []
        for line in out.splitlines():
            w = line.split()
            if len(w) != 7 or not w[0].isdigit():
                continue
            num = [int(x) if x.lstrip("-").isdigit() else 0 for x in w]
            rows.append({"connections": num[0], "rss_bytes": num[1], "rss_more_bytes": num[2], "conn_bytes": num[3],
                         "registered_bytes": num[4], "conn_bytes_each": num[5], "heap_bytes": num[6],
                         "status": "ok"})
        return rows
