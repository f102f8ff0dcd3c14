#!/usr/bin/env bash
# Catch-up under load, from outside: one shard of three `bx ps serve`
# replicas with leases in etcd, on loopback; a dense table of --mib MiB makes the shard large.
# Two verifying trainers push at full rate; replica 2 is killed and restarted, and must catch
# up from the primary (snapshot, backlog, attach) and be added back while they push.
#
#   catch_up_load.sh BX [--mib 200] [--transport tcp|rdma] [--seconds 40] [--json]
#
# --seconds bounds the trainers' run; they stop (SIGTERM, each still checks every acknowledged
# push) 3 s after the replica joined, once pushes have also gone through the grown set.
#
# Prints the catch-up time (restart -> "joined the set"), the snapshots the primary took for
# the joiner, the snapshot's bytes and throughput, and the trainers' lost/doubled pushes.
# Exits 1 when the replica did not join, a push was lost or doubled, or the primary took more
# than one snapshot; 77 when etcd is missing.
set -euo pipefail

BX=$(realpath "$1")
shift
MIB=200
TRANSPORT=tcp
SECONDS_TOTAL=40
JSON=0
while (($#)); do
  case $1 in
    --mib) MIB=$2; shift 2 ;;
    --transport) TRANSPORT=$2; shift 2 ;;
    --seconds) SECONDS_TOTAL=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/loopback_cluster.sh"
loopback_start_etcd
ROWS=$((MIB * 1024 * 1024 / (DIM * 4)))
loopback_cluster_file "$ROWS" 0.01
start_server() { loopback_start_server "$@"; }

for r in 0 1 2; do start_server $r ""; done
wait_for_line "$WORK/r0.log" "primary of epoch" 60 || { echo "no primary" >&2; exit 1; }
wait_for_line "$WORK/r2.log" "following replica" 60 || { echo "replica 2 not following" >&2; exit 1; }

# Rows exist once pushed: fill the dense table through the Python client, 8 MiB per push.
fill_start=$(now_ms)
loopback_python - "$WORK/cluster.json" "$ROWS" "$DIM" <<'PY'
import sys
import numpy as np
import bexpress
path, rows, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bexpress.init()
with bexpress.PsClient(path, transport="tcp") as client:
    batch = 8192
    grads = np.zeros((batch, dim), np.float32)
    for first in range(0, rows, batch):
        keys = np.arange(first, min(rows, first + batch), dtype=np.uint64)
        client.push(2, keys, grads[: len(keys)], timeout=60.0)
PY
fill_ms=$(($(now_ms) - fill_start))

loopback_start_trainers "$SECONDS_TOTAL"
sleep 3
kill -KILL "${SERVER[2]}"
restart_ms=$(now_ms)
wait "${SERVER[2]}" 2>/dev/null || true  # its ports are free once it is gone (a GiB takes a while)
before=$(wc -l <"$WORK/r0.log")
# The primary's log from the restart on.
after_restart() { tail -n +$((before + 1)) "$WORK/r0.log"; }
start_server 2 -restarted
joined=0
snapshot_ms=-1 installed_ms=-1
# Phases: the primary drops the dead process and takes the snapshot; the joiner installs it;
# it is added once it holds every acknowledged push.
wait_for_tail() {  # pattern timeout-seconds: in r0.log after the restart
  local deadline=$((SECONDS + $2))
  until after_restart | grep -q "$1"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
if wait_for_tail "snapshot for replica 2" $((SECONDS_TOTAL - 5)); then
  snapshot_ms=$(($(now_ms) - restart_ms))
fi
if wait_for_line "$WORK/r2-restarted.log" "installed a snapshot" $((SECONDS_TOTAL - 5)); then
  installed_ms=$(($(now_ms) - restart_ms))
fi
if wait_for_line "$WORK/r2-restarted.log" "joined the set" $((SECONDS_TOTAL - 5)); then
  joined=1
fi
catch_up_ms=$(($(now_ms) - restart_ms))

snapshots=$(after_restart | grep -c "snapshot for replica 2" || true)
bytes=$(after_restart | grep -o "snapshot for replica 2 .*(\([0-9]*\) bytes)" | tail -1 |
  grep -o "([0-9]* bytes)" | tr -dc '0-9')
drops=$(grep -c "dropped unreachable replica" "$WORK/r0.log" || true)
if ((joined)); then
  sleep 3  # pushes forwarded to the joined replica too, then the rest of --seconds adds nothing
  loopback_stop_trainers
fi
loopback_wait_trainers
read -r lost doubled acked p99 stall < <(loopback_trainer_results)
mbps=$(python3 -c "print(round(${bytes:-0} / 1e6 / max($catch_up_ms, 1) * 1000, 1))")
if ((JSON)); then
  printf '{"transport": "%s", "shard_mib": %d, "joined": %d, "catch_up_ms": %d, "snapshot_taken_ms": %d, "installed_ms": %d, "snapshots": %d, "snapshot_bytes": %d, "mb_per_s": %s, "backups_dropped": %d, "acked": %d, "lost": %d, "doubled": %d, "push_p99_ms": %s, "longest_stall_ms": %s}\n' \
    "$TRANSPORT" "$MIB" "$joined" "$catch_up_ms" "$snapshot_ms" "$installed_ms" "$snapshots" \
    "${bytes:-0}" "$mbps" "$drops" "$acked" "$lost" "$doubled" "$p99" "$stall"
else
  echo "catch-up of a $MIB MiB shard over $TRANSPORT while 2 trainers push:"
  echo "  joined: $joined after $catch_up_ms ms (snapshot taken at $snapshot_ms ms, installed at" \
    "$installed_ms ms); snapshots taken for it: $snapshots (${bytes:-0} bytes, $mbps MB/s over" \
    "the whole catch-up)"
  echo "  trainers: push p99 $p99 ms, longest stall $stall ms"
  grep -h "snapshot for replica 2\|installed a snapshot\|catching up again\|joined the set" \
    "$WORK/r0.log" "$WORK/r2-restarted.log" | sed 's/^/  | /'
  echo "  pushes acknowledged $acked, lost $lost, doubled $doubled; drops logged: $drops; fill $fill_ms ms"
fi
((joined == 1 && lost == 0 && doubled == 0 && snapshots == 1))
