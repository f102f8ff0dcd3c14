#!/usr/bin/env bash
# Checkpoint, restore and reshard, from outside: a cluster of 2 shards x 2 `bx ps serve`
# replicas on loopback is checkpointed (`bx ps checkpoint`) while `bx ps train` pushes, and
# every server is killed. Clusters of 3 shards x 1 replica and 1 shard x 2 replicas start from
# it (`bx ps serve --restore`) and are checkpointed in turn; `bx ps export` writes each
# checkpoint's table as .npz, and NumPy, reading them, must find the same keys, rows and
# optimiser state in all three. A restored cluster then takes `bx ps train` pushes. Beside the
# training, `bx ps checkpoint --every 0.5 --keep 2` must leave the newest two, each readable.
# `bx ps stat` must count the export's rows on the restored primaries, and name a dead replica.
#
#   checkpoint_restore.sh BX [--transport tcp|rdma] [--json]
#
# Prints the checkpoint's size and throughput. Exits 1 on any difference or failure.
set -euo pipefail

BX=$(realpath "$1")
shift
TRANSPORT=tcp
JSON=0
while (($#)); do
  case $1 in
    --transport) TRANSPORT=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/script_work.sh"
script_work checkpoint

# A cluster file NAME.json of SHARDS x REPLICAS on free loopback ports; table 1 "emb" (AdaGrad,
# so rows carry optimiser state), the same in every file.
cluster_file() {  # name shards replicas
  local ports
  ports=$(python3 "$FREE_PORTS" $((2 * $2 * $3)))
  python3 - "$WORK/$1.json" "$TRANSPORT" "$2" "$3" "$ports" <<'PY'
import json, sys
path, transport, shards, replicas = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ports = iter(int(p) for p in sys.argv[5].split())
json.dump({"version": 1, "transport": transport, "secret_file": "cluster.secret",
           "tables": [{"id": 1, "name": "emb", "kind": "embedding", "dim": 16,
                       "init": {"kind": "uniform", "low": -0.05, "high": 0.05, "seed": 3},
                       "optimizer": {"kind": "adagrad", "learning_rate": 0.05}}],
           "shards": [{"replicas": [{"rdma": f"rdma://127.0.0.1:{next(ports)}",
                                      "tcp": f"tcp://127.0.0.1:{next(ports)}"}
                                     for _ in range(replicas)]} for _ in range(shards)]},
          open(path, "w"), indent=1)
PY
}

# Starts every replica of cluster NAME (extra arguments go to each `bx ps serve`) and waits
# until each said it is ready; their pids in CLUSTER_PIDS.
start_cluster() {  # name shards replicas [serve arguments...]
  local name=$1 shards=$2 replicas=$3
  shift 3
  CLUSTER_PIDS=()
  for ((s = 0; s < shards; s++)); do
    for ((r = 0; r < replicas; r++)); do
      "$BX" ps serve --cluster "$WORK/$name.json" --shard $s --replica $r "$@" \
        >"$WORK/$name-$s-$r.log" 2>&1 &
      PIDS+=($!)
      CLUSTER_PIDS+=($!)
    done
  done
  for ((s = 0; s < shards; s++)); do
    for ((r = 0; r < replicas; r++)); do
      local deadline=$((SECONDS + 60))
      until grep -q "ready:" "$WORK/$name-$s-$r.log"; do
        if ((SECONDS > deadline)) || ! kill -0 "${CLUSTER_PIDS[s * replicas + r]}" 2>/dev/null; then
          echo "$name shard $s replica $r did not start" >&2
          exit 1
        fi
        sleep 0.1
      done
    done
  done
}

kill_cluster() {
  kill -KILL "${CLUSTER_PIDS[@]}" 2>/dev/null || true
  for pid in "${CLUSTER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

checkpoint_and_export() {  # cluster-name checkpoint-name
  "$BX" ps checkpoint --cluster "$WORK/$1.json" --to "$WORK/$2" --json >"$WORK/$2.json" \
    2>"$WORK/$2.log"
  "$BX" ps export --from "$WORK/$2" --table emb --to "$WORK/$2.npz" --optimizer-state \
    >>"$WORK/$2.log" 2>&1
}

# The trained cluster, checkpointed while a trainer pushes.
cluster_file trained 2 2
start_cluster trained 2 2
"$BX" ps train --cluster "$WORK/trained.json" --threads 2 --duration 4 >"$WORK/train.log" 2>&1 &
TRAINER=$!
PIDS+=($TRAINER)
# Periodic checkpoints beside it: every 0.5 s, the newest two kept.
"$BX" ps checkpoint --cluster "$WORK/trained.json" --to "$WORK/periodic" --every 0.5 --keep 2 \
  --json >"$WORK/periodic.json" 2>"$WORK/periodic.log" &
PERIODIC=$!
PIDS+=($PERIODIC)
sleep 1.5
checkpoint_and_export trained first
wait "$TRAINER"
kill -TERM "$PERIODIC"
wait "$PERIODIC" || { echo "bx ps checkpoint --every failed" >&2; exit 1; }
kill_cluster
taken=$(wc -l <"$WORK/periodic.json")
kept=$(find "$WORK/periodic" -mindepth 2 -maxdepth 2 -name manifest.json | wc -l)
left=$(find "$WORK/periodic" -mindepth 1 -maxdepth 1 -type d | wc -l)
if ((taken < 3 || kept != 2 || left != 2)); then
  echo "periodic checkpoints: $taken taken, $kept complete and $left directories kept (want 2)" >&2
  exit 1
fi
newest=$(find "$WORK/periodic" -mindepth 1 -maxdepth 1 -type d | sort | tail -n 1)
"$BX" ps export --from "$newest" --table emb --to "$WORK/periodic.npz" >>"$WORK/periodic.log"

# Restored into 3 shards of one replica, and into 1 shard of two.
cluster_file wide 3 1
start_cluster wide 3 1 --restore "$WORK/first"
"$BX" ps stat --cluster "$WORK/wide.json" --interval 0 --json >"$WORK/wide-stat.json"
checkpoint_and_export wide from_wide
"$BX" ps train --cluster "$WORK/wide.json" --threads 1 --duration 1 >"$WORK/train-wide.log" 2>&1
kill_cluster
cluster_file narrow 1 2
start_cluster narrow 1 2 --restore "$WORK/first"
checkpoint_and_export narrow from_narrow
# bx ps stat names a replica that does not answer, and fails.
kill -KILL "${CLUSTER_PIDS[1]}"
wait "${CLUSTER_PIDS[1]}" 2>/dev/null || true
if "$BX" ps stat --cluster "$WORK/narrow.json" --interval 0 >"$WORK/narrow-stat.txt" 2>&1 ||
  ! grep -q "^0     1       .*UNAVAILABLE" "$WORK/narrow-stat.txt"; then
  echo "bx ps stat did not report the dead replica" >&2
  cat "$WORK/narrow-stat.txt" >&2
  exit 1
fi
kill_cluster

/usr/bin/python3 - "$WORK" "$JSON" <<'PY'
import json, sys
import numpy as np
work, as_json = sys.argv[1], sys.argv[2] == "1"
def load(name):
    with np.load(f"{work}/{name}.npz") as z:
        order = np.argsort(z["keys"])
        return {k: z[k][order] for k in ("keys", "rows", "state")}
first = load("first")
n = len(first["keys"])
assert n > 1000, f"only {n} rows in the checkpoint"
assert first["rows"].shape == (n, 16) and first["state"].shape == (n, 16), first["rows"].shape
assert np.unique(first["keys"]).size == n, "a key twice"
assert np.abs(first["state"]).max() > 0, "no optimiser state: nothing was trained"
for name in ("from_wide", "from_narrow"):
    other = load(name)
    assert np.unique(other["keys"]).size == len(other["keys"]), f"{name}: a key twice"
    for k in ("keys", "rows", "state"):
        assert np.array_equal(first[k], other[k]), f"{name}: {k} differ from the first checkpoint"
# bx ps stat of the 3-shard restore: its primaries hold every row of the checkpoint, once.
stat = json.load(open(f"{work}/wide-stat.json"))
assert len(stat) == 3 and all(r["role"] == "primary" for r in stat), stat
held = sum(t["rows"] for r in stat for t in r["tables"] if t["name"] == "emb")
assert held == n, f"bx ps stat counts {held} rows on the restored primaries, the export {n}"
meta = json.load(open(f"{work}/first.json"))
summary = {"rows": n, "bytes": meta["bytes"], "seconds": meta["seconds"],
           "mib_per_second": meta["mib_per_second"], "shards": len(meta["shards"])}
if as_json:
    print(json.dumps(summary))
else:
    print(f"checkpoint of {n} rows ({meta['bytes']} bytes, {len(meta['shards'])} shards) in "
          f"{meta['seconds']:.2f} s ({meta['mib_per_second']:.1f} MiB/s) while training; "
          "restored into 3 shards and into 1: keys, rows and optimiser state identical")
PY
awk '$1 == "requests" && $2 > 0 { ok = 1 } END { exit !ok }' "$WORK/train-wide.log" ||
  { echo "the restored cluster took no pushes" >&2; exit 1; }
