#!/usr/bin/env bash
# rdma-core's own test suite (Debian python3-pyverbs, /usr/share/doc/rdma-core/tests) against the
# simnic: every module in its own process with libbx_simnic.so preloaded, on bxsim0, GID 0.
# A module passes when its tests pass or skip; a failure, an error, a crash (killed by a
# signal) or a timeout fails the run. Prints one line per module, then why tests were skipped.
#
#   tools/conformance.sh build/lib/libbx_simnic.so [module ...]   (default: every test_*.py)
#
# The skips are the suite's own: a test skips itself when the device lacks a feature (device
# memory, ODP, mlx5/EFA direct verbs, CUDA) or an operation fails with EOPNOTSUPP, which the
# simnic returns for what it does not implement (docs/ARCHITECTURE.md, "simnic").
set -euo pipefail
simnic=$(realpath "${1:?usage: conformance.sh path/to/libbx_simnic.so [module ...]}")
shift
source_dir=/usr/share/doc/rdma-core/tests
[[ -d $source_dir ]] || { echo "conformance: $source_dir is missing (apt-get install python3-pyverbs)"; exit 1; }
python=/usr/bin/python3  # Debian's, where pyverbs is installed
"$python" -c 'import pyverbs' 2>/dev/null || { echo "conformance: $python cannot import pyverbs"; exit 1; }

work=$(mktemp -d /tmp/bx-conformance.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$source_dir" "$work/tests"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +

modules=("$@")
if ((${#modules[@]} == 0)); then
  mapfile -t modules < <(cd "$work/tests" && ls test_*.py | sed 's/\.py$//')
fi

printf '%-28s %6s %6s %6s  %s\n' MODULE RAN PASSED SKIPPED RESULT
failed=0 total_ran=0 total_passed=0 total_skipped=0
for module in "${modules[@]}"; do
  log="$work/$module.log"
  rc=0
  (cd "$work" && LD_PRELOAD=$simnic timeout 300 "$python" tests/run_tests.py --dev bxsim0 --gid 0 \
    -v "$module") >"$log" 2>&1 || rc=$?
  ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log" | tail -1)
  summary=$(grep -E '^(OK|FAILED)' "$log" | tail -1 || true)
  skipped=$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' <<<"$summary")
  failures=$(sed -n 's/.*failures=\([0-9]*\).*/\1/p' <<<"$summary")
  errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$summary")
  ran=${ran:-0} skipped=${skipped:-0} failures=${failures:-0} errors=${errors:-0}
  if ((rc == 124)); then
    result="TIMEOUT"
  elif ((rc > 128)); then
    result="CRASH (signal $((rc - 128)))"
  elif grep -q '^OK' "$log" && ((rc == 0)); then
    result="ok"
  else
    result="FAIL ($(grep -E '^FAILED' "$log" | tail -1 || echo "exit $rc"))"
  fi
  [[ $result == ok ]] || failed=$((failed + 1))
  passed=$((ran - skipped - failures - errors))
  total_ran=$((total_ran + ran)) total_passed=$((total_passed + passed))
  total_skipped=$((total_skipped + skipped))
  printf '%-28s %6d %6d %6d  %s\n' "$module" "$ran" "$passed" "$skipped" "$result"
  if [[ $result != ok ]]; then
    grep -E '^(FAIL|ERROR):|Error|error' "$log" | head -20 | sed 's/^/    /'
  fi
done
printf '%-28s %6d %6d %6d  %d module(s) failed\n' TOTAL "$total_ran" "$total_passed" \
  "$total_skipped" "$failed"

echo
echo "Why tests skipped (count, reason):"
cat "$work"/*.log | sed -n "s/.* \.\.\. skipped '\(.*\)'$/\1/p" | sort | uniq -c | sort -rn | head -25
((failed == 0))
