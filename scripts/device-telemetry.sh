#!/usr/bin/env bash
# Telemetry on a 16-core machine, from a carried build/ (builds nothing; no
# GPU needed): xfer-bench with telemetry on and off in the same run
# (--telemetry both: every xfer row measured both ways in turns, round after
# round, and a closing on/off table with the rounds' spread as the noise),
# on shm (xfer's sm backend) and tcp;ofi_rxm over lo, then the exact-count
# test on both providers. Most important first.
#
# Each step has its own timeout and log (OUT/<step>.log; the bench rows also
# as JSON lines, OUT/<step>.json), a failing step's tail is
# repeated on stdout, and the script goes on after a failure. Once BUDGET
# seconds (default 84) have passed the remaining steps are listed as
# skipped, and no step runs past it (90 s with the kill grace). Each bench
# step is cut at 10-20 s, each test at 10 s; the summary of every on/off table is OUT/telemetry-on-off.txt.
#
#   scripts/device-telemetry.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/device-telemetry.sh OUT_DIR}
BUDGET=${BUDGET:-84} STEP_CLIP=1 STEP_KILL=3 STEP_TAIL=25 # never past the budget
. "$(dirname "$0")/device-lib.sh" # the environment, step NAME TIMEOUT COMMAND..., OUT/summary.txt
unset XFER_TELEMETRY
start=$step_start
{
	echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
	git log -1 --format='commit %H %s' 2>/dev/null || true
} | tee "$out/machine.txt"

# One xfer-bench per op group and provider, so that each has its closing
# on/off table even if a later one is cut: single writes of 1 KiB, 64 KiB
# and 1 MiB (window 64), the imm ping-pong (where a per-operation cost shows
# most), paged writes of 10,000 pages of 4 KiB; 3 rounds of raw, xfer
# (telemetry on), xfer (off), 0.3 s per row and implementation.
common=(--rounds "${ROUNDS:-3}" --seconds "${SECS:-0.3}" --telemetry both --json)
bench() { # step name, time limit, provider, rows...
	local name=$1 limit=$2 p=$3
	shift 3
	# The table goes to the step's log (stderr under --json), the rows to JSON.
	step "$name" "$limit" sh -c 'json=$1; shift; exec build/bin/xfer-bench "$@" >"$json"' sh \
		"$out/$name.json" --provider "$p" "$@" "${common[@]}"
}
for p in shm tcp; do
	bench "single-$p" 20 "$p" --op single --size 1K,64K,1M
done
for p in shm tcp; do
	bench "imm-$p" 10 "$p" --op imm
done
step test-telemetry-shm 10 env XFER_TEST_PROVIDER=shm build/bin/test_telemetry
step test-telemetry-tcp 10 env XFER_TEST_PROVIDER=tcp build/bin/test_telemetry
for p in shm tcp; do
	bench "paged-$p" 20 "$p" --op paged --page-size 4K --pages 10000
done
for f in "$out"/single-*.log "$out"/imm-*.log "$out"/paged-*.log; do
	[ -f "$f" ] && { echo "== $(basename "$f" .log)"; sed -n '/^telemetry on vs off/,/rows slower/p' "$f"; }
done | tee "$out/telemetry-on-off.txt"
echo "device-telemetry: $fails step(s) failed; $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $((fails > 0))
