# Thin wrapper over CMake so that a newcomer needs two commands:
#   make demo   build, then run a verified two-process transfer
#   make test   build, then run every test
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: bench-multinic all build demo pd-demo test test-asan test-tsan check-all install bench fuzz soak clean

all: build

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/xfer-demo

# Prefill/decode disaggregation demo (KV-cache module), if built.
pd-demo: build
	scripts/pd-demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j2

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and
# under ThreadSanitizer.
test-asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DXFER_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug"

test-tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DXFER_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug"

check-all: test test-asan test-tsan

install: build
	cmake --install $(BUILD)

# The standard benchmark matrix on the default provider (issue: xfer-bench).
bench: build
	scripts/bench.sh $(BUILD)

# Striping over two NICs vs one, each capped with tbf (needs root).
bench-multinic: build
	$(BUILD)/bin/xfer-bench-multinic $(RATE)

# libFuzzer over the address and descriptor parsers, and over what the
# same-host backend reads from peers (fuzz_sm), from the corpora in the
# repository (copied, so that new finds do not dirty the tree).
FUZZ_SECONDS ?= 60
fuzz:
	mkdir -p $(BUILD)/fuzz-corpus
	cp tests/fuzz/corpus/* $(BUILD)/fuzz-corpus/
	clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
		tests/fuzz/fuzz_wire.c src/wire.c -o $(BUILD)/fuzz_wire
	$(BUILD)/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz-corpus
	mkdir -p $(BUILD)/fuzz-corpus-sm
	cp tests/fuzz/corpus-sm/* $(BUILD)/fuzz-corpus-sm/
	clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
		-Isrc/backend/sm tests/fuzz/fuzz_sm.c src/backend/sm/sm_wire.c -o $(BUILD)/fuzz_sm
	$(BUILD)/fuzz_sm -max_total_time=$(FUZZ_SECONDS) -max_len=256 $(BUILD)/fuzz-corpus-sm

# Random operations with checksums for SOAK_SECONDS on both providers.
SOAK_SECONDS ?= 60
soak: build
	XFER_TEST_PROVIDER=tcp $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)
	XFER_TEST_PROVIDER=shm $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)

clean:
	rm -rf build build-asan build-tsan
