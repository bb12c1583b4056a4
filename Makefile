# Thin wrapper over CMake so that a newcomer needs two commands:
#   make demo   build, then run a verified two-process transfer
#   make test   build, then run every test (sets up the Python test venv)
BUILD ?= build
PREFIX ?= /usr/local
DESTDIR ?=
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# OFF: build only the library and the tools (e.g. `make install BUILD_TESTS=OFF`).
BUILD_TESTS ?= ON

# The Python tests run in a virtual environment of their own, never in the
# system Python: $(VENV), made from $(PYTHON) with pytest and numpy, plus
# torch (a large download, several GB with its CUDA libraries) unless TORCH=0;
# the torch tests then skip. Shared by every build directory. Each step
# leaves a stamp, so it runs once.
PYTHON ?= python3
VENV ?= build/venv
TORCH ?= 1
VENV_PY := $(abspath $(VENV))/bin/python
PIP := PIP_DISABLE_PIP_VERSION_CHECK=1 $(VENV_PY) -m pip install -q

.PHONY: all build configure demo pd-demo test test-asan test-tsan check-all install venv wheel \
	bench bench-peers bench-multinic test-rdma bench-rdma fuzz soak clean distclean FORCE

all: build

# Configure again whenever a setting below changes (a make variable, not
# only CMakeLists.txt): `make install PREFIX=...` must never be ignored
# because build/ already exists.
CONFIG := -DCMAKE_INSTALL_PREFIX=$(PREFIX) -DXFER_BUILD_TESTS=$(BUILD_TESTS) \
	-DXFER_PYTHON=$(VENV_PY) $(CMAKE_FLAGS)
$(BUILD)/make-config: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CONFIG)' | cmp -s - $@ || echo '$(CONFIG)' > $@
$(BUILD)/make-configured: $(BUILD)/make-config CMakeLists.txt
	cmake -S . -B $(BUILD) $(CONFIG)
	@touch $@

configure: $(BUILD)/make-configured

build: $(BUILD)/make-configured
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/bin/xfer-demo

# Prefill/decode disaggregation demo (KV-cache module), if built.
pd-demo: build
	scripts/pd-demo.sh $(BUILD)

$(VENV)/.xfer-test-deps: python/requirements-test.txt
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r python/requirements-test.txt
	@touch $@
$(VENV)/.xfer-torch: $(VENV)/.xfer-test-deps python/requirements-torch.txt
	$(PIP) -r python/requirements-torch.txt
	@touch $@
$(VENV)/.xfer-wheel-tools: $(VENV)/.xfer-test-deps python/requirements-wheel.txt
	$(PIP) -r python/requirements-wheel.txt
	@touch $@
venv: $(VENV)/.xfer-test-deps $(VENV)/.xfer-wheel-tools $(if $(filter 1,$(TORCH)),$(VENV)/.xfer-torch)

test: build venv
	cd $(BUILD) && ctest --output-on-failure -j2

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and
# under ThreadSanitizer.
test-asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DXFER_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug"

test-tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DXFER_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug"

check-all: test test-asan test-tsan

# Real RDMA in a throw-away VM with soft-RoCE devices (shared/tools/rxe-vm,
# README there): the C suite's RDMA subset and its fault cases on
# verbs;ofi_rxm and on the raw ibverbs backend, one NIC and two NICs per
# engine (scripts/rdma-suite.sh; two NICs: a subset, RDMA_FULL=1 for all).
# 25 minutes on a 2-vCPU host under load average 30 with TCG emulation
# (2026-12-01); RDMA_PROVIDERS / RDMA_LAYOUTS / RDMA_TESTS narrow it.
RXE_VM ?= $(firstword $(wildcard shared/tools/rxe-vm ../shared/tools/rxe-vm))
RDMA_PROVIDERS ?= verbs ibverbs
RDMA_LAYOUTS ?= one two
test-rdma: build
	@test -x "$(RXE_VM)/run.sh" || { echo "test-rdma: no rxe-vm (RXE_VM=...)"; exit 1; }
	$(RXE_VM)/run.sh --rxe 4 --timeout 3600 --share $(abspath $(BUILD)) \
		$(if $(RDMA_TESTS),--env RDMA_TESTS="$(RDMA_TESTS)") $(if $(RDMA_FULL),--env RDMA_FULL=$(RDMA_FULL)) \
		-- scripts/rdma-suite.sh $(BUILD) "$(RDMA_PROVIDERS)" "$(RDMA_LAYOUTS)"

