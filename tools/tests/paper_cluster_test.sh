#!/usr/bin/env bash
# ctest paper_cluster_tiny: tools/paper_cluster.sh at 2 shards x 2 replicas and 2 workers for
# 3 s over both transports. Checks the JSON has both transports' figures (requests, latencies,
# CPU, I/O threads, QPs over rdma) and that no process ran more I/O threads than configured; the
# figures themselves are not judged (one loaded host decides nothing).
set -euo pipefail

BX=$1
out=$(mktemp /tmp/paper-cluster-test.XXXXXX)
trap 'rm -f "$out"' EXIT
rc=0
bash "$(dirname "$0")/../paper_cluster.sh" "$BX" --servers 2 --replicas 2 --workers 2 \
  --seconds 3 --transport both --json >"$out" || rc=$?
((rc == 77)) && exit 77
cat "$out"
((rc == 0)) || { echo "paper_cluster.sh exited $rc" >&2; exit 1; }
python3 - "$out" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
runs = result["transports"]
assert set(runs) == {"rdma", "tcp"}, runs.keys()
for name, r in runs.items():
    for key in ("requests_per_s", "fetch_p50_ms", "fetch_p99_ms", "push_p50_ms", "push_p99_ms",
                "host_cpu_us_per_request", "connect_ms"):
        assert r[key] is not None and r[key] > 0, (name, key, r[key])
    assert r["errors"] == 0 and r["worker_failures"] == 0, (name, r)
    # The limit the script states per role and transport (its io_threads_limit).
    for side in ("server", "worker"):
        assert r[side]["io_threads_max"] <= r[side]["io_threads_limit"], (name, side, r[side])
assert runs["rdma"]["server"]["qps_max"] > 0 and runs["rdma"]["worker"]["qps_max"] > 0, runs["rdma"]
assert "rdma_over_tcp" in result
print("paper_cluster_tiny: both transports reported; I/O threads within the configured count")
PY
