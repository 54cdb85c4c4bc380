#!/usr/bin/env bash
# cluster_script (rdma suite): a cluster described in etcd (docs/cluster.md),
# through scripts/cluster: etcd + 3 kvd --cluster, then clients that name
# only the cluster.
#
#   tests/rdma/cluster_script.sh REPO BUILD   (meson test `cluster_script`, via scripts/softroce exec)
#
# Checks, each with a generous deadline and none on speed:
#  - the 3 kvd are the members etcd lists (`rkv cluster status`), with the
#    ids of the list scripts/kvds hands over, so placement is the same;
#  - the members keep a shard map in etcd (docs/cluster.md "The shard
#    map"): after every change below it names only members, each the
#    primary of a fair share of the shards, at a higher epoch;
#  - kvload --verify, rkv stats and rkv.Client (Python) over etcd://...:
#    every key on some member; kvload --verify again through an address
#    whose first etcd endpoint refuses;
#  - beside a CPU hog (a busy loop per CPU for 15 s, three lease TTLs)
#    every lease holds: the same members, the map at the same epoch, and a
#    kvload --verify meanwhile passes;
#  - kill -9 of a member: etcd drops it when its lease expires, and a client
#    opened on the cluster then works over the other two;
#  - a member paused (SIGSTOP) past its lease is dropped, refuses the writes
#    that waited for it (cluster_fence.py: none acknowledged), and joins
#    again by itself after SIGCONT;
#  - a 4th kvd (lease 600 s) joins; SIGTERM makes it leave at once (gone on
#    its exit, long before its lease could expire); a kvload over the
#    cluster meanwhile ends with 0 errors (ops refused not_owner while its
#    map lagged were placed again);
#  - a client that stays open follows the members (cluster_follow.py): a
#    kvd that joins gets some of its keys, and once it left every write
#    goes to the others;
#  - bad input: a kvd that cannot reach etcd exits 1, a client of an
#    unreachable etcd or an empty cluster exits 1, a malformed address 2.
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REPO BUILD" >&2; exit 2; }
REPO=$1 BUILD=$2
fail() { echo "cluster_script: FAILED: $*" >&2; exit 1; }
[ -n "${SOFTROCE_ADDR:-}" ] || fail "SOFTROCE_ADDR is not set (run through scripts/softroce exec)"
work=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 60); do echo "SET key$i value$i"; done >"$work/load.txt"
for i in $(seq 1 60); do echo "GET key$i"; done >>"$work/load.txt"

