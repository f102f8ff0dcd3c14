#!/usr/bin/env bash
# Every public libibverbs function must be the simnic's own: each symbol the system's
# libibverbs.so.1 exports at a default IBVERBS_1.x version must be exported by libbx_simnic.so at
# the same version. A function missing here would fall through to the system library, which
# takes the simnic's context for its own and crashes. Run against the installed
# rdma-core, so that a newer one cannot reopen the hole unnoticed.
#
#   tools/check-simnic-abi.sh build/lib/libbx_simnic.so
set -euo pipefail
simnic=${1:?usage: check-simnic-abi.sh path/to/libbx_simnic.so}
# awk reads all of ldconfig's output (an early exit would kill ldconfig with SIGPIPE, which
# pipefail turns into a silent exit of this script).
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
system=$("$ldconfig" -p | awk '/libibverbs\.so\.1 / && !found {print $NF; found = 1}')
[[ -n $system && -f $system ]] || { echo "check-simnic-abi: the system libibverbs.so.1 is not installed"; exit 1; }
exports() { nm -D --defined-only --with-symbol-versions "$1" | awk '{print $3}' | grep '@@IBVERBS_1\.' | sort -u; }
missing=$(comm -23 <(exports "$system") <(exports "$simnic"))
count=$(exports "$system" | wc -l)
if [[ -n $missing ]]; then
  echo "check-simnic-abi: $(wc -l <<<"$missing") of $count public functions of $system are not the simnic's (or at another version):"
  sed 's/^/  /' <<<"$missing"
  exit 1
fi
echo "check-simnic-abi: all $count public functions of $system are exported by $simnic at their versions"
