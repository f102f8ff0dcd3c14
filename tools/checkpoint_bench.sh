#!/usr/bin/env bash
# What a checkpoint costs a training job: a cluster of 2 shards x 2 `bx ps serve` replicas on
# loopback holding ROWS rows of a dim-DIM AdaGrad table (weights and accumulators: 8 x DIM bytes
# a row), and `bx ps train` pushing for SECONDS twice over each transport: alone, then with
# `bx ps checkpoint --every EVERY` beside it. Prints the checkpoints' size and MiB/s, the
# trainers' push P50/P99 without and with them (one run: noisy; compare within the run), and the
# servers' peak VmRSS in each phase (the largest server's, sampled every 50 ms from /proc): what
# a checkpoint adds to a server's memory is the second minus the first.
#
#   checkpoint_bench.sh BX [--rows 500000] [--dim 64] [--seconds 8] [--every 2]
#                          [--transport tcp|rdma|both] [--json]
set -euo pipefail

BX=$(realpath "$1")
shift
ROWS=500000 DIM=64 SECONDS_RUN=8 EVERY=2 TRANSPORTS="tcp rdma" JSON=0
while (($#)); do
  case $1 in
    --rows) ROWS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --seconds) SECONDS_RUN=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --transport) TRANSPORTS=$([[ $2 == both ]] && echo "tcp rdma" || echo "$2"); shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d /tmp/bx-checkpoint-bench.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
export BX_SIM_FABRIC_DIR="$WORK/fabric" BX_VERBS=sim
mkdir -p "$BX_SIM_FABRIC_DIR"
(umask 077 && head -c 32 /dev/urandom | base64 >"$WORK/cluster.secret")
PY=(env PYTHONPATH="${BX_PYTHON_DIR:-$(dirname "$BX")/../python}"
  /usr/bin/python3)

source "$(dirname "$0")/../src/ps/service/tests/rss_peak.sh"
# Peak VmRSS (kB) of the largest of SERVERS into $1, until $1.stop exists.
sample_rss() { rss_peak_sampler "$1" "$1.stop" 0.05 "${SERVERS[@]}"; }

run_transport() {  # transport -> one JSON line on stdout
  local transport=$1 w="$WORK/$1" sampler
  SERVERS=()
  mkdir -p "$w"
  python3 - "$w/cluster.json" "$transport" "$DIM" <<'PY'
import json, socket, sys
path, transport, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
socks = [socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
ports = iter(s.getsockname()[1] for s in socks)
json.dump({"version": 1, "transport": transport, "secret_file": "../cluster.secret",
           "tables": [{"id": 1, "name": "emb", "kind": "embedding", "dim": dim,
                       "optimizer": {"kind": "adagrad", "learning_rate": 0.05}}],
           "shards": [{"replicas": [{"rdma": f"rdma://127.0.0.1:{next(ports)}",
                                      "tcp": f"tcp://127.0.0.1:{next(ports)}"}
                                     for _ in range(2)]} for _ in range(2)]},
          open(path, "w"), indent=1)
PY
  for s in 0 1; do
    for r in 0 1; do
      "$BX" ps serve --cluster "$w/cluster.json" --shard $s --replica $r >"$w/s$s-r$r.log" 2>&1 &
      PIDS+=($!)
      SERVERS+=($!)
    done
  done
  for s in 0 1; do
    for r in 0 1; do
      until grep -q "ready:" "$w/s$s-r$r.log"; do sleep 0.1; done
    done
  done
  # The rows, 8,192 a push, through the Python client.
  "${PY[@]}" - "$w/cluster.json" "$ROWS" "$DIM" "$transport" <<'PY'
import sys
import numpy as np
import bexpress
path, rows, dim, transport = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bexpress.init()
with bexpress.PsClient(path, transport=transport) as client:
    grads = np.full((8192, dim), 0.01, np.float32)
    for first in range(0, rows, 8192):
        keys = np.arange(10_000_000 + first, 10_000_000 + min(rows, first + 8192), dtype=np.uint64)
        client.push(1, keys, grads[: len(keys)], timeout=60.0)
PY
  sample_rss "$w/rss-alone" &
  sampler=$!
  "$BX" ps train --cluster "$w/cluster.json" --threads 2 --duration "$SECONDS_RUN" --json \
    >"$w/alone.json" 2>"$w/alone.log"
  touch "$w/rss-alone.stop"
  wait "$sampler"
  sample_rss "$w/rss-beside" &
  sampler=$!
  "$BX" ps checkpoint --cluster "$w/cluster.json" --to "$w/ckpt" --every "$EVERY" --keep 1 --json \
    >"$w/checkpoints.json" 2>"$w/checkpoints.log" &
  local checkpointer=$!
  PIDS+=($checkpointer)
  "$BX" ps train --cluster "$w/cluster.json" --threads 2 --duration "$SECONDS_RUN" --json \
    >"$w/beside.json" 2>"$w/beside.log"
  kill -TERM "$checkpointer"
  wait "$checkpointer" || true
  touch "$w/rss-beside.stop"
  wait "$sampler"
  python3 - "$w" "$transport" <<'PY'
import json, statistics, sys
w, transport = sys.argv[1], sys.argv[2]
alone, beside = (json.load(open(f"{w}/{n}.json")) for n in ("alone", "beside"))
cks = [json.loads(l) for l in open(f"{w}/checkpoints.json") if l.strip()]
print(json.dumps({
    "transport": transport, "checkpoints": len(cks),
    "checkpoint_mib": cks[0]["bytes"] / 2**20 if cks else 0,
    "checkpoint_seconds_median": statistics.median(c["seconds"] for c in cks) if cks else 0,
    "checkpoint_mib_per_second_median": statistics.median(c["mib_per_second"] for c in cks) if cks else 0,
    "push_p50_us": [alone["push_p50_us"], beside["push_p50_us"]],
    "push_p99_us": [alone["push_p99_us"], beside["push_p99_us"]],
    "requests_per_sec": [alone["requests_per_sec"], beside["requests_per_sec"]],
    "server_peak_rss_mib": [int(open(f"{w}/rss-{n}").read()) // 1024
                            for n in ("alone", "beside")]}))
PY
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}

for t in $TRANSPORTS; do run_transport "$t"; done >"$WORK/results.jsonl"
if ((JSON)); then
  cat "$WORK/results.jsonl"
  exit 0
fi
python3 - "$WORK/results.jsonl" <<'PY'
import json, sys
print(f"{'transport':<10}{'ckpts':>6}{'MiB':>8}{'s':>7}{'MiB/s':>8}  {'push P50 us alone/beside':>26}"
      f"  {'push P99 us alone/beside':>26}  {'requests/s alone/beside':>24}"
      f"  {'peak RSS MiB alone/beside':>26}")
for line in open(sys.argv[1]):
    r = json.loads(line)
    p50, p99, rps = r["push_p50_us"], r["push_p99_us"], r["requests_per_sec"]
    rss = r["server_peak_rss_mib"]
    print(f"{r['transport']:<10}{r['checkpoints']:>6}{r['checkpoint_mib']:>8.1f}"
          f"{r['checkpoint_seconds_median']:>7.2f}{r['checkpoint_mib_per_second_median']:>8.1f}"
          f"  {p50[0]:>12.0f} / {p50[1]:<11.0f}  {p99[0]:>12.0f} / {p99[1]:<11.0f}"
          f"  {rps[0]:>10.0f} / {rps[1]:<11.0f}  {rss[0]:>12d} / {rss[1]:<11d}")
PY