# shellcheck disable=SC2016  # expanded by the inner shell
"$REPO/scripts/cluster" --build "$BUILD" 3 --lease-ttl 5 --log-level warn -- bash -c '
  set -u
  work=$1 build=$2 repo=$3 B=$2/apps
  fail() { echo "cluster_script: FAILED: $*" >&2; exit 1; }
  members() { "$B/rkv" cluster status --server "$RKV_CLUSTER" | grep "^member " | cut -d" " -f2 | sort | tr "\n" " "; }
  epoch_of() { awk "\$2 == \"map\" { print \$4 }"; }  # the map epoch in a status read from stdin
  # Waits (at most 120 s) until the members are exactly $1.
  await_members() {
    local t0=$SECONDS got
    while :; do
      got=$(members)
      [ "$got" = "$1" ] && return 0
      [ $((SECONDS - t0)) -lt 120 ] || fail "$2: members are \"$got\", expected \"$1\""
      sleep 0.5
    done
  }
  # Waits (at most 120 s) until the map names only the members, each the
  # primary of shards/N (rounded down or up) shards, at an epoch above $2;
  # sets epoch.
  await_balanced() {
    local t0=$SECONDS out
    while :; do
      out=$("$B/rkv" cluster status --server "$RKV_CLUSTER")
      epoch=$(echo "$out" | epoch_of)
      if [ "${epoch:-0}" -gt "$2" ] && echo "$out" | awk "
          \$2 == \"map\" { shards = \$6 }
          \$1 == \"member\" { p[++n] = \$6 }
          \$1 == \"absent\" { bad = 1 }
          END {
            if (!shards || bad || !n) exit 1
            lo = int(shards / n); hi = lo + (shards % n ? 1 : 0)
            for (i = 1; i <= n; i++) if (p[i] < lo || p[i] > hi) exit 1
          }"; then
        return 0
      fi
      [ $((SECONDS - t0)) -lt 120 ] || fail "$1: the shard map is not balanced over the members at an epoch above $2: $out"
      sleep 0.5
    done
  }
  "$B/kvload" --server "${RKV_CLUSTER%/*}/nobody" --file "$work/load.txt" >"$work/out" 2>&1
  [ $? = 1 ] && grep -q "has no members" "$work/out" || fail "kvload on an empty cluster: $(cat "$work/out")"
  expected=$(echo "$RKV_SERVERS" | tr "," "\n" | sort | tr "\n" " ")
  [ "$(members)" = "$expected" ] || fail "members \"$(members)\" are not the kvd \"$expected\""
  await_balanced "3 members" 0

  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/load.txt" --depth 8 --verify -q || fail "kvload --verify over the cluster"
  # An address whose first etcd endpoint refuses (nothing on port 1): read and watched through the next.
  "$B/kvload" --server "etcd://127.0.0.1:1,${RKV_CLUSTER#etcd://}" --file "$work/load.txt" --depth 8 --verify -q ||
    fail "kvload --verify over the cluster, its first etcd endpoint unreachable"
  "$B/rkv" stats --server "$RKV_CLUSTER" >"$work/stats" || fail "rkv stats over the cluster"
  [ "$(grep -c "^# server " "$work/stats")" = 3 ] || fail "rkv stats did not ask 3 servers: $(cat "$work/stats")"
  total=0
  grep "^keys " "$work/stats" >"$work/keys"
  while read -r _ v; do total=$((total + v)); done <"$work/keys"
  [ "$total" = 60 ] || fail "the members hold $total keys, not 60"
  # The Python package opens the cluster too (built with -Dpython; the sanitized build runs its interpreter).
  if [ -d "$2/python/rkv" ]; then
    py=$2/tests/python/python_sanitized
    [ -x "$py" ] || py=python3
    PYTHONPATH=$2/python "$py" -c "
import os, rkv
with rkv.Client(os.environ[\"RKV_CLUSTER\"]) as c:
    assert c.get(\"key7\") == b\"value7\", c.get(\"key7\")
    c.set(\"py-key\", b\"py-value\")
    assert c.get(\"py-key\") == b\"py-value\"
" || fail "rkv.Client on the cluster"
  fi

  # Beside a CPU hog (a busy loop per CPU at normal priority, for three
  # lease TTLs of 5 s), no member loses its lease: the map keeps its epoch
  # (an expired lease drops the member, and it joins again: two new
  # epochs), the members stay, and a kvload --verify meanwhile passes.
  # (A kvd that let its reactor starve, as a spin at idle priority once
  # did, fails here.)
  epoch=$("$B/rkv" cluster status --server "$RKV_CLUSTER" | epoch_of)
  hogs=()
  for _ in $(seq 1 "$(nproc)"); do (while :; do :; done) & hogs+=($!); done
  hog_t0=$SECONDS
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/load.txt" --depth 8 --verify -q >"$work/hog.out" 2>&1
  hog_rc=$?
  while [ $((SECONDS - hog_t0)) -lt 15 ]; do sleep 1; done
  kill "${hogs[@]}"
  wait "${hogs[@]}" 2>/dev/null
  [ "$hog_rc" = 0 ] || fail "kvload --verify beside a CPU hog: $(cat "$work/hog.out")"
  out=$("$B/rkv" cluster status --server "$RKV_CLUSTER")
  hog_epoch=$(echo "$out" | epoch_of)
  [ "$(members)" = "$expected" ] && [ "$hog_epoch" = "$epoch" ] ||
    fail "beside a CPU hog for $((SECONDS - hog_t0)) s the map went from epoch $epoch to ${hog_epoch:-?} (a lease expired?): $out"
  echo "cluster_script: $(nproc) busy loop(s) for $((SECONDS - hog_t0)) s: every lease held (map epoch $epoch kept)"

  set -- $RKV_KVD_PIDS
  victim=$1 paused=$2
  IFS=, read -r -a list <<<"$RKV_SERVERS"
  kill -9 "$victim"
  rest=$(printf "%s\n" "${list[1]}" "${list[2]}" | sort | tr "\n" " ")
  await_members "$rest" "after kill -9 of ${list[0]}"
  await_balanced "after kill -9 of ${list[0]}" "$epoch"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/load.txt" --depth 8 --verify -q || fail "kvload over the 2 members left"

  if [ -d "$build/python/rkv" ]; then  # paused past its lease, with writes waiting for it: tests/rdma/cluster_fence.py
    PAUSED_PID=$paused PAUSED_ID=${list[1]} PYTHONPATH=$build/python "$py" "$repo/tests/rdma/cluster_fence.py" ||
      fail "a member paused past its lease"
  else
    kill -STOP "$paused"
    await_members "${list[2]} " "with ${list[1]} paused past its lease"
    kill -CONT "$paused"
  fi
  await_members "$rest" "after SIGCONT of ${list[1]} (it should join again)"
  await_balanced "after ${list[1]} joined again" 0

  # A kvload over the cluster runs while the 4th kvd joins and leaves: the
  # members refuse it not_owner while its map lags (the leaver stops writing
  # at once), and kvload places those ops again: none may fail.
  for i in $(seq 1 600); do echo "SET moving$i value$i"; echo "GET moving$i"; done >"$work/moving.txt"
  "$B/kvload" --server "$RKV_CLUSTER" --file "$work/moving.txt" --depth 8 >"$work/moving.out" 2>&1 &
  moving=$!
  "$RKV_KVD" --bind "$SOFTROCE_ADDR" --port 0 --cluster "$RKV_CLUSTER" --lease-ttl 600 >"$work/kvd4.log" 2>&1 &
  fourth=$!
  t0=$SECONDS
  until grep -q "^kvd: listening on " "$work/kvd4.log"; do
    kill -0 "$fourth" 2>/dev/null && [ $((SECONDS - t0)) -lt 120 ] || fail "a 4th kvd did not start: $(cat "$work/kvd4.log")"
    sleep 0.2
  done
  id4=$(sed -n "s/^kvd: listening on //p" "$work/kvd4.log")
  with4=$(printf "%s\n" "${list[1]}" "${list[2]}" "$id4" | sort | tr "\n" " ")
  [ "$(members)" = "$with4" ] || fail "the 4th kvd is not a member once listening: \"$(members)\""
  await_balanced "with a 4th kvd" "$epoch"
  kill -0 "$moving" 2>/dev/null && overlap="it ran through the leave" || overlap="it ended before the leave"
  kill -TERM "$fourth"
  wait "$fourth" || fail "the 4th kvd exited with status $? on SIGTERM"
  [ "$(members)" = "$rest" ] || fail "the 4th kvd (lease 600 s) is still a member after it exited: \"$(members)\""
  grep -q "left cluster" "$work/kvd4.log" || fail "the 4th kvd did not say it left: $(cat "$work/kvd4.log")"
  await_balanced "after the 4th kvd left" "$epoch"
  wait "$moving" || fail "kvload while a 4th kvd joined and left ($overlap): $(cat "$work/moving.out")"
  echo "cluster_script: kvload while a 4th kvd joined and left ($overlap): $(grep "^total:" "$work/moving.out")"

  # A client that stays open follows the members: tests/rdma/cluster_follow.py.
  if [ -d "$build/python/rkv" ]; then
    WORK=$work PYTHONPATH=$build/python "$py" "$repo/tests/rdma/cluster_follow.py" || fail "a client following the cluster"
  else
    echo "cluster_script: no Python package in $build: the follow check did not run" >&2
  fi
' _ "$work" "$BUILD" "$REPO"
rc=$?
[ "$rc" = 0 ] || fail "the command over the cluster failed (status $rc)"

# Bad input: clear errors, right exit statuses.
"$BUILD/apps/kvd" --bind "$SOFTROCE_ADDR" --port 0 --cluster etcd://127.0.0.1:1/x >"$work/out" 2>&1
[ $? = 1 ] && grep -q "cluster" "$work/out" || fail "kvd with an unreachable etcd: $(cat "$work/out")"
"$BUILD/apps/kvd" --port 0 --cluster etcd://127.0.0.1:1/x >"$work/out" 2>&1
[ $? = 2 ] && grep -q -- "--advertise" "$work/out" || fail "kvd --cluster on every address without --advertise: $(cat "$work/out")"
"$BUILD/apps/kvload" --server etcd://127.0.0.1:1/x --file "$work/load.txt" >"$work/out" 2>&1
[ $? = 1 ] && grep -q "etcd" "$work/out" || fail "kvload with an unreachable etcd: $(cat "$work/out")"
"$BUILD/apps/kvload" --server etcd://127.0.0.1 --file "$work/load.txt" >"$work/out" 2>&1
[ $? = 2 ] || fail "kvload with a malformed cluster address: $(cat "$work/out")"
echo "cluster_script: ok"
