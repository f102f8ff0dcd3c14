#!/usr/bin/env bash
# Training-to-serving sync, from outside (docs/PS.md "Serving sync"): a training cluster of
# 2 shards x 2 `bx ps serve` replicas with a bounded table is filled past its bound by `bx ps
# train --stream-keys`; a serving cluster of 2 x 2 then starts with `--follow` (its first sync a
# full copy: the throughput printed) and follows while `bx ps train` pushes. Checked: the
# serving primaries' lag (`bx ps stat --json`) stays under 2 s at the default interval; a push
# to the serving cluster is refused; once the trainer stops and one more sync lands, every
# serving replica holds the training primary's position, rows and digest (evicted rows gone).
#
#   serving_sync.sh BX [--transport tcp|rdma] [--keys N]
set -euo pipefail

BX=$(realpath "$1")
shift
TRANSPORT=tcp
KEYS=300000
while (($#)); do
  case $1 in
    --transport) TRANSPORT=$2; shift 2 ;;
    --keys) KEYS=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/script_work.sh"
script_work serving-sync

# NAME.json: 2 x 2 on free loopback ports; table 1 "emb" bounded to ROWS rows per replica.
cluster_file() {  # name rows
  local ports
  ports=$(python3 "$FREE_PORTS" 8)
  python3 - "$WORK/$1.json" "$TRANSPORT" "$2" "$ports" <<'PY'
import json, sys
path, transport, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
ports = iter(int(p) for p in sys.argv[4].split())
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "emb", "kind": "embedding", "dim": 16, "max_rows": rows,
                       "optimizer": {"kind": "adagrad", "learning_rate": 0.05}}],
           "shards": [{"replicas": [{"rdma": f"rdma://127.0.0.1:{next(ports)}",
                                      "tcp": f"tcp://127.0.0.1:{next(ports)}"}
                                     for _ in range(2)]} for _ in range(2)]},
          open(path, "w"), indent=1)
PY
}

start_cluster() {  # name [serve arguments...]
  local name=$1
  shift
  for s in 0 1; do
    for r in 0 1; do
      "$BX" ps serve --cluster "$WORK/$name.json" --shard $s --replica $r "$@" \
        >"$WORK/$name-$s-$r.log" 2>&1 &
      PIDS+=($!)
    done
  done
  for s in 0 1; do
    for r in 0 1; do
      local deadline=$((SECONDS + 60))
      until grep -q "ready:" "$WORK/$name-$s-$r.log"; do
        if ((SECONDS > deadline)); then
          echo "$name shard $s replica $r did not start" >&2
          exit 1
        fi
        sleep 0.1
      done
    done
  done
}

# Half the keys fit: the rest evict rows, so the sync has tombstones to carry.
BOUND=$((KEYS / 4))
cluster_file training $BOUND
cluster_file serving $BOUND
start_cluster training
"$BX" ps train --cluster "$WORK/training.json" --stream-keys "$KEYS" >"$WORK/stream.log" 2>&1

start_cluster serving --follow "$WORK/training.json"
# The first sync of each shard is a full copy: its size and throughput.
for s in 0 1; do
  deadline=$((SECONDS + 60))
  until grep -q "full copy" "$WORK/serving-$s-0.log"; do
    ((SECONDS < deadline)) || { echo "serving shard $s never synced" >&2; exit 1; }
    sleep 0.1
  done
  grep -o "full copy.*" "$WORK/serving-$s-0.log" | head -n 1 | sed "s/^/$TRANSPORT shard $s: /"
done

"$BX" ps train --cluster "$WORK/training.json" --threads 2 --duration 4 >"$WORK/train.log" 2>&1 &
TRAINER=$!
PIDS+=($TRAINER)
# Sampled once a delta followed the full copy: the copy's own age (seconds for a large one)
# is the lag until then.
MAX_LAG=0
while kill -0 "$TRAINER" 2>/dev/null; do
  lag=$("$BX" ps stat --cluster "$WORK/serving.json" --interval 0 --json | python3 -c '
import json, sys
print(max([r["sync"]["lag_ms"] for r in json.load(sys.stdin)
           if r.get("role") == "primary" and r["sync"]["applied"] >= 2] or [0]))')
  ((lag > MAX_LAG)) && MAX_LAG=$lag
  sleep 0.3
done
wait "$TRAINER"
echo "max serving lag while training pushed: $MAX_LAG ms"
if ((MAX_LAG >= 2000)); then echo "lag $MAX_LAG ms, not under 2 s" >&2; exit 1; fi

if "$BX" ps train --cluster "$WORK/serving.json" --duration 1 >"$WORK/refused.log" 2>&1 ||
  ! grep -q "push to the training cluster" "$WORK/refused.log"; then
  echo "a push to the serving cluster was not refused as it should be" >&2
  exit 1
fi

# One more sync after the trainer stopped: every serving replica equals the training primary.
deadline=$((SECONDS + 60))
until "$BX" ps stat --cluster "$WORK/training.json" --interval 0 --json --digest >"$WORK/t.json" &&
  "$BX" ps stat --cluster "$WORK/serving.json" --interval 0 --json --digest >"$WORK/s.json" &&
  python3 - "$WORK/t.json" "$WORK/s.json" <<'PY'
import json, sys
t = {r["shard"]: r for r in json.load(open(sys.argv[1])) if r["role"] == "primary"}
s = json.load(open(sys.argv[2]))
ok = all(r["sync"]["lsn"] == t[r["shard"]]["lsn"] and r["sync"]["epoch"] == t[r["shard"]]["epoch"]
         and r["tables"][0]["digest"] == t[r["shard"]]["tables"][0]["digest"]
         and r["tables"][0]["rows"] == t[r["shard"]]["tables"][0]["rows"] for r in s)
evicted = sum(r["tables"][0]["evicted"] for r in t.values())
if ok:
    print(f"serving equals training: {sum(r['tables'][0]['rows'] for r in t.values())} rows, "
          f"{evicted} evicted on training and gone from serving")
    if evicted == 0: sys.exit("nothing was evicted: the test means nothing")
sys.exit(0 if ok else 1)
PY
do
  ((SECONDS < deadline)) || { echo "serving never equalled training" >&2; exit 1; }
  sleep 0.5
done
