#!/usr/bin/env bash
# make bench: xfer-bench's standard matrix on the default provider (tcp on
# loopback) against every baseline, in about two minutes on a 2-core machine.
#
#   scripts/bench.sh [BUILD_DIR] [more xfer-bench options, e.g. --provider shm]
#
# XFER_BENCH_SECONDS sets the time per row (default 0.9, split into 3
# alternating raw/xfer rounds). Installs nothing: without ucx_perftest the
# UCX rows say so (scripts/install-deps.sh --bench installs it).
set -euo pipefail
build=${1:-build}
[ $# -gt 0 ] && shift
bench="$build/bin/xfer-bench"
if [ ! -x "$bench" ]; then
	echo "bench.sh: $bench is not built (run make)" >&2
	exit 1
fi
if ! command -v ucx_perftest >/dev/null 2>&1; then
	echo "bench.sh: ucx_perftest not found: no UCX baseline (Debian: apt-get install ucx-utils," \
		"or scripts/install-deps.sh --bench)" >&2
fi
# xfer-bench's last line says how much CPU other processes took meanwhile.
read -r l1 _ < /proc/loadavg
echo "bench.sh: $(nproc) CPUs, load average $l1 before the run"
exec "$bench" --baseline all --seconds "${XFER_BENCH_SECONDS:-0.9}" "$@"
