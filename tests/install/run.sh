#!/usr/bin/env bash
# install: what `meson install` gives a user, used the way a user would.
#
#   tests/install/run.sh MESON BUILD_ROOT SOURCE_ROOT SOFTROCE   (meson test `install`, rdma suite)
#
# 1. `meson install --destdir D` of this build (D under the build directory).
# 2. The library: librkv.so.0 (soname) exports exactly the kv_* functions
#    declared in the installed kv.h (a declaration without KV_API, or any
#    other exported symbol, fails), carries its own DT_NEEDED on libibverbs
#    and librdmacm; librkv.a is one archive holding the C API; rkv.pc.
# 3. outside.c, copied out of the tree, built twice with nothing but
#    pkg-config and D: against librkv.so (`pkg-config --cflags --libs rkv`)
#    and against librkv.a (`pkg-config --static --libs rkv`, -lrkv as
#    -l:librkv.a so the archive is taken).
# 4. The installed tools print --version; the installed man pages render
#    (man -l); the installed kvd.service passes `systemd-analyze verify`
#    (where it exists) and has its required keys (grep, always).
# 5. In the Soft-RoCE guest (SOFTROCE exec, guest.sh): the installed kvd, and
#    both outside programs against it, with LD_LIBRARY_PATH into D only.
# Prints what it checks; exits 0 only if everything held.
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: $0 MESON BUILD_ROOT SOURCE_ROOT SOFTROCE" >&2; exit 2; }
MESON=$1 BUILD=$(cd "$2" && pwd -P) SRC=$(cd "$3" && pwd -P) SOFTROCE=$4
HERE=$SRC/tests/install
OUT=$BUILD/tests/install/run      # everything this test writes (the guest writes here too)
D=$OUT/destdir
fails=0
ok() { echo "install: ok: $*"; }
bad() { echo "install: FAILED: $*" >&2; fails=$((fails + 1)); }
die() { echo "install: FAILED: $*" >&2; exit 1; }

rm -rf "$OUT" && mkdir -p "$OUT" || die "cannot create $OUT"
# meson test points LD_LIBRARY_PATH at the build tree's librkv.so: nothing
# here may use the build tree, so it goes.
unset LD_LIBRARY_PATH

# ------------------------------------------------------------ 1. install
"$MESON" install -C "$BUILD" --destdir "$D" --no-rebuild --quiet >"$OUT/install.log" 2>&1 ||
  { cat "$OUT/install.log" >&2; die "meson install --destdir $D"; }
# Where things went, from the build's own options (prefix, libdir, ...).
opts=$("$MESON" introspect --buildoptions "$BUILD" | python3 -c '
import json, os, shlex, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
d = lambda k: os.path.join(o["prefix"], o[k])  # an absolute option value stays as it is
for var, val in [("PREFIX", o["prefix"]), ("LIBDIR", d("libdir")), ("BINDIR", d("bindir")),
                 ("INCLUDEDIR", d("includedir")), ("MANDIR", d("mandir")), ("SANITIZE", o["b_sanitize"]),
                 ("MAN_OPTION", o["man"]), ("UNITDIR_OPTION", o["systemdsystemunitdir"])]:
    print(f"{var}={shlex.quote(str(val))}")
') || die "meson introspect --buildoptions"
eval "$opts"
echo "install: prefix $PREFIX, destdir $D"

# ------------------------------------------------------------ 2. the library
SO=$D$LIBDIR/librkv.so
[ -L "$SO" ] && [ -L "$SO.0" ] && ok "librkv.so -> $(readlink "$SO") -> $(readlink "$SO.0")" ||
  bad "librkv.so and librkv.so.0 links missing in $D$LIBDIR"
soname=$(readelf -d "$SO" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = librkv.so.0 ] && ok "soname $soname" || bad "soname is '$soname', want librkv.so.0"
needed=$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
for lib in libibverbs.so.1 librdmacm.so.1; do
  case " $needed" in *" $lib "*) ;; *) bad "librkv.so does not list $lib as DT_NEEDED (has: $needed)";; esac
