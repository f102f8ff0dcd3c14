#!/usr/bin/env bash
# Runs every fuzz target for a bounded time and prints one summary line per target.
#
#   fuzz/run.sh <fuzz build dir> <seconds per target>
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

mkdir -p "$build/artifacts"
failed=0
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  log="$build/$t.log"
  echo "fuzz: $t for ${seconds}s (log $log)"
  if "$build/bin/$t" -max_total_time="$seconds" -print_final_stats=1 -max_len=4096 \
      -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "$here/corpus/$t" \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
    tail -n 40 "$log"
  fi
  # libFuzzer's last status line ("#N DONE cov: C ft: F corp: ... exec/s: E") and final stats.
  line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
  printf 'fuzz: %-22s %-6s %ss runs=%s exec/s=%s cov=%s ft=%s\n' \
    "$t" "$status" "$seconds" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}"
done
exit $failed
