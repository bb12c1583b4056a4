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

# libFuzzer over every parser of untrusted bytes, FUZZ_SECONDS each: the
# address and descriptor parsers (fuzz_wire) and the in-band message codec
# (fuzz_msg), from the corpora in the repository (copied, so that new finds
# do not dirty the tree).
FUZZ_SECONDS ?= 60
FUZZ_CC = clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Iinclude -Isrc
fuzz:
	mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-msg
	cp tests/fuzz/corpus/* $(BUILD)/fuzz-corpus/
	cp tests/fuzz/corpus-msg/* $(BUILD)/fuzz-corpus-msg/
	$(FUZZ_CC) tests/fuzz/fuzz_wire.c src/wire/wire.c -o $(BUILD)/fuzz_wire
	$(FUZZ_CC) tests/fuzz/fuzz_msg.c src/wire/msg.c -o $(BUILD)/fuzz_msg
	$(BUILD)/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_msg -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz-corpus-msg

# Random operations with checksums for SOAK_SECONDS on both providers.
SOAK_SECONDS ?= 60
soak: build
	XFER_TEST_PROVIDER=tcp $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)
	XFER_TEST_PROVIDER=shm $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)

clean:
	rm -rf build build-asan build-tsan
