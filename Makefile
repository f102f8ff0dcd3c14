# Front door: `make demo` and `make test` work on a fresh Debian 12 machine.
BUILD ?= build
# The one optimised build the whole suite runs on: Release (-O3), the optimisation users build
# with, and warnings as errors, so gcc's optimiser-driven warnings are checked where users meet
# them. -g1 keeps line tables (file:line in backtraces, perf, addr2line); full -g cost 35-55% more
# compile time per file here. OPT_FLAGS='-O3 -g -DNDEBUG' for a build to debug in gdb.
BUILD_TYPE ?= Release
OPT_FLAGS ?= -O3 -g1 -DNDEBUG
SANITIZE ?=
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
CMAKE_ARGS ?=

.PHONY: all deps configure build test demo demo-python format format-check clean asan tsan test-asan test-tsan test-pip \
	test-stress build-variants conformance test-chaos test-catch-up test-rolling test-upgrade test-bounded bench-cluster bench-checkpoint bench-rc-ud bench-peer install fuzz fuzz-smoke fuzz-build fuzz-corpus

all: build

deps:
	@bash tools/install-deps.sh

# Every build goes through ccache (installed by tools/install-deps.sh). base_dir and hash_dir
# make a clone in another folder hit the cache: ccache rewrites absolute paths under this tree to
# relative ones before hashing, and leaves the working directory out of the hash. The launcher is
# looked for when a build is configured, after `deps` ran: looked for when make read this file,
# a fresh machine's first build (ccache not yet installed) went without the cache, and so did
# every later build of that tree.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true
LAUNCHER = $$(command -v ccache >/dev/null && echo -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Our builds link with lld (tools/install-deps.sh installs it): a clean clone's build is mostly
# links once ccache has the objects, and GNU ld took 1.3 s for a test program lld links in 0.5 s.
# Only here: a user's build of the installed package links as the user's toolchain does.
LINKER = $$(command -v ld.lld >/dev/null && echo -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
  -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DBX_SANITIZE=$(SANITIZE) -DBX_WERROR=ON -DBX_UNITY_TESTS=ON \
	  $(LAUNCHER) $(LINKER) $(if $(filter Release,$(BUILD_TYPE)),-DCMAKE_CXX_FLAGS_RELEASE='$(OPT_FLAGS)' \
	  -DCMAKE_C_FLAGS_RELEASE='$(OPT_FLAGS)') $(CMAKE_ARGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The pip test (label pip) builds the library again in its own tree: ~40 s on a warm compiler
# cache, ~9 min on a cold one, which would take CI's cold run past 30 minutes: make test-pip.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(if $(CTEST_ARGS),$(CTEST_ARGS),-LE pip)

test-pip: build
	cd $(BUILD) && ctest --output-on-failure -L pip

demo: build
	$(BUILD)/bin/bx devices
	$(BUILD)/bin/bx selfcheck
	$(BUILD)/bin/bx demo

# The Python side (python/, examples/python/): trainers and a ranker in PyTorch on a `bx ps
# serve` cluster over rdma:// (simnic) and tcp://, with a plot of loss and AUC (ctr.png).
# PYTHON_ENV is what any Python program using the in-tree module needs (README, "Python").
PYTHON_ENV = PYTHONPATH=$(CURDIR)/$(BUILD)/python BX_BIN=$(CURDIR)/$(BUILD)/bin/bx
CTR_PLOT ?= ctr.png
demo-python: build
	$(PYTHON_ENV) /usr/bin/python3 examples/python/ctr_train.py --plot $(CTR_PLOT)

# The whole suite under ASan+UBSan, and under TSan. `asan` and `tsan` are the old names. The
# `profile` label (the rdma suites again on the simnic's roce, roce2 and ib shapes) is left out
# unless CTEST_ARGS says otherwise: the default shape runs the same code under the sanitizers,
# and three more sanitized passes do not fit CI's time. Both build with clang 14, which compiles
# them in about half gcc's time (and so checks the whole tree, tests and tools, for clang's
# warnings). Tests labelled `once` run in make test only: the Python tests (label python; the
# interpreter is not sanitized), the outside programs over the simnic (label conformance:
# rdma-core's suite, perftest), bench_msg_rounds' arithmetic, and ps_chaos_quick (CI runs a
# test-chaos slice on the ASan build instead).
SANITIZER_CTEST_ARGS = $(if $(CTEST_ARGS),$(CTEST_ARGS),-LE "profile|once")
# Neither builds the Python module: its tests are `once`, and the interpreter is not built with
# the sanitizer runtime. The ASan tree also builds the libFuzzer targets (fuzz/, make fuzz).
# Debug info is line tables only: a sanitizer's report needs file:line per frame, not variables,
# and full -g made the ASan tree's programs 605 MB to link and cache (477 MB so).
SANITIZER_CMAKE = $(CLANG) -DBX_BUILD_PYTHON=OFF -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only
ASAN_BUILD = BUILD=build-asan SANITIZE=address BUILD_TYPE=Debug CMAKE_ARGS='$(SANITIZER_CMAKE) -DBX_BUILD_FUZZ=ON'
TSAN_BUILD = BUILD=build-tsan SANITIZE=thread BUILD_TYPE=Debug CMAKE_ARGS='$(SANITIZER_CMAKE)'
test-asan:
	$(MAKE) test $(ASAN_BUILD) CTEST_ARGS='$(SANITIZER_CTEST_ARGS)'

# TSan sleeps 1 s at every process's exit by default (atexit_sleep_ms), a window for threads still
# running past main; each of the suite's ~570 test processes paid it, half of the TSan pass (978 s
# of 496 s x 2 cores). 50 ms keeps a window. A TSAN_OPTIONS of the caller's replaces this one.
export TSAN_OPTIONS ?= atexit_sleep_ms=50
test-tsan:
	$(MAKE) test $(TSAN_BUILD) CTEST_ARGS='$(SANITIZER_CTEST_ARGS)'

asan: test-asan
tsan: test-tsan

# The library alone (no tests, tools or simulator), one object per file, in every build type with
# clang 14 and in the two gcc build types no other target uses (make test is gcc Release), each
# with warnings as errors: 1-2 minutes a build on 2 cores. Not in CI: at the time it left CI,
# none of these builds warned where gcc -O3 and clang (whose warnings come from its front end,
# the same at every -O) did not.
LIB_ONLY = -DBX_WERROR=ON -DBX_BUILD_TESTS=OFF -DBX_BUILD_TOOLS=OFF -DBX_BUILD_SIM=OFF
CLANG = -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14
CLANG_TYPES ?= Debug Release RelWithDebInfo MinSizeRel
GCC_TYPES ?= Debug MinSizeRel
build-variants:
	set -e; for type in $(CLANG_TYPES); do \
	  cmake -S . -B build-variants/clang-$$type -G Ninja -DCMAKE_BUILD_TYPE=$$type $(LIB_ONLY) $(CLANG); \
	  cmake --build build-variants/clang-$$type -j $(JOBS); \
	done; \
	for type in $(GCC_TYPES); do \
	  cmake -S . -B build-variants/gcc-$$type -G Ninja -DCMAKE_BUILD_TYPE=$$type $(LIB_ONLY); \
	  cmake --build build-variants/gcc-$$type -j $(JOBS); \
	done

# Outside programs against the simnic: rdma-core's own test suite (python3-pyverbs), one line
# per test, then perftest and rdma-core's examples between two processes, with perftest's
# every-size sweep, then the RDMA CM's programs. Also the ctests simnic_rdma_core_suite,
# simnic_perftest and simnic_rdma_cm (in make test).
conformance: build
	bash tools/conformance.sh $(BUILD)/lib/libbx_simnic.so
	BX_PERFTEST_SWEEP=1 bash tools/perftest.sh $(BUILD)/lib/libbx_simnic.so
	bash tools/rdma_cm_programs.sh $(BUILD)/lib/libbx_simnic.so $(BUILD)/lib/libbx_simnic_cm.so

# Parameter-server replication under faults: tcp and rdma x SIGKILL, pauses of 1.5,
# 3 and 10 leases, partitions primary|backups and primary|etcd, restart, mixed, etcd paused and
# restarted, and a three-member etcd's leader killed, paused, cut off, all three members
# restarted in turn, the leader killed during a promotion (etcd3-*), then the lease-less
# control, which must lose pushes. A quick slice (ctest ps_chaos_quick) is in make test;
# CHAOS=etcd3 runs the three-member etcd's scenarios only, over tcp and rdma;
# CHAOS=rdma:partition-backups,tcp:restart (for example) runs those scenarios only.
# CHAOS_CONTROL=0 leaves the control out (CI runs it once, in ps_chaos_quick).
CHAOS ?= full
CHAOS_CONTROL ?= 1
test-chaos: build
	CHAOS_CONTROL=$(CHAOS_CONTROL) bash src/ps/service/tests/chaos_test.sh $(BUILD)/bin/bx $(CHAOS)

# Durability from outside: a replica of a CATCH_UP_MIB shard killed and restarted
# while two verifying trainers push must come back with one snapshot and nothing lost (prints
# the catch-up's phases); then five 64 MiB pushes beside the trainers with the primary killed
# after the second. make test runs a smaller catch-up (ctest ps_catch_up_load).
CATCH_UP_MIB ?= 1024
test-catch-up: build
	bash src/ps/service/tests/catch_up_load.sh $(BUILD)/bin/bx --mib $(CATCH_UP_MIB) --seconds 90
	bash src/ps/service/tests/large_push_failover.sh $(BUILD)/bin/bx --pushes 5 --seconds 40

# A rolling restart of a 2 x 3 cluster under verifying trainers, one process at a time, the
# primaries handing over (src/ps/service/tests/rolling_restart.sh): test-rolling with this
# build only; test-upgrade from UPGRADE_FROM's bx (a commit or tag; default: the last landed
# stop before planned handover), built in $(BUILD)/upgrade-from without its tests.
UPGRADE_FROM ?= 0c5a153
test-rolling: build
	bash src/ps/service/tests/rolling_restart.sh $(BUILD)/bin/bx

test-upgrade: build
	rm -rf $(BUILD)/upgrade-from && mkdir -p $(BUILD)/upgrade-from
	git archive $(UPGRADE_FROM) | tar -x -C $(BUILD)/upgrade-from
	$(MAKE) -C $(BUILD)/upgrade-from configure BUILD=build CMAKE_ARGS=-DBX_BUILD_TESTS=OFF
	cmake --build $(BUILD)/upgrade-from/build --target bx bx_simnic -j $(JOBS)
	bash src/ps/service/tests/rolling_restart.sh $(BUILD)/bin/bx \
	  --old-bx $(BUILD)/upgrade-from/build/bin/bx

# Bounded tables at scale (docs/PS.md "Bounded tables"): 10 million distinct ids through a
# 64 MiB table of a 1 x 2 `bx ps serve` cluster, the primary killed mid-stream and caught up
# again; peak RSS, evictions and identical replicas checked. make test runs 2 million through
# 16 MiB (ctest ps_bounded_stream).
test-bounded: build
	bash src/ps/service/tests/bounded_stream.sh $(BUILD)/bin/bx --keys 10000000 --mib 64

# A paper-shaped cluster on this host: etcd, CLUSTER_SERVERS shards x CLUSTER_REPLICAS
# `bx ps serve` and CLUSTER_WORKERS rankers and trainers fanning out to every shard, over rdma://
# then tcp://: requests/s, fetch/push P50/P99, host CPU per request, I/O threads and QPs per
# process, time to connect (tools/paper_cluster.sh; ~50 processes at the default, not in CI).
# Workers start CLUSTER_STAGGER_MS apart (their clocks start together once all are connected):
# all at once, ~1,000 connections opened together starved etcd on a busy 2-core host, leases
# were lost and the shards did not settle (seen when this target first ran at its default size).
CLUSTER_SERVERS ?= 16
CLUSTER_REPLICAS ?= 2
CLUSTER_WORKERS ?= 16
CLUSTER_SECONDS ?= 20
CLUSTER_STAGGER_MS ?= 4000
bench-cluster: build
	bash tools/paper_cluster.sh $(BUILD)/bin/bx --servers $(CLUSTER_SERVERS) \
	  --replicas $(CLUSTER_REPLICAS) --workers $(CLUSTER_WORKERS) --seconds $(CLUSTER_SECONDS) \
	  --stagger-ms $(CLUSTER_STAGGER_MS) --transport both

# What a checkpoint costs a training job (tools/checkpoint_bench.sh): CHECKPOINT_ROWS rows of a
# dim-64 AdaGrad table on 2 shards x 2 replicas; `bx ps train` alone, then beside `bx ps
# checkpoint --every 2`, over tcp and rdma: checkpoint MiB/s, push P50/P99, requests/s.
CHECKPOINT_ROWS ?= 500000
bench-checkpoint: build
	bash tools/checkpoint_bench.sh $(BUILD)/bin/bx --rows $(CHECKPOINT_ROWS)

# The shape of the paper's Table 2 on the simnic (tools/rc_ud_bench.sh): ib_send_bw between two
# processes over RC (64 KiB messages) and UD (one MTU each) at MTU 1024 and 4096.
bench-rc-ud: build
	bash tools/rc_ud_bench.sh $(BUILD)/lib/libbx_simnic.so

# bexpress against UCX (ucx_perftest's UCP tag tests over rc_verbs) on the same simnic device,
# both between two processes, with perftest's ib_write_lat/bw as the device's ceiling.
bench-peer: build
	python3 tools/peer_bench.py --build $(BUILD)

# Installs headers, libbexpress.so, the CMake package, bexpress.pc, bx, the simnic and the Python
# package, building only those (the target bx_installed, cmake/install.cmake), not the tests.
PREFIX ?= /usr/local
install: configure
	cmake --build $(BUILD) -j $(JOBS) --target bx_installed
	cmake --install $(BUILD) --prefix $(PREFIX)

# The PS, RPC and transport tests repeated until one fails, beside a CPU hog (a loaded CI host).
# STRESS_LOAD='command' makes that command the hog (tools/stress-tests.sh): CI runs the fuzz
# smoke there, `fuzz/run.sh build-asan 12`, so the two share one minute.
STRESS_BUILD ?= build-asan
STRESS_REPEATS ?= 20
STRESS_TESTS ?=
STRESS_EXCLUDE ?=
STRESS_LOAD ?=
test-stress:
	@if [ "$(STRESS_BUILD)" = build-tsan ]; then $(MAKE) build $(TSAN_BUILD); \
	elif [ "$(STRESS_BUILD)" = build-asan ]; then $(MAKE) build $(ASAN_BUILD); \
	else $(MAKE) build BUILD=$(STRESS_BUILD); fi
	STRESS_LOAD='$(STRESS_LOAD)' tools/stress-tests.sh $(STRESS_BUILD) $(STRESS_REPEATS) \
	  '$(STRESS_TESTS)' '$(STRESS_EXCLUDE)'

# libFuzzer targets (fuzz/, docs/HARDENING.md), built in the clang ASan tree of test-asan.
# `make fuzz` runs each target FUZZ_SECONDS, as many at once as there are cores;
# `make fuzz-smoke` 5 s each (its coverage matched 10 s runs for 7 of 9 targets). CI runs them
# 12 s each as the load beside its stress slice (.ci/run), where each gets about half a core.
FUZZ_BUILD = build-asan
FUZZ_SECONDS ?= 60

fuzz-build:
	$(MAKE) configure $(ASAN_BUILD)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=5

# Rewrites the checked-in seed corpora from the encoders (after a wire-format change).
fuzz-corpus: fuzz-build
	$(FUZZ_BUILD)/bin/fuzz_make_seeds fuzz/corpus

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

format-check:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror

clean:
	rm -rf build build-asan build-tsan build-variants
