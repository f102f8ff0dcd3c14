#!/usr/bin/env bash
# rdma-core's own test suite (Debian python3-pyverbs, /usr/share/doc/rdma-core/tests) against the
# simnic, with libbx_simnic.so preloaded, on bxsim0, GID 0, and a timeout. The tests of one module
# run in one process (as the suite's own run_tests.py runs them); when that process crashes or
# times out, or a test reports nothing, each test of the module runs again in its own process so
# the culprit is named. One line per test, then a total. The run fails on any failure, error, crash (a
# signal), timeout, or a skip whose reason is not one of the documented unsupported features
# below (docs/ARCHITECTURE.md, "What it does not support").
#
#   tools/conformance.sh build/lib/libbx_simnic.so [test-id-prefix ...]
#
# A prefix selects tests by id ("test_cq", "test_qp.QPTest"); default: all of them.
set -euo pipefail
simnic=$(realpath "${1:?usage: conformance.sh path/to/libbx_simnic.so [test-id-prefix ...]}")
shift
source_dir=/usr/share/doc/rdma-core/tests
[[ -d $source_dir ]] ||
  { echo "conformance: $source_dir is missing (apt-get install python3-pyverbs)"; exit 1; }
python=/usr/bin/python3  # Debian's, where pyverbs is installed
"$python" -c 'import pyverbs' 2>/dev/null || { echo "conformance: $python cannot import pyverbs"; exit 1; }

