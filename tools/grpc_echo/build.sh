#!/usr/bin/env bash
# Builds the gRPC echo peer into <build-dir> (default: ./build/grpc_echo). Quiet unless it fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/grpc_echo}"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
log="$out.log"
mkdir -p "$out"
if ! { cmake -S "$here" -B "$out" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$out" -j 2; } >"$log" 2>&1; then
  tail -20 "$log" >&2
  echo "grpc_echo: build failed (full log: $log); install libgrpc++-dev protobuf-compiler-grpc" >&2
  exit 1
fi
