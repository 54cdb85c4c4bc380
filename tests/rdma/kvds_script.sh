#!/usr/bin/env bash
# kvds_script (rdma suite): scripts/kvds starts N kvd on the one device,
# hands the command their list, and stops them afterwards.
#
#   tests/rdma/kvds_script.sh REPO BUILD   (meson test `kvds_script`, via scripts/softroce exec)
#
# Checks: RKV_SERVERS names 3 distinct ports of $SOFTROCE_ADDR and
# RKV_KVD_PIDS 3 live processes; kvload --verify over the list succeeds and
# rkv stats shows each server holding some of the keys, all of them in sum;
# the kvd are gone after the command; the command's exit status is kvds's;
# bad arguments exit 2.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REPO BUILD" >&2; exit 2; }
REPO=$1 BUILD=$2
KVDS=$REPO/scripts/kvds
fail() { echo "kvds_script: FAILED: $*" >&2; exit 1; }
[ -n "${SOFTROCE_ADDR:-}" ] || fail "SOFTROCE_ADDR is not set (run through scripts/softroce exec)"
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT

# 60 keys, SET then GET each.
for i in $(seq 1 60); do echo "SET key$i value$i"; done >"$work/load.txt"
for i in $(seq 1 60); do echo "GET key$i"; done >>"$work/load.txt"

# shellcheck disable=SC2016  # expanded by the inner shell
"$KVDS" --build "$BUILD" 3 --log-level warn -- bash -c '
  set -u
  work=$1 build=$2
  echo "$RKV_SERVERS" >"$work/servers"
  echo "$RKV_KVD_PIDS" >"$work/pids"
  for p in $RKV_KVD_PIDS; do kill -0 "$p" || { echo "kvd $p is not running"; exit 1; }; done
  "$build/apps/kvload" --server "$RKV_SERVERS" --file "$work/load.txt" --depth 8 --verify -q || exit 1
  "$build/apps/rkv" stats --server "$RKV_SERVERS" >"$work/stats" || exit 1
' _ "$work" "$BUILD"
rc=$?
[ "$rc" = 0 ] || fail "the command over 3 kvd failed (status $rc)"

servers=$(cat "$work/servers")
IFS=, read -r -a list <<<"$servers"
[ "${#list[@]}" = 3 ] || fail "RKV_SERVERS='$servers' does not name 3 servers"
ports=()
for s in "${list[@]}"; do
  [ "${s%:*}" = "$SOFTROCE_ADDR" ] || fail "server '$s' is not on $SOFTROCE_ADDR"
  ports+=("${s##*:}")
done
[ "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" = 3 ] || fail "ports are not distinct: $servers"

[ "$(grep -c '^# server ' "$work/stats")" = 3 ] || fail "rkv stats did not report 3 servers: $(cat "$work/stats")"
total=0
grep '^keys ' "$work/stats" >"$work/keys"  # (no process substitution: the guest has no /dev/fd)
while read -r _ value; do
  [ "$value" -gt 0 ] || fail "a server holds no key: $(cat "$work/stats")"
  total=$((total + value))
done <"$work/keys"
[ "$total" = 60 ] || fail "the servers hold $total keys, not 60"

for p in $(cat "$work/pids"); do
  ! kill -0 "$p" 2>/dev/null || fail "kvd $p still runs after the command ended"
done

# The command's status is kvds's; a kvd flag it rejects fails the start (1); bad arguments are 2.
"$KVDS" --build "$BUILD" 1 -- sh -c 'exit 7'
[ $? = 7 ] || fail "the command's exit status 7 was not passed on"
"$KVDS" --build "$BUILD" 1 --no-such-flag -- true 2>"$work/err"
[ $? = 1 ] && grep -q "did not start" "$work/err" || fail "a kvd that does not start: $(cat "$work/err")"
"$KVDS" --build "$BUILD" 0 -- true 2>/dev/null
[ $? = 2 ] || fail "N = 0 was not refused with status 2"
echo "kvds_script: ok (servers $servers)"
