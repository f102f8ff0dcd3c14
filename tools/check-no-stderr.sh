#!/usr/bin/env bash
# The library writes nothing to stderr by itself (include/bx/log.h): every message goes through
# the log sink. The one writer is src/base/log.cc (a process about to abort, and BX_DEBUG=1's
# lines with no sink set). Tests, test helpers and the simnic (its own library, the simulated
# device's console) are outside the rule. Fails naming each offending line.
set -euo pipefail
cd "${1:?usage: check-no-stderr.sh SOURCE_DIR}"
offenders=$(grep -rnE 'fprintf\(stderr|std::cerr|perror\(' src --include='*.cc' --include='*.h' |
  grep -vE '^src/(simnic|base/log\.cc)|/tests?/|/testing/' || true)
if [[ -n $offenders ]]; then
  echo "library code writes to stderr outside the log sink:"
  echo "$offenders"
  exit 1
fi
echo "no stderr writes in library code outside src/base/log.cc"