# The raw backend, verbs;ofi_rxm and ib_write_bw side by side in one VM run.
bench-rdma: build
	@test -x "$(RXE_VM)/run.sh" || { echo "bench-rdma: no rxe-vm (RXE_VM=...)"; exit 1; }
	$(RXE_VM)/run.sh --rxe 2 --timeout 1800 --share $(abspath $(BUILD)) -- scripts/bench-rdma.sh $(BUILD)

# Everything under $(DESTDIR)$(PREFIX), whatever the build was configured with.
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

# The Python wheel, libxfer inside (pyproject.toml), into $(BUILD)/dist:
# built by pip in an isolated environment, then tagged manylinux by
# auditwheel where it can be (scripts/build-wheel.sh says what it did).
wheel: $(VENV)/.xfer-wheel-tools
	scripts/build-wheel.sh $(VENV_PY) $(BUILD)/dist

# The standard benchmark matrix on the default provider (issue: xfer-bench).
bench: build
	scripts/bench.sh $(BUILD)

# xfer beside NIXL (UCX) and Mooncake Transfer Engine (TCP) on the same cases,
# tcp and shm (python/bench/peers.py). Not in `make test`: it installs the
# two from PyPI into $(BUILD)/peers-venv (about 0.5 GB, once), so it runs
# only where PyPI is reachable.
bench-peers: build
	$(PYTHON) python/bench/peers.py --build $(BUILD)

# Striping over two NICs vs one, each capped with tbf (needs root).
bench-multinic: build
	$(BUILD)/bin/xfer-bench-multinic $(RATE)

# libFuzzer over every parser of untrusted bytes, FUZZ_SECONDS each: the
# address and descriptor parsers (fuzz_wire), the in-band message codec
# (fuzz_msg) and what the same-host backend reads from peers (fuzz_sm), from
# the corpora in the repository (copied, so that new finds do not dirty the
# tree).
FUZZ_SECONDS ?= 60
FUZZ_CC = clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc
fuzz:
	mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-msg
	cp tests/fuzz/corpus/* $(BUILD)/fuzz-corpus/
	cp tests/fuzz/corpus-msg/* $(BUILD)/fuzz-corpus-msg/
	$(FUZZ_CC) tests/fuzz/fuzz_wire.c src/wire/wire.c src/backend/ibv/ibv_wire.c -o $(BUILD)/fuzz_wire
	$(FUZZ_CC) tests/fuzz/fuzz_msg.c src/wire/msg.c -o $(BUILD)/fuzz_msg
	$(BUILD)/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz-corpus
	$(BUILD)/fuzz_msg -max_total_time=$(FUZZ_SECONDS) -max_len=4096 $(BUILD)/fuzz-corpus-msg
	mkdir -p $(BUILD)/fuzz-corpus-sm
	cp tests/fuzz/corpus-sm/* $(BUILD)/fuzz-corpus-sm/
	$(FUZZ_CC) tests/fuzz/fuzz_sm.c src/backend/sm/sm_wire.c -o $(BUILD)/fuzz_sm
	$(BUILD)/fuzz_sm -max_total_time=$(FUZZ_SECONDS) -max_len=256 $(BUILD)/fuzz-corpus-sm

# Random operations with checksums for SOAK_SECONDS on both providers.
SOAK_SECONDS ?= 60
soak: build
	XFER_TEST_PROVIDER=tcp $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)
	XFER_TEST_PROVIDER=shm $(BUILD)/bin/xfer-soak $(SOAK_SECONDS)

# Build trees, but not the Python venv (torch is a large download): distclean
# removes that too.
clean:
	rm -rf build-asan build-tsan
	if [ -d build ]; then find build -mindepth 1 -maxdepth 1 ! -name venv -exec rm -rf {} +; fi

distclean: clean
	rm -rf build