# Skip reasons the suite gives for a feature the simnic does not have (regex, then the feature).
# A regex is matched against "test-id: reason": test_qpex gives one reason ("Extended QP is not
# supported") for every QP it cannot create, so its id says which feature was missing.
documented_skips=(
  'non MLX5 device|mlx5 context|This is not an MLX5'   'mlx5 direct verbs (vendor)'
  'non EFA device'                                      'EFA direct verbs (vendor)'
  'atomic.*: Extended QP is not supported'              'atomics'
  # These QpExTestCase tests build on its UC, raw packet or XRC players.
  'QpExTestCase\.test_(qp_ex_uc_|qp_ex_raw|qp_ex_xrc|full_rq|post_receive_qp|post_send_qp|rq_with_larger).*: Extended QP is not supported' 'UC, raw packet and XRC QPs'
  'test_mlx5_timestamp.*: Create Extended CQ'          'completion timestamps'
  'test_tag_matching.*: Extended CQ'                    'tag matching'
  'Importing a device'                                  'importing objects from another context'
  'Device memory'                                       'device memory'
  'ODP'                                                 'on-demand paging'
  'dmabuf|cuda'                                         'dma-buf and CUDA memory'
  'Atomic operations'                                   'atomics'
  'UC QP|Raw Packet QP|QP type (3|8|9|10)\b|XRCD'      'UC, raw packet and XRC QPs'
  "have net interface"                                  'rdma_cm (no net device behind the port)'
  'Create MW is not supported|memory window of type'    'type-1 memory windows'
  'real time'                                           'ibv_query_rt_values'
  'Resize CQ is not supported'                          'ibv_resize_cq'
  'huge pages of size'                                  'no 2 MiB huge pages on this host'
  'PCI device must be passed'                           'vfio (needs a PCI device)'
  'All gid indices populated'                           'a GID table with an empty index (one entry)'
)
feature_of() {  # skip reason -> documented feature, or nothing
  local i
  for ((i = 0; i < ${#documented_skips[@]}; i += 2)); do
    if [[ $1 =~ ${documented_skips[i]} ]]; then
      echo "${documented_skips[i + 1]}"
      return
    fi
  done
}

work=$(mktemp -d /tmp/bx-conformance.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$source_dir" "$work/tests"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +
cd "$work"

mapfile -t ids < <(LD_PRELOAD=$simnic "$python" tests/run_tests.py --list-tests 2>/dev/null |
  sed -n 's/^tests\.//p')
((${#ids[@]} > 0)) || { echo "conformance: the suite listed no tests"; exit 1; }
if (($# > 0)); then
  selected=()
  for id in "${ids[@]}"; do
    for prefix in "$@"; do [[ $id == "$prefix"* ]] && { selected+=("$id"); break; }; done
  done
  ids=("${selected[@]}")
fi

passed=0 skipped=0 bad=0
declare -A skip_count

# Runs the suite on the given test ids in one process; the log lands in $log, the exit code in $rc.
run_ids() {
  rc=0
  LD_PRELOAD=$simnic timeout "$timeout_s" "$python" tests/run_tests.py --dev bxsim0 --gid 0 -v "$@" \
    >"$log" 2>&1 || rc=$?
}

# unittest -v prints "name (tests.<id>)", maybe a docstring line, then "... <result>" (on a line of
# its own when the test printed something); prints
# "<id> <result>" per test that reported one.
results_of() {
  awk '
    match($0, /^test[A-Za-z0-9_]* \(tests\.[^)]*\)/) {
      id = substr($0, RSTART, RLENGTH); sub(/^[^(]*\(tests\./, "", id); sub(/\)$/, "", id)
    }
    id != "" && match($0, /(^| \.\.\. )(ok|skipped .*|FAIL|ERROR|expected failure|unexpected success)$/) {
      result = substr($0, RSTART); sub(/^ \.\.\. /, "", result); print id, result; id = ""
    }' "$1"
}

# Records one test's result line: $1 id, $2 the result unittest printed (empty: none), $3 exit code.
record() {
  local id=$1 outcome=$2 code=$3 result reason feature
  reason=$(sed -n -E "s/^skipped ['\"](.*)['\"]\$/\1/p" <<<"$outcome")
  if [[ -z $outcome ]] && ((code == 124)); then
    result="TIMEOUT"
  elif [[ -z $outcome ]] && ((code > 128)); then
    result="CRASH (signal $((code - 128)))"
  elif [[ $outcome == skipped* ]]; then
    feature=$(feature_of "$id: $reason")
    if [[ -n $feature ]]; then
      result="skip: $reason [$feature]"
      skipped=$((skipped + 1))
      skip_count[$feature]=$((${skip_count[$feature]:-0} + 1))
    else
      result="UNDOCUMENTED SKIP: $reason"
    fi
  elif [[ $outcome == ok ]]; then
    result="ok"
    passed=$((passed + 1))
  else
    result="FAIL (${outcome:-exit $code, no result})"
  fi
  printf '%-72s %s\n' "$id" "$result"
  if [[ $result != ok && $result != skip:* ]]; then
    bad=$((bad + 1))
    { grep -E "^(FAIL|ERROR):.*$id|Error|error" "$log" || true; } | head -10 | sed 's/^/    /'
  fi
}

log="$work/run.log"
declare -A module_ids
modules=()
for id in "${ids[@]}"; do
  module=${id%%.*}
  [[ -n ${module_ids[$module]:-} ]] || modules+=("$module")
  module_ids[$module]+="$id "
done
for module in "${modules[@]}"; do
  read -ra group <<<"${module_ids[$module]}"
  timeout_s=300
  run_ids "${group[@]}"
  declare -A outcome=()
  while read -r id result; do outcome[$id]=$result; done < <(results_of "$log")
  # Every test reported and the process ended as unittest ends (0, or 1 for a failure): done.
  whole=1
  for id in "${group[@]}"; do [[ -n ${outcome[$id]:-} ]] || whole=0; done
  if ((whole == 1 && rc <= 1)); then
    for id in "${group[@]}"; do record "$id" "${outcome[$id]}" "$rc"; done
  else
    echo "conformance: $module ended with exit $rc before every test reported; one process each:"
    timeout_s=120
    for id in "${group[@]}"; do
      run_ids "$id"
      record "$id" "$(results_of "$log" | awk -v id="$id" '$1 == id {sub(/^[^ ]* /, ""); print}')" "$rc"
    done
  fi
  unset outcome
done

echo
echo "Skipped, by unsupported feature:"
for feature in "${!skip_count[@]}"; do printf '%6d  %s\n' "${skip_count[$feature]}" "$feature"; done |
  sort -rn
echo
echo "conformance: ${#ids[@]} tests, $passed passed, $skipped skipped (documented), $bad failed," \
  "crashed, timed out or skipped for an undocumented reason"
((bad == 0))
