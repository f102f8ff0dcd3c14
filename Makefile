# Front door: `make demo` and `make test` work on a fresh Debian 12 machine.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
SANITIZE ?=
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps configure build test demo format format-check clean asan tsan

all: build

deps:
	@bash tools/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DBX_SANITIZE=$(SANITIZE)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

demo: build
	$(BUILD)/bin/bx devices
	$(BUILD)/bin/bx selfcheck

asan:
	$(MAKE) test BUILD=build-asan SANITIZE=address BUILD_TYPE=Debug

tsan:
	$(MAKE) test BUILD=build-tsan SANITIZE=thread BUILD_TYPE=Debug

format:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format -i

format-check:
	git ls-files '*.cc' '*.h' '*.c' | xargs clang-format --dry-run --Werror

clean:
	rm -rf build build-asan build-tsan
