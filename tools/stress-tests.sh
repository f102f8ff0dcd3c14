#!/usr/bin/env bash
# Runs tests again and again while a CPU hog competes with them, so that a test that only
# passes on an idle machine shows itself (CI and benchmarks share 2 cores).
#
#   tools/stress-tests.sh BUILD_DIR REPEATS [ctest -R regex] [ctest -E regex]
#
# REPEATS is ctest's --repeat until-fail count; the hog is one busy loop per core, niced like
# the tests, started here and killed on exit. Default regex: the PS, RPC and transport suites.
#
# STRESS_LOAD=command makes useful work the load instead (CI: fuzz/run.sh, the libFuzzer targets
# two at a time): the busy loops start only once it has ended, so the tests see the same number
# of busy processes throughout. The command's output is printed after the tests, it is waited
# for, and its failure fails the run.
set -euo pipefail

build=${1:?usage: stress-tests.sh BUILD_DIR REPEATS [REGEX]}
repeats=${2:?usage: stress-tests.sh BUILD_DIR REPEATS [REGEX]}
regex=${3:-}
exclude=${4:-}

# The load runs in a session of its own (setsid), so that one kill ends it and every process
# it started, busy loops included.
load_dir=$(mktemp -d /tmp/bx-stress.XXXXXX)
load=
stop_load() {
  if [[ -n $load ]]; then kill -- "-$load" 2>/dev/null || true; fi
  rm -rf "$load_dir"
}
trap stop_load EXIT
setsid bash -c '
  if [[ -n $1 ]]; then
    rc=0
    bash -c "$1" >"$2/log" 2>&1 || rc=$?
    echo "$rc" >"$2/rc"
  fi
  for _ in $(seq "$(nproc)"); do (while :; do :; done) & done
  wait' stress-load "${STRESS_LOAD:-}" "$load_dir" &
load=$!

cd "$build"
if [[ -z $regex ]]; then
  # Every test of these executables (gtest_discover_tests names carry no executable name).
  regex=$(ctest --show-only=json-v1 | python3 -c '
import json, re, sys
suites = ("bx_ps_test", "bx_ps_service_test", "bx_rpc_test", "bx_transport_test")
names = [t["name"] for t in json.load(sys.stdin)["tests"]
         if t.get("command") and t["command"][0].rsplit("/", 1)[-1] in suites
         or t["name"] == "ps_multihost_failover"]
print("|".join("^" + re.escape(n) + "$" for n in names))')
fi
start=$(date +%s)
ctest --output-on-failure -j "$(nproc)" --repeat "until-fail:$repeats" -R "$regex" \
  ${exclude:+-E "$exclude"}
if [[ -z ${STRESS_LOAD:-} ]]; then
  echo "stress-tests: $repeats repeats passed in $(($(date +%s) - start)) s beside $(nproc) busy loops"
  exit 0
fi
echo "stress-tests: $repeats repeats passed in $(($(date +%s) - start)) s beside: $STRESS_LOAD"
while [[ ! -f $load_dir/rc ]] && kill -0 "$load" 2>/dev/null; do sleep 0.2; done
cat "$load_dir/log"
rc=$(cat "$load_dir/rc" 2>/dev/null || echo 1)
if ((rc != 0)); then
  echo "stress-tests: the load ($STRESS_LOAD) failed (exit $rc)"
  exit "$rc"
fi