done
ok "DT_NEEDED: $needed"
H=$D$INCLUDEDIR/rkv/kv.h
[ -f "$H" ] || bad "kv.h not installed at $H"
# The API is what kv.h declares: every kv_* function declaration (a line that
# starts with its return type; comments start with / or *).
declared=$(grep -E '^[A-Za-z]' "$H" | grep -oE '\bkv_[A-Za-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u)
exported=$(nm -D --defined-only "$SO" | awk '{print $NF}' | sort -u)
[ -n "$declared" ] || bad "found no kv_* declarations in $H"
if [ "$declared" = "$exported" ]; then
  ok "librkv.so exports exactly kv.h's $(echo "$declared" | wc -l) functions: $(tr "\n" " " <<<"$exported")"
else
  for s in $(comm -23 <(echo "$declared") <(echo "$exported")); do
    bad "$s is declared in kv.h but librkv.so does not export it (declare it with KV_API)"
  done
  for s in $(comm -13 <(echo "$declared") <(echo "$exported")); do
    bad "librkv.so exports $s, which kv.h does not declare (only the C API may be visible)"
  done
fi
A=$D$LIBDIR/librkv.a
# (Outputs go through variables: with pipefail, `cmd | grep -q` fails when
# grep exits before cmd has written everything.)
archive_syms=$(nm --defined-only "$A" 2>/dev/null)
if [ -f "$A" ] && grep -qE ' T kv_open$' <<<"$archive_syms"; then
  ok "librkv.a: one archive, $(ar t "$A" | wc -l) objects, defines kv_open"
else
  bad "librkv.a missing or without kv_open ($A)"
fi

# ------------------------------------------------------------ 3. a program outside the tree
export PKG_CONFIG_PATH=$D$LIBDIR/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
pc_cflags=$(pkg-config --cflags rkv) && pc_libs=$(pkg-config --libs rkv) && pc_static=$(pkg-config --static --libs rkv) ||
  die "pkg-config rkv (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
echo "install: pkg-config --cflags --libs rkv: $pc_cflags $pc_libs"
echo "install: pkg-config --static --libs rkv: $pc_static"
# rkv.pc's own paths are D's (the sysroot); the system libraries' are too, by PKG_CONFIG_SYSROOT_DIR.
for flag in $pc_cflags $pc_libs $pc_static; do
  case "$flag" in -I*|-L*) case "${flag:2}" in "$D"/*) ;; *) bad "pkg-config gives $flag, outside D";; esac;; esac
done
# This build is instrumented (b_sanitize): librkv.so needs libasan, and ASan
# must be the first library a process loads. A program that uses an ASan
# library must be built with the same -fsanitize (as with any ASan library);
# the flags come from the build's options, not from rkv.pc, which describes
# the library, not how this test build was configured.
san=()
[ "$SANITIZE" != none ] && san=("-fsanitize=$SANITIZE")
cp "$HERE/outside.c" "$OUT/outside.c"   # out of the tree: only -I from pkg-config can find kv.h
cd "$OUT" || die "cd $OUT"
# shellcheck disable=SC2086  # pkg-config's output is meant to be split
if cc -std=c11 -Wall -Wextra -Werror "${san[@]}" outside.c -o outside_shared $pc_cflags $pc_libs 2>"$OUT/cc_shared.log"; then
  ok "outside.c built against librkv.so with: cc outside.c \$(pkg-config --cflags --libs rkv)"
else
  cat "$OUT/cc_shared.log" >&2; bad "building outside.c against librkv.so"
fi
# shellcheck disable=SC2086
if cc -std=c11 -Wall -Wextra -Werror "${san[@]}" outside.c -o outside_static $pc_cflags \
    ${pc_static/-lrkv/-l:librkv.a} 2>"$OUT/cc_static.log"; then
  ok "outside.c built against librkv.a with: pkg-config --static --libs rkv"
else
  cat "$OUT/cc_static.log" >&2; bad "building outside.c against librkv.a (Requires.private/Libs.private)"
fi
grep -q 'NEEDED.*\[librkv.so.0\]' <<<"$(readelf -d outside_shared 2>&1)" || bad "outside_shared does not load librkv.so.0"
grep -q 'NEEDED.*librkv' <<<"$(readelf -d outside_static 2>&1)" && bad "outside_static still loads librkv.so"

# ------------------------------------------------------------ 4. tools, man pages, unit
for tool in kvd kvload rkv; do
  v=$("$D$BINDIR/$tool" --version 2>&1)
  case "$v" in "$tool (rkv) "*", git "?*) ok "$tool --version: $v";; *) bad "$D$BINDIR/$tool --version printed '$v'";; esac
done
[ "$(readlink "$D$BINDIR/kvd")" = rkv ] && [ "$(readlink "$D$BINDIR/kvload")" = rkv ] ||
  bad "kvd and kvload are not links to rkv in $D$BINDIR"
# Man pages: built when help2man was found (-Dman=auto) or required (enabled).
if grep -q '"kvd.1"' <<<"$("$MESON" introspect --targets "$BUILD")"; then
  for page in kvd:--data-dir kvload:--server; do
    name=${page%%:*} flag=${page#*:} f=$D$MANDIR/man1/${page%%:*}.1
    if [ ! -f "$f" ]; then bad "$f not installed"; continue; fi
    text=$(MANWIDTH=80 man -l "$f" 2>&1)
    if grep -q -- "$flag" <<<"$text" && grep -qi "^NAME" <<<"$text"; then
      ok "man -l $name.1 renders ($(wc -l <<<"$text") lines, mentions $flag)"
    else
      bad "man -l $f: $(head -5 <<<"$text")"
    fi
  done
else
  echo "install: NOTE: man pages not built in this build (-Dman=$MAN_OPTION, help2man not found at configure time): not checked"
fi
if [ "$UNITDIR_OPTION" = no ]; then
  echo "install: NOTE: -Dsystemdsystemunitdir=no: kvd.service not installed, not checked"
else
  unit=$(find "$D" -name kvd.service -path '*systemd/system/*' | head -n1)
  if [ -z "$unit" ]; then
    bad "kvd.service not installed under $D"
  else
    ok "kvd.service at ${unit#"$D"}"
    for key in "ExecStart=$BINDIR/kvd --data-dir /var/lib/rkv" "StateDirectory=rkv" "LimitMEMLOCK=infinity" \
               "Type=simple" "WantedBy=multi-user.target"; do
      grep -qxF -- "$key" "$unit" || grep -q "^${key}\( \|$\)" "$unit" || bad "kvd.service lacks '$key'"
    done
    grep -qE '^(PrivateDevices|PrivateNetwork)=(yes|true)' "$unit" && bad "kvd.service hides devices or the network RDMA needs"
    if command -v systemd-analyze >/dev/null; then
      # verify checks that ExecStart's program exists and runs `man` for
      # Documentation=: a copy whose ExecStart is D's kvd, with D's man pages.
      mkdir -p "$OUT/unit" && sed "s|$BINDIR/kvd|$D$BINDIR/kvd|" "$unit" >"$OUT/unit/kvd.service"
      vout=$(MANPATH=$D$MANDIR systemd-analyze verify "$OUT/unit/kvd.service" 2>&1)
      rc=$?
      # It exits 0 on unknown keys and bad values (warnings): any output fails.
      if [ $rc = 0 ] && [ -z "$vout" ]; then ok "systemd-analyze verify kvd.service: clean"
      else bad "systemd-analyze verify kvd.service (exit $rc): $vout"; fi
    else
      echo "install: NOTE: systemd-analyze not found on this machine: kvd.service checked by grep only"
    fi
  fi
fi

# ------------------------------------------------------------ 5. run it, in the guest
progs=()
for p in outside_shared outside_static; do [ -x "$p" ] && progs+=("$p"); done
if [ ${#progs[@]} = 0 ]; then
  bad "no outside program was built: nothing to run in the guest"
elif "$SOFTROCE" exec bash "$HERE/guest.sh" "$D$BINDIR/kvd" "$D$LIBDIR" "$OUT" "${progs[@]}"; then
  ok "in the guest: the installed kvd, and ${progs[*]} against it"
else
  bad "in the guest (guest.sh): see above"
fi

echo "install: $fails failure(s)"
[ "$fails" = 0 ]
