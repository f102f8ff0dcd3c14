#!/usr/bin/env bash
# bexpress as a user gets it: installs a build into a temporary prefix, checks what the shared
# library exports, builds examples/ against the installed package twice (CMake find_package and
# pkg-config, neither seeing the source tree) and runs the echo and RPC examples over tcp:// and
# rdma:// (the installed simnic), each in an empty environment (env -i: no LD_LIBRARY_PATH), as
# the README's C++ program, taken from README.md, and the consumers of tools/tests/consumer/ (one
# against the parameter-server cluster it starts).
#
#   tools/test-install.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
source_dir=$(realpath "$(dirname "$0")/..")
work=$(mktemp -d /tmp/bx-install.XXXXXX)
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
prefix=$work/prefix

echo "== cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libbexpress.so' | head -1)")
[[ -f $libdir/libbx_simnic.so && -x $prefix/bin/bx ]] || { echo "bx or the simnic not installed" >&2; exit 1; }
readelf -d "$libdir/libbexpress.so" | grep -q 'SONAME.*libbexpress.so.0' || { echo "no versioned SONAME" >&2; exit 1; }
"$source_dir/tools/check-exports.sh" "$libdir/libbexpress.so" "$prefix/include"

# A program runs as from a fresh login: PATH and, where given, BX_VERBS; nothing else.
clean_env() {
  env -i PATH="$PATH" ${BX_VERBS:+BX_VERBS="$BX_VERBS"} "$@"
}
# The same for a background process: exec, so that $! is the program's pid, which cleanup kills.
exec_clean_env() {
  exec env -i PATH="$PATH" ${BX_VERBS:+BX_VERBS="$BX_VERBS"} "$@"
}

if [[ -f $build/build.ninja ]]; then
  echo "== make install builds what is installed and no test (the target bx_installed)"
  built=$(ninja -C "$build" -t commands bx_installed)
  for output in lib/libbexpress.so "bin/bx " lib/libbx_simnic.so python/bexpress/_bexpress; do
    grep -qF -- "-o $output" <<<"$built" || { echo "bx_installed does not build $output" >&2; exit 1; }
  done
  if grep -- " -c " <<<"$built" | grep -E -- "-o [^ ]*/tests/"; then
    echo "bx_installed compiles tests" >&2
    exit 1
  fi
fi

