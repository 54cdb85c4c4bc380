#!/usr/bin/env python3
"""The rooms of src/kv may include only what docs/architecture.md allows.

  store  -> (no other kv room)        conn -> (no other kv room)
  server -> store, conn               client -> conn
  load   -> client                   replica -> store, client

Also: no source file directly in src/kv, no ibv_*/rdma_* call outside
src/verbs, and no memcpy-like call (memcpy, memmove, std::copy,
std::ranges::copy, ...) in the data path (src/kv/{store,conn,server,client},
src/durable, src/proto/encode.cpp) except through proto::copy_bytes
(proto/copy.hpp), which counts what it copies; a copy whose size is a sizeof
(one fixed-size object) is allowed. And docs/architecture.md names only
functions, types and files that exist. Exits 1 and names each offending line
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
    "replica": {"store", "client"},
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

# docs/architecture.md cannot drift from the code: every `Type::member` it
# names must be declared or defined in src/ (or apps/, bench/, examples/),
# and every file it names (`kv/server/arena.cpp`, `tests/unit/...`, or a
# bare `arena.cpp`) must exist.
CODE_DIRS = [ROOT / d for d in ("src", "apps", "bench", "examples", "python")]
code = {p: p.read_text() for d in CODE_DIRS for p in sorted(d.rglob("*")) if p.suffix in SOURCES}
doc = ROOT / "docs" / "architecture.md"
text = doc.read_text()
names = set()
for n, line in enumerate(text.splitlines(), 1):
    for tick in re.findall(r"`([^`]+)`", line):
        for m in re.finditer(r"\b([A-Za-z_][A-Za-z0-9_]*)::(~?[A-Za-z_][A-Za-z0-9_]*)\b", tick):
            names.add((m.group(1), m.group(2), n))
        for m in re.finditer(r"^([A-Za-z0-9_./-]+\.(?:cpp|hpp|h|c|py|sh|in|build))$", tick.strip()):
            names.add((None, m.group(1), n))
all_files = [p for p in ROOT.rglob("*") if ".git" not in p.parts and "build" not in p.parts[len(ROOT.parts)][:5]]
for owner, name, n in sorted(names, key=lambda t: (t[2], t[1])):
    if owner is None:  # a file: a path from the root, from src/, or a bare name anywhere
        if any((d / (name + ext)).exists() for d in (ROOT, ROOT / "src") for ext in ("", ".in")):
            continue
        if any(p.as_posix().endswith("/" + name) or p.as_posix().endswith("/" + name + ".in") for p in all_files):
            continue
        problems.append(f"docs/architecture.md:{n}: names {name}, which does not exist")
        continue
    if owner in ("std", "spdlog", "fmt", "boost"):
        continue
    qualified = re.compile(r"\b" + re.escape(owner) + r"::" + re.escape(name) + r"\b")
    scope = re.compile(r"\b(?:class|struct|enum class|namespace)\s+(?:\w+::)*" + re.escape(owner) + r"\b")
    # declared or defined: the name followed by what follows one in a
    # declaration (a function's parameters, a member's initializer or end, an
    # enumerator's comma), not merely the word in a comment
    member = re.compile(r"\b" + re.escape(name.lstrip("~")) + r"\s*(?:[(;{=,]|:(?!:)|$)", re.M)
    if not any(qualified.search(t) or (scope.search(t) and member.search(t)) for t in code.values()):
        problems.append(f"docs/architecture.md:{n}: names {owner}::{name}, which no source declares")

# The same for the sources' own comments: a path under src/ that one names
# (`kv/store/durability.hpp`, `verbs/cq.cpp`) must exist.
src_path = re.compile(r"\b((?:kv|verbs|reactor|proto|durable)/[a-z_/]+\.(?:hpp|cpp|h))\b")
for p, t in code.items():
    for n, line in enumerate(t.splitlines(), 1):
        for m in src_path.finditer(line):
            if not (ROOT / "src" / m.group(1)).exists():
                problems.append(f"{p.relative_to(ROOT)}:{n}: names {m.group(1)}, which does not exist in src/")

for line in problems:
    print(line)
print(f"layout: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
