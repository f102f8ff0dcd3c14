#!/usr/bin/env bash
# Runs tests again and again while a CPU hog competes with them, so that a test that only
# passes on an idle machine shows itself (CI and benchmarks share 2 cores).
#
#   tools/stress-tests.sh BUILD_DIR REPEATS [ctest -R regex] [ctest -E regex]
#
# REPEATS is ctest's --repeat until-fail count; the hog is one busy loop per core, niced like
# the tests, started here and killed on exit. Default regex: the PS, RPC and transport suites.
set -euo pipefail

build=${1:?usage: stress-tests.sh BUILD_DIR REPEATS [REGEX]}
repeats=${2:?usage: stress-tests.sh BUILD_DIR REPEATS [REGEX]}
regex=${3:-}
exclude=${4:-}

hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  (while :; do :; done) &
  hogs+=($!)
done

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
echo "stress-tests: $repeats repeats passed in $(($(date +%s) - start)) s beside $(nproc) busy loops"