# A consumer's compiles go through ccache where the project's set-up installed it: the result
# is the compiler's own for the same preprocessed headers and flags, and a warm CI skips ~40 s
# of compiling. Run from $work with base_dir there, the temporary prefix's paths are relative
# and the same in every run. BX_CONSUMER_CCACHE=0 compiles everything.
launcher=()
if [[ ${BX_CONSUMER_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  launcher=(ccache)
  export CCACHE_BASEDIR=$work
fi
# consumer_cxx OUTPUT SOURCE [FLAGS...]: a program built against the installed package with
# pkg-config, warnings as errors (compiled, then linked: ccache caches compiles only).
consumer_cxx() {
  local output=$1 source=$2
  shift 2
  # shellcheck disable=SC2046 # pkg-config's output is a list of flags
  (cd "$work" && "${launcher[@]}" g++ -std=c++20 -O2 -Wall -Wextra -Werror "$@" \
    $(pkg-config --cflags bexpress) -c "$source" -o "$output.o" &&
    g++ "$@" "$output.o" -o "$output" $(pkg-config --libs bexpress))
}

echo "== examples with find_package(bexpress)"
# A copy of examples/ far from the source tree, so nothing can reach src/ or include/ by accident.
cp -r "$source_dir/examples" "$work/examples"
cp -r "$source_dir/tools/tests/consumer" "$work/consumer"
cmake -S "$work/examples" -B "$work/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/cmake-build" >"$work/cmake-build.log" || { cat "$work/cmake-build.log" >&2; exit 1; }

echo "== examples with pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
mkdir "$work/pc-build"
for example in echo_server echo_client; do
  consumer_cxx "$work/pc-build/$example" "$work/examples/$example.cc"
done

# Starts a server in the background and sets `started` to the url or address of its first line
# of output. Not called in $(...): the pid must reach `servers` in this shell, or cleanup would
# leave the server running.
start_server() {
  local log=$1
  shift
  # A log reused from an earlier server must not be read before the new one truncates it: that
  # race gave an empty url (CI, stop 65). Gone first, and then read once it holds a whole line.
  rm -f "$log"
  exec_clean_env "$@" >"$log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 300); do
    [[ -f $log ]] && (($(wc -l <"$log") >= 1)) && break
    sleep 0.1
  done
  started=$(head -1 "$log" | awk '{print $NF}')
}

# BX_VERBS=sim: the simnic, found next to the installed libbexpress.so (no system RNIC here).
export BX_VERBS=sim
for scheme in tcp rdma; do
  for build_kind in cmake-build pc-build; do
    echo "== echo over $scheme://, built by $build_kind"
    start_server "$work/echo-$scheme-$build_kind.log" "$work/$build_kind/echo_server" "$scheme://127.0.0.1:0"
    url=$started
    [[ $url == "$scheme://"* ]] || { cat "$work/echo-$scheme-$build_kind.log" >&2; exit 1; }
    clean_env "$work/$build_kind/echo_client" "$url" 200 65536
  done
done

echo "== the README's C++ program (README.md, \"Use it as a library\"), built with pkg-config"
awk '/^## Use it as a library/ { section = 1 } section && /^```cpp$/ { code = 1; next }
     code && /^```$/ { exit } code' "$source_dir/README.md" >"$work/readme.cc"
grep -q 'int main' "$work/readme.cc" || { echo "no C++ program in README.md's library section" >&2; exit 1; }
consumer_cxx "$work/pc-build/readme" "$work/readme.cc"
# Each failure exits 1 and prints the library's error, its code first (not a crash). $1: the
# code, as a grep pattern.
expect_error() {
  local code=$1 rc=0
  shift
  clean_env "$work/pc-build/readme" "$@" >"$work/readme.out" 2>&1 || rc=$?
  if [[ $rc != 1 ]] || ! grep -q "^$code: " "$work/readme.out"; then
    echo "the README's program, $*: exit $rc, expected 1 and $code:" >&2
    cat "$work/readme.out" >&2
    exit 1
  fi
  echo "readme $*: $(head -1 "$work/readme.out")"
}
start_server "$work/readme-echo.log" "$work/pc-build/echo_server" "rdma://127.0.0.1:0"
url=$started
[[ $url == rdma://* ]] || { cat "$work/readme-echo.log" >&2; exit 1; }
kill "${servers[-1]}"
wait "${servers[-1]}" 2>/dev/null || true
expect_error UNAVAILABLE "$url"  # nothing listens there any more
# No RDMA device here (bx::Init fails); a host with one fails to connect instead.
BX_VERBS=system expect_error "[A-Z_]*" "$url"
start_server "$work/readme-echo.log" "$work/pc-build/echo_server" "rdma://127.0.0.1:0"
clean_env "$work/pc-build/readme" "$started" | grep -x "4096 bytes back from rdma://.*"

echo "== Result::value() on an error throws bx::BadResultAccess, naming the error"
bad_access=$work/pc-build/bad_result_access
for exceptions in -fexceptions -fno-exceptions; do
  consumer_cxx "$bad_access$exceptions" "$work/consumer/bad_result_access.cc" \
    "$exceptions"
done
clean_env "$bad_access-fexceptions"  # catches it
# Uncaught, the terminate handler prints the error.
expect_terminate() {
  local rc=0
  clean_env "$@" >"$work/bad-access.out" 2>&1 || rc=$?
  if [[ $rc == 0 ]] || ! grep -q "what():  NOT_FOUND: no row for key 7" "$work/bad-access.out"; then
    echo "$*: exit $rc without the error:" >&2
    cat "$work/bad-access.out" >&2
    exit 1
  fi
}
expect_terminate "$bad_access-fexceptions" uncaught
expect_terminate "$bad_access-fno-exceptions"

echo "== RPC over rdma:// and tcp://"
start_server "$work/rpc.log" "$work/cmake-build/rpc_server" 127.0.0.1
address=$started
[[ $address == rdma://*,tcp://* ]] || { cat "$work/rpc.log" >&2; exit 1; }
clean_env "$work/cmake-build/rpc_client" "$address" "hello, bexpress"
echo "== RPC, TCP only (no RDMA device asked for)"
BX_VERBS=system start_server "$work/rpc-tcp.log" "$work/cmake-build/rpc_server" 127.0.0.1 tcp
address=$started
BX_VERBS=system clean_env "$work/cmake-build/rpc_client" "$address"

echo "== parameter server: two shards (the installed bx, the example server), the example client"
# Ports for the cluster file: consecutive from a random start below the kernel's ephemeral range
# (so no client socket of a concurrent test holds one), skipping any socket in use; never the
# same port twice (the cluster file refuses a host:port named twice).
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
next_port=$((10000 + RANDOM % (ephemeral_low > 12000 ? ephemeral_low - 12000 : 1000)))
ports=()
while ((${#ports[@]} < 4)); do
  [[ -z $(ss -Htan "( sport = :$next_port )") ]] && ports+=("$next_port")
  next_port=$((next_port + 1))
done
cluster=$work/cluster.json
(umask 077 && head -c 32 /dev/urandom | base64 >"$work/cluster.secret")
cat >"$cluster" <<JSON
{"version": 1, "transport": "rdma", "secret_file": "cluster.secret",
 "tables": [{"id": 1, "name": "emb", "kind": "embedding", "dim": 8,
             "init": {"kind": "constant", "value": 1.0},
             "optimizer": {"kind": "sgd", "learning_rate": 1.0}}],
 "shards": [
  {"replicas": [{"rdma": "rdma://127.0.0.1:${ports[0]}", "tcp": "tcp://127.0.0.1:${ports[1]}"}]},
  {"replicas": [{"rdma": "rdma://127.0.0.1:${ports[2]}", "tcp": "tcp://127.0.0.1:${ports[3]}"}]}]}
JSON
# Shard 0 by the installed bx, shard 1 by the example server (bx::ps::PsServer).
exec_clean_env "$prefix/bin/bx" ps serve --cluster "$cluster" --shard 0 --replica 0 \
  >"$work/ps0.log" 2>&1 &
servers+=($!)
exec_clean_env "$work/cmake-build/ps_server" "$cluster" 1 0 >"$work/ps1.log" 2>&1 &
servers+=($!)
for shard in 0 1; do
  for _ in $(seq 1 300); do
    grep -q "primary of epoch 1\|^serving" "$work/ps$shard.log" && break
    sleep 0.1
  done
  grep -q "primary of epoch 1\|^serving" "$work/ps$shard.log" || { cat "$work/ps$shard.log" >&2; exit 1; }
done
clean_env "$work/cmake-build/ps_client" "$cluster" 1

echo "== tables by name from C++ (PsClient::TableId and the name overloads), built with pkg-config"
consumer_cxx "$work/pc-build/table_names" "$work/consumer/table_names.cc"
clean_env "$work/pc-build/table_names" "$cluster"

echo "== the Python package as installed, against the same cluster"
module=$(find "$prefix" -name '_bexpress*.so' | head -1)
[[ -n $module ]] || { echo "the bexpress Python package is not installed" >&2; exit 1; }
# Debian's interpreter, from a directory far from the source tree, with nothing set up.
(cd "$work" && PYTHONPATH=$(dirname "$(dirname "$module")") \
  /usr/bin/python3 - "$cluster" "$prefix" <<'PY'
import os
import sys
import numpy as np
import bexpress
import bexpress.testing
assert "/bx-install." in bexpress.__file__, bexpress.__file__  # the installed copy
# LocalCluster's bx, without BX_BIN: the one installed beside the package.
os.environ.pop("BX_BIN", None)
bx = bexpress.testing.find_bx()
assert bx == os.path.join(sys.argv[2], "bin", "bx"), bx
bexpress.init()
with bexpress.PsClient(sys.argv[1], transport="rdma") as client:
    keys = np.array([987654321, 123456789], dtype=np.uint64)
    client.push("emb", keys, np.ones((2, 8), np.float32))
    rows = client.fetch("emb", keys)
    assert (rows == 0.0).all(), rows  # constant 1.0, then one SGD step of gradient 1
print("python: push and fetch through the installed package OK")
PY
)
echo "test-install: OK"
