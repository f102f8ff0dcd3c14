#!/usr/bin/env bash
# ctest ps_first_hour: the `bx ps` mistakes of a first hour, each answered within
# seconds by a line that names the cause and the fix:
#   1. rank / train / train --verify with no cluster running: one line per run naming each
#      shard's replica addresses and "connection refused" (a wrong secret: "authentication
#      refused"), well before --duration; failed requests during a run are summarised, a line a
#      second, with their cause;
#   2. a shard of one replica says at start that its rows will not survive a restart, and
#      `bx ps serve --help` says there is no snapshot or checkpoint directory;
#   3. a push to a stopped primary without failover says that failover is not configured, and how;
#   4. --shard/--replica out of range give the file's counts; an address that is not this
#      host's names --listen-any.
# Usage: ps_first_hour_test.sh BX. One loopback cluster over tcp://, no etcd.
set -euo pipefail

BX=${1:?usage: ps_first_hour_test.sh path/to/bx}
WORK=$(mktemp -d /tmp/bx-first-hour.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((rc != 0)); then
    for f in "$WORK"/*.log; do echo "== $(basename "$f")"; tail -n 20 "$f"; done
  fi
  [[ -n ${KEEP_WORK:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT
# KEEP_GOING=1 reports every failed check before exiting 1 (to see what an old bx lacks).
FAILED=0
fail() {
  echo "FAIL: $*" >&2
  [[ -n ${KEEP_GOING:-} ]] || exit 1
  FAILED=1
}
export BX_VERBS=sim BX_SIM_FABRIC_DIR="$WORK/fabric"
mkdir -p "$BX_SIM_FABRIC_DIR"

# Ports below the ephemeral range, where no other process's connection can take them.
read -r P0 P1 P2 < <(python3 "$(dirname "$0")/../../src/ps/service/tests/free_ports.py" 3)
cluster() {  # file "replica json, ..." [top-level fields instead of "insecure": true]
  local extra=${3:-'"insecure": true,'}
  cat >"$1" <<JSON
{"version": 1, "transport": "tcp", $extra
 "tables": [{"id": 1, "name": "verify", "kind": "embedding", "dim": 8,
             "optimizer": {"kind": "sgd", "learning_rate": 1}}],
 "shards": [{"replicas": [$2]}]}
JSON
}
cluster "$WORK/one.json" "{\"tcp\": \"tcp://127.0.0.1:$P0\"}"
cluster "$WORK/two.json" "{\"tcp\": \"tcp://127.0.0.1:$P1\"}, {\"tcp\": \"tcp://127.0.0.1:$P2\"}"

wait_for() {  # file pattern seconds
  local deadline=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "no '$2' in $(basename "$1") after $3 s"
    sleep 0.1
  done
}
# A client command that must fail within 15 s (its --duration is 60 s) with one line on stderr
# matching each pattern given.
fails_fast() {  # name pattern... -- bx-arguments...
  local name=$1 patterns=() start=$SECONDS rc=0
  shift
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  timeout 15 "$BX" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log" || rc=$?
  ((rc != 0 && rc != 124)) || fail "$name: exit $rc after $((SECONDS - start)) s (want a quick failure)"
  local lines
  lines=$(wc -l <"$WORK/$name.log")
  ((lines == 1)) || fail "$name: $lines lines on stderr, want one: $(head -c 600 "$WORK/$name.log")"
  for p in "${patterns[@]}"; do
    grep -q -- "$p" "$WORK/$name.log" || fail "$name: no '$p' in: $(cat "$WORK/$name.log")"
  done
  echo "$name: failed in $((SECONDS - start)) s: $(cat "$WORK/$name.log")"
}

# 1. Nothing listens: every client command fails at once, naming the addresses and the cause.
for cmd in rank train; do
  fails_fast "no-cluster-$cmd" "shard 0: tcp://127.0.0.1:$P1 connection refused" \
    "tcp://127.0.0.1:$P2 connection refused" -- ps "$cmd" --cluster "$WORK/two.json" --duration 60
done
fails_fast no-cluster-verify "shard 0: tcp://127.0.0.1:$P0 connection refused" -- \
  ps train --verify --cluster "$WORK/one.json" --duration 60

# 2. One replica: its rows live in its memory only, and serve says so; --help says how a
# cluster outlives its processes.
"$BX" ps serve --help | tr -s ' \n' ' ' | grep -q "rows live in the replicas' memory" ||
  fail "bx ps serve --help does not say where the rows live"
"$BX" ps serve --help | tr -s ' \n' ' ' | grep -q "bx ps checkpoint" ||
  fail "bx ps serve --help does not name bx ps checkpoint"
"$BX" ps serve --cluster "$WORK/one.json" --shard 0 --replica 0 >"$WORK/one.log" 2>&1 &
PIDS+=($!)
ONE=$!
wait_for "$WORK/one.log" "listening on" 20
grep -q "will not survive a restart" "$WORK/one.log" ||
  fail "a lone replica does not say its rows will not survive a restart"

# 1 again: a client with another secret is refused by name, at once.
(umask 077 && echo "not the cluster's secret" >"$WORK/other.secret")
cluster "$WORK/stranger.json" "{\"tcp\": \"tcp://127.0.0.1:$P0\"}" '"secret_file": "other.secret",'
fails_fast wrong-secret "shard 0: tcp://127.0.0.1:$P0 authentication refused" -- \
  ps rank --cluster "$WORK/stranger.json" --duration 60

# 1 again: the server goes away mid-run: the failed requests are summarised with their cause,
# not one line each, nor only counted.
"$BX" ps rank --cluster "$WORK/one.json" --threads 2 --duration 4 >"$WORK/midrun.out" \
  2>"$WORK/midrun.log" &
RANK=$!
sleep 1.5
kill -KILL "$ONE"
wait "$ONE" 2>/dev/null || true
wait "$RANK" && fail "a ranker whose server died mid-run exited 0"
tr '\r' '\n' <"$WORK/midrun.log" | grep -v '^\[tcp inference\]' | grep -v '^ *$' >"$WORK/midrun.lines" || true
grep -q "fetch failed: " "$WORK/midrun.lines" || fail "the failed fetches' cause is not printed"
lines=$(wc -l <"$WORK/midrun.lines")
((lines <= 40)) || fail "$lines error lines in 2.5 s of failures (want a summary a second)"
echo "server killed mid-run: $lines lines, e.g. $(grep -m1 'repeated' "$WORK/midrun.lines" || head -n1 "$WORK/midrun.lines")"

# 3. Two replicas, no failover: the primary stops; a push says failover is not configured.
"$BX" ps serve --cluster "$WORK/two.json" --shard 0 --replica 1 >"$WORK/r1.log" 2>&1 &
PIDS+=($!)
"$BX" ps serve --cluster "$WORK/two.json" --shard 0 --replica 0 >"$WORK/r0.log" 2>&1 &
PIDS+=($!)
R0=$!
wait_for "$WORK/r0.log" "primary of epoch 1" 20
kill -KILL "$R0"
wait "$R0" 2>/dev/null || true
"$BX" ps train --verify --cluster "$WORK/two.json" --threads 1 --verify-keys 1 --duration 1 \
  --push-timeout-ms 1000 >"$WORK/nofailover.out" 2>"$WORK/nofailover.log" || true
grep -q "push to shard 0 not acknowledged in time.*failover is not configured.*config_store" \
  "$WORK/nofailover.log" || fail "a push to a stopped primary does not say failover is off"
echo "stopped primary: $(grep -m1 'not acknowledged' "$WORK/nofailover.log")"

# 4. Out-of-range indices give the file's counts; a foreign address names --listen-any.
"$BX" ps serve --cluster "$WORK/two.json" --shard 3 --replica 0 >"$WORK/shard.log" 2>&1 &&
  fail "--shard 3 of 1 was accepted"
grep -q "the cluster file has 1 shards (--shard 0..0)" "$WORK/shard.log" ||
  fail "--shard out of range: $(cat "$WORK/shard.log")"
"$BX" ps serve --cluster "$WORK/two.json" --shard 0 --replica 2 >"$WORK/replica.log" 2>&1 &&
  fail "--replica 2 of 2 was accepted"
grep -q "shard 0 has 2 replicas in the cluster file (--replica 0..1)" "$WORK/replica.log" ||
  fail "--replica out of range: $(cat "$WORK/replica.log")"
cluster "$WORK/foreign.json" "{\"tcp\": \"tcp://192.0.2.1:$P0\"}"  # TEST-NET-1: no host's
timeout 15 "$BX" ps serve --cluster "$WORK/foreign.json" --shard 0 --replica 0 \
  >"$WORK/foreign.log" 2>&1 && fail "a foreign address was served"
grep -q -- "--listen-any" "$WORK/foreign.log" ||
  fail "a foreign address does not name --listen-any: $(cat "$WORK/foreign.log")"
echo "configuration errors: $(tail -n1 "$WORK/shard.log" | cut -c1-120) ..."
((FAILED == 0)) || exit 1
echo "PASS: every first-hour failure above names its cause"
