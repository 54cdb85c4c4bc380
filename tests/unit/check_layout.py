#!/usr/bin/env python3
"""The rooms of src/kv may include only what docs/architecture.md allows.

  store  -> (no other kv room)        conn -> (no other kv room)
  server -> store, conn               client -> conn
  load   -> client

Also: no source file directly in src/kv, no ibv_*/rdma_* call outside
src/verbs, and no memcpy-like call (memcpy, memmove, std::copy,
std::ranges::copy, ...) in the data path (src/kv/{store,conn,server,client},
src/durable, src/proto/encode.cpp) except through proto::copy_bytes
(proto/copy.hpp), which counts what it copies; a copy whose size is a sizeof
(one fixed-size object) is allowed. Exits 1 and names each offending line
otherwise.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
ALLOWED = {
    "store": set(),
    "conn": set(),
    "server": {"store", "conn"},
    "client": {"conn"},
    "load": {"client"},
}
SOURCES = (".c", ".h", ".cpp", ".hpp")
problems = []

kv = ROOT / "src" / "kv"
for p in sorted(kv.iterdir()):
    if p.is_file() and p.suffix in SOURCES:
        problems.append(f"{p.relative_to(ROOT)}: source file directly in src/kv (put it in a room)")
    if p.is_dir() and p.name not in ALLOWED:
        problems.append(f"{p.relative_to(ROOT)}: unknown room (add it to docs/architecture.md and this check)")

include = re.compile(r'^\s*#\s*include\s+"kv/([a-z_]+)/')
for room, allowed in ALLOWED.items():
    for p in sorted((kv / room).rglob("*")):
        if p.suffix not in SOURCES:
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            m = include.match(line)
            if m and m.group(1) != room and m.group(1) not in allowed:
                problems.append(f"{p.relative_to(ROOT)}:{n}: {room} may not include kv/{m.group(1)}/")

verbs_call = re.compile(r"\b(ibv|rdma)_[a-z_]+\s*\(")
for p in sorted((ROOT / "src").rglob("*")):
    if p.suffix not in SOURCES or (ROOT / "src" / "verbs") in p.parents:
        continue
    for n, line in enumerate(p.read_text().splitlines(), 1):
        code = line.split("//", 1)[0]
        if verbs_call.search(code):
            problems.append(f"{p.relative_to(ROOT)}:{n}: ibv_*/rdma_* call outside src/verbs")

# Every copy of the data path is counted by proto::copy_bytes (proto/copy.hpp):
# the zero-copy checks (rdv_e2e) read that meter, so a copy must not bypass it.
copy_call = re.compile(r"\b(memcpy|memmove|__builtin_memcpy|__builtin_memmove|copy|copy_n|copy_backward)\s*\(")
data_path = [ROOT / "src" / "kv" / room for room in ("store", "conn", "server", "client")]
data_path += [ROOT / "src" / "durable"]
copy_files = [p for d in data_path for p in sorted(d.rglob("*")) if p.suffix in SOURCES]
copy_files.append(ROOT / "src" / "proto" / "encode.cpp")
for p in copy_files:
    for n, line in enumerate(p.read_text().splitlines(), 1):
        code = line.split("//", 1)[0]
        m = copy_call.search(code)
        if not m or "sizeof" in code:
            continue
        # copy(...) as a member or another library's function (x.copy(, obj->copy() is not std's
        start = m.start()
        if m.group(1).startswith("copy") and start > 0 and code[start - 1] in ".>":
            continue
        problems.append(f"{p.relative_to(ROOT)}:{n}: {m.group(1)} outside proto::copy_bytes (uncounted copy)")

for line in problems:
    print(line)
print(f"layout: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
