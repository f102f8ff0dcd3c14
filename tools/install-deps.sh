#!/usr/bin/env bash
# Installs the Debian packages bexpress builds and tests with, only when some are missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache   # ccache: every build (Makefile)
  lld                                # the linker of the Makefile's builds
  libibverbs-dev ibverbs-utils       # verbs.h for the loader and the ABI test; real libibverbs
  perftest                           # ib_*_lat/bw over the simnic (tools/perftest.sh)
  ucx-utils dapl2-utils              # ucx_perftest and DAPL's dtest over the simnic (perftest.sh)
  librdmacm-dev rdmacm-utils libfabric-bin   # rdma_cma.h for the simnic's CM; rping, ucmatose,
                                             # fi_pingpong over it (tools/rdma_cm_programs.sh)
  libjemalloc-dev                    # one of the allocators bx bench alloc compares
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libssl-dev                         # libcrypto's HMAC-SHA256 for peer authentication
  libgoogle-perftools-dev libmimalloc-dev   # allocators compared by `bx bench alloc`
  clang-format
  clang-14 libclang-rt-14-dev libfuzzer-14-dev   # fuzz/ (libFuzzer) and `make build-variants`
  python3-pyverbs                           # rdma-core's own test suite (`make conformance`)
  sockperf iperf3                           # peers measured beside `bx bench msg`
  libgrpc++-dev protobuf-compiler-grpc     # gRPC echo peer of `bx bench rpc` (tools/grpc_echo)
  gnuplot-nox                               # plots of `bx sim incast --sweep`
  libns3-dev          # ns-3 3.37 (~1 MB + gsl): bx_ns3_incast for `bx sim validate` (optional)
  iproute2                                  # `ip netns` (multi-host failover test), `ss`
  etcd-server etcd-client libcurl4-openssl-dev   # ps/coord: etcd store (its tests run etcd)
  pybind11-dev python3-dev                  # the bexpress Python module (python/)
  python3-venv python3-pip                  # `pip install .` offline (python_pip_install)
  python3-numpy python3-torch python3-matplotlib  # its tests, PsEmbedding, the CTR example's plot
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
