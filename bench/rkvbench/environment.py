"""The environment a run measures: CPU, RDMA device and GID, build and git state."""

import json
import os
import platform
import re
import subprocess

from .common import REPO, die


# ------------------------------------------------------------------ environment
def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def rdma_device(addr):
    """The RDMA device whose netdev holds addr (else the first device)."""
    try:
        out = subprocess.run(["rdma", "link", "show"], capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            m = re.match(r"link (\S+)/(\d+) .*netdev (\S+)", line)
            if not m:
                continue
            ip = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", m.group(3)],
                                capture_output=True, text=True, timeout=20).stdout
            if f" {addr}/" in ip:
                return m.group(1), int(m.group(2))
    except (OSError, subprocess.SubprocessError):
        pass
    out = subprocess.run(["ibv_devices"], capture_output=True, text=True, timeout=20).stdout
    devs = [l.split()[0] for l in out.splitlines()[2:] if l.strip()]
    if not devs:
        die("no RDMA device (ibv_devices lists none)")
    return devs[0], 1


def gid_index(dev, port, addr):
    """Index of the RoCE v2 GID that carries addr (IPv4-mapped), for ibv_rc_pingpong -g."""
    want = "0000:0000:0000:0000:0000:ffff:" + "".join(f"{int(o):02x}" for o in addr.split("."))
    want = want[:-4] + ":" + want[-4:]
    gdir = f"/sys/class/infiniband/{dev}/ports/{port}/gids"
    tdir = f"/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types"
    best = None
    try:
        for name in sorted(os.listdir(gdir), key=int):
            try:
                with open(os.path.join(gdir, name)) as f:
                    gid = f.read().strip()
            except OSError:
                continue
            if gid != want:
                continue
            kind = ""
            try:
                with open(os.path.join(tdir, name)) as f:
                    kind = f.read().strip()
            except OSError:
                pass
            if "v2" in kind:
                return int(name)
            best = best if best is not None else int(name)
    except OSError:
        pass
    return best if best is not None else 0


def build_info(build):
    info = {"buildtype": "?", "sanitize": "none"}
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            for o in json.load(f):
                if o["name"] == "buildtype":
                    info["buildtype"] = o["value"]
                elif o["name"] == "b_sanitize":
                    info["sanitize"] = o["value"] if isinstance(o["value"], str) else ",".join(o["value"])
                elif o["name"] == "log_level":
                    info["log_level"] = o["value"]
    except (OSError, ValueError, KeyError):
        pass
    return info


def git_state():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
        return head + (" (working tree has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def active_mtu(dev):
    """The device's active path MTU (ibv_devinfo), e.g. "4096"; "" if unknown."""
    try:
        out = subprocess.run(["ibv_devinfo", "-d", dev], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"active_mtu:\s*(\d+)", out)
    return m.group(1) if m else ""
