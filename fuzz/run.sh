#!/usr/bin/env bash
# Runs every fuzz target for a bounded time, as many at once as there are cores (FUZZ_JOBS), and
# prints one summary line per target.
#
#   fuzz/run.sh <build dir with bin/fuzz_*> <seconds per target>
#
# The checked-in seeds (fuzz/corpus/<target>/) are read, never written: new inputs go to
# <build>/corpus/<target>/, crashes to <build>/artifacts/. Exit status is non-zero when any target
# found a crash, a leak or a sanitizer report.
set -euo pipefail

build=${1:?usage: run.sh <fuzz build dir> <seconds>}
seconds=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
targets=(fuzz_bootstrap_hello fuzz_tcp_frame fuzz_tcp_handshake fuzz_engine_wire fuzz_http_request fuzz_rpc_frame
  fuzz_ps_wire fuzz_ps_snapshot fuzz_simnic_frame)

jobs=${FUZZ_JOBS:-$(nproc)}

# One target for `seconds`; writes its summary line to <build>/<target>.summary.
run_target() {
  local t=$1 log="$build/$1.log" status
  if "$build/bin/$t" -max_total_time="$seconds" -print_final_stats=1 -max_len=4096 \
      -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$here/corpus/$t" \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
  fi
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: ... exec/s: E") and final stats.
  local line runs rate cov ft
  line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
  printf 'fuzz: %-22s %-6s %ss runs=%s exec/s=%s cov=%s ft=%s\n' \
    "$t" "$status" "$seconds" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" >"$build/$t.summary"
}

# The targets run `jobs` at a time (each is one process on one core), every one for `seconds`.
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  rm -f "$build/$t.summary"
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  echo "fuzz: $t for ${seconds}s (log $build/$t.log)"
  run_target "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  if ! grep -q ' ok ' "$build/$t.summary" 2>/dev/null; then
    failed=1
    tail -n 40 "$build/$t.log"
  fi
  cat "$build/$t.summary" 2>/dev/null || echo "fuzz: $t gave no summary"
done
exit $failed
