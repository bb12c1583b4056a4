#!/usr/bin/env bash
# Builds the xfer wheel, libxfer inside, into OUTDIR.
#
#   scripts/build-wheel.sh PYTHON OUTDIR      (make wheel: build/venv's python, build/dist)
#
# pip builds it in an isolated environment (scikit-build-core from PyPI)
# with this repository's CMake; the wheel is tagged py3-none-linux_<arch>.
# Then auditwheel, where PYTHON's environment has it (make venv installs it),
# retags it manylinux_2_X for the oldest glibc its symbols allow. libfabric
# and hwloc are left out of the wheel on purpose (--exclude): their
# providers and plugins (rdma-core's verbs/efa drivers, hwloc's) are loaded
# from the host at run time and must match the host's kernel drivers and
# rdma-core, so they stay system libraries (Debian: libfabric1 libhwloc15),
# as libcuda does for GPU wheels. If auditwheel refuses, the linux-tagged
# wheel is kept and the reason printed.
set -euo pipefail
py=$1
out=$2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$py" -m pip wheel -q --no-deps -w "$raw" "$src"
whl=$(ls "$raw"/xfer-*.whl)
bin=$(dirname "$py")
if [ -x "$bin/auditwheel" ] &&
	PATH="$bin:$PATH" "$bin/auditwheel" -v repair --exclude 'libfabric.so.*' --exclude 'libhwloc.so.*' \
		-w "$out" "$whl" >"$raw/auditwheel.log" 2>&1; then
	echo "build-wheel: $(ls "$out"/xfer-*manylinux*.whl | tail -1) (auditwheel; libfabric, hwloc from the system)"
else
	[ -x "$bin/auditwheel" ] && { echo "build-wheel: auditwheel refused; keeping the linux tag:"; tail -5 "$raw/auditwheel.log"; } ||
		echo "build-wheel: no auditwheel in $bin; keeping the linux tag"
	cp "$whl" "$out/"
	echo "build-wheel: $out/$(basename "$whl")"
fi
