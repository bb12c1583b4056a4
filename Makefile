# Thin wrapper over CMake so that a newcomer needs two commands:
#   make demo   build, then run a verified two-process transfer
#   make test   build, then run every test
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build demo test test-asan test-tsan check-all install bench clean

all: build

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/xfer-demo

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

clean:
	rm -rf build build-asan build-tsan
