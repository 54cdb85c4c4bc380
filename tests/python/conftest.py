"""Fixtures of the Python package's tests (tests/python/run.sh runs them in
the Soft-RoCE environment): a kvd child process per module, bound to
$SOFTROCE_ADDR on a free port, like tests/rdma/kvd_process.hpp."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from typing import Iterator, Optional

import pytest

MAX_VALUE = 96 << 20  # the kvd's --max-value: 64 MiB values fit, 96 MiB + 1 does not


class Kvd:
    """`kvd --bind ADDR --port 0 ...` until its `kvd: listening on ADDR:PORT` line
    (`--port N` in extra: that port, for a kvd restarted where its clients look)."""

    def __init__(self, *extra: str) -> None:
        exe = os.environ["RKV_KVD"]
        self.addr = os.environ.get("SOFTROCE_ADDR")
        if not self.addr:
            raise RuntimeError("SOFTROCE_ADDR is not set: run through tests/python/run.sh (scripts/softroce exec)")
        self.proc: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
            [exe, "--bind", self.addr, *([] if "--port" in extra else ["--port", "0"]), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 120  # an ASan kvd in a TCG guest
        line = b""
        self.port = 0
        fd = self.proc.stdout.fileno()
        while self.port == 0:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RuntimeError("kvd did not print its listening line in time")
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            c = os.read(fd, 1)
            if not c:
                self.stop()
                raise RuntimeError("kvd exited before listening")
            if c != b"\n":
                line += c
                continue
            print("[kvd]", line.decode(errors="replace"))
            prefix = b"kvd: listening on "
            if line.startswith(prefix):
                self.port = int(line.rsplit(b":", 1)[1])
            line = b""
        self.server = f"{self.addr}:{self.port}"
        # Keep draining its output so it never blocks on a full pipe.
        self._drain = threading.Thread(target=self._drain_output, args=(fd,), daemon=True)
        self._drain.start()

    @staticmethod
    def _drain_output(fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            print("[kvd]", chunk.decode(errors="replace"), end="")

    def kill(self) -> None:
        """SIGKILL: the server dies with its connections."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None


@pytest.fixture(scope="module")
def kvd() -> Iterator[Kvd]:
    k = Kvd("--max-value", str(MAX_VALUE))
    yield k
    k.stop()
