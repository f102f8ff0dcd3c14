#!/usr/bin/env bash
# Large pushes keep their backups, and survive the primary, from
# outside: one shard of three `bx ps serve` replicas with leases in etcd, on loopback. A
# Python client pushes a 64 MiB dense table whole, again and again; two verifying trainers start
# once the first is acknowledged, and after the second the primary is killed (SIGKILL) and
# restarted. (A 64 MiB push takes 4-7 s here, 12 s and more beside other tests: the waits below
# follow the pushes, not a clock.)
#
#   large_push_failover.sh BX [--transport tcp|rdma] [--pushes 5] [--seconds 40] [--json]
#
# Checks: no backup dropped before the kill (a slow large forward is not an unreachable
# backup), every acknowledged push applied exactly once (the big ones and the trainers'), and
# the killed replica back in the set. Exits 1 otherwise, 77 without etcd.
set -euo pipefail

BX=$(realpath "$1")
shift
TRANSPORT=tcp
PUSHES=5
SECONDS_TOTAL=40
JSON=0
while (($#)); do
  case $1 in
    --transport) TRANSPORT=$2; shift 2 ;;
    --pushes) PUSHES=$2; shift 2 ;;
    --seconds) SECONDS_TOTAL=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/loopback_cluster.sh"
loopback_start_etcd
ROWS=$((64 * 1024 * 1024 / (DIM * 4)))  # one push of every row is 64 MiB of gradients
loopback_cluster_file "$ROWS" 1          # learning rate 1: a row holds -(sum of gradients)

for r in 0 1 2; do loopback_start_server $r ""; done
wait_for_line "$WORK/r0.log" "primary of epoch" 60 || { echo "no primary" >&2; exit 1; }
for r in 1 2; do
  wait_for_line "$WORK/r$r.log" "following replica" 60 || { echo "replica $r idle" >&2; exit 1; }
done

# The big pusher: every push is every row with gradient -1, so each row must end holding a
# count between the pushes acknowledged and those plus the ones whose outcome is unknown.
loopback_python - "$WORK/cluster.json" "$ROWS" "$DIM" "$PUSHES" "$WORK/acked" \
  "$TRANSPORT" >"$WORK/big.json" 2>"$WORK/big.log" <<'PY' &
import json, os, sys, time
import numpy as np
import bexpress
path, rows, dim, pushes, signal, transport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5], sys.argv[6]
bexpress.init()
keys = np.arange(rows, dtype=np.uint64)
grads = np.full((rows, dim), -1.0, np.float32)
acked = failed = 0
seconds = []
with bexpress.PsClient(path, transport=transport) as client:
    for i in range(pushes):
        start = time.monotonic()
        try:
            client.push(2, keys, grads, timeout=120.0)
            acked += 1
        except bexpress.Error as e:
            failed += 1
            print(f"push {i}: {e}", file=sys.stderr)
        seconds.append(round(time.monotonic() - start, 2))
        open(f"{signal}-{acked}", "a").close()  # the script waits for the 1st and 2nd
    for attempt in range(40):
        try:
            values = client.fetch(2, keys, timeout=10.0)
            break
        except bexpress.Error:
            time.sleep(0.5)
applied = values[:, 0]
uniform = bool((values == values[:, :1]).all())
lo, hi = float(applied.min()), float(applied.max())
print(json.dumps({"acked": acked, "failed": failed, "applied_min": lo, "applied_max": hi,
                  "uniform": uniform, "push_seconds": seconds,
                  "ok": uniform and lo >= acked and hi <= acked + failed}))
PY
BIG=$!
PIDS+=($BIG)

wait_for_file() {  # path what
  local deadline=$((SECONDS + 300))
  until [[ -e $1 ]]; do
    ((SECONDS < deadline)) || { echo "$2 not acknowledged within 300 s" >&2; exit 1; }
    kill -0 "$BIG" 2>/dev/null || { echo "the large pusher ended before $2" >&2; exit 1; }
    sleep 0.1
  done
}
wait_for_file "$WORK/acked-1" "the first large push"
loopback_start_trainers "$SECONDS_TOTAL"
wait_for_file "$WORK/acked-2" "the second large push"
drops_before_kill=$(grep -c "dropped unreachable replica" "$WORK/r0.log" || true)
kill -KILL "${SERVER[0]}"
wait "${SERVER[0]}" 2>/dev/null || true
loopback_start_server 0 -restarted
rejoined=0
if wait_for_line "$WORK/r0-restarted.log" "joined the set" 300; then rejoined=1; fi
wait "$BIG" || true
loopback_wait_trainers
read -r lost doubled acked p99 stall < <(loopback_trainer_results)
big=$(cat "$WORK/big.json")
big_ok=$(python3 -c "import json,sys; print(int(json.loads(sys.argv[1])['ok']))" "${big:-{\}}" \
  2>/dev/null || echo 0)
if ((JSON)); then
  printf '{"transport": "%s", "backups_dropped_before_kill": %d, "killed_primary_rejoined": %d, "big": %s, "trainers": {"acked": %d, "lost": %d, "doubled": %d, "push_p99_ms": %s}}\n' \
    "$TRANSPORT" "$drops_before_kill" "$rejoined" "${big:-null}" "$acked" "$lost" "$doubled" "$p99"
else
  echo "64 MiB pushes over $TRANSPORT beside 2 trainers, primary killed after the second:"
  echo "  backups dropped before the kill: $drops_before_kill; killed primary back in the set: $rejoined"
  echo "  large pushes: $big"
  echo "  trainers: acknowledged $acked, lost $lost, doubled $doubled, push p99 $p99 ms"
  grep -h "dropped unreachable\|primary of epoch\|joined the set" "$WORK"/r*.log | sed 's/^/  | /'
fi
((drops_before_kill == 0 && rejoined == 1 && big_ok == 1 && lost == 0 && doubled == 0))
