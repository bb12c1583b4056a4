#!/usr/bin/env bash
# Telemetry on a 16-core machine, from a carried build/ (builds nothing; no
# GPU needed): xfer-bench with telemetry on and off in the same run
# (--telemetry both: every xfer row measured both ways in turns, round after
# round, and a closing on/off table with the rounds' spread as the noise),
# on shm (xfer's sm backend) and tcp;ofi_rxm over lo, then the exact-count
# test on both providers. Most important first.
#
# Each step has its own timeout and log (OUT/<step>.log; the bench rows also
# as JSON lines, OUT/bench-<provider>.json), a failing step's tail is
# repeated on stdout, and the script goes on after a failure. Once BUDGET
# seconds (default 220) have passed the remaining steps are listed as
# skipped. About 2-3 minutes when everything works.
#
#   scripts/device-telemetry.sh OUT_DIR
set -uo pipefail
out=${1:?usage: scripts/device-telemetry.sh OUT_DIR}
mkdir -p "$out"
chmod +x build/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -d .devlibs ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$PWD/.devlibs
export PYTHONPATH=$PWD/python XFER_LIBRARY=$PWD/build/libxfer.so PYTHONDONTWRITEBYTECODE=1
unset XFER_TELEMETRY
budget=${BUDGET:-220}
fails=0
start=$SECONDS
step() { # name, timeout (s), command...
	local name=$1 limit=$2
	shift 2
	if [ $((SECONDS - start)) -ge "$budget" ]; then
		echo "$name: skipped (the ${budget} s budget is spent)" | tee -a "$out/summary.txt"
		return 0
	fi
	local t0=$SECONDS
	timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
	local rc=$?
	echo "$name: rc=$rc in $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ' (timed out)')" | tee -a "$out/summary.txt"
	if [ $rc -ne 0 ]; then
		fails=$((fails + 1))
		tail -n 25 "$out/$name.log" | sed "s/^/    $name| /"
	fi
	return 0
}
{
	echo "machine: $(nproc) CPUs, $(uname -r), load: $(cut -d' ' -f1-3 /proc/loadavg)"
	git log -1 --format='commit %H %s' 2>/dev/null || true
} | tee "$out/machine.txt"

# The rows: single writes of 4 KiB, 64 KiB and 1 MiB (window 64), paged
# writes of 100 pages of 1 KiB, and the imm and 4 KiB SEND ping-pongs;
# 5 rounds of raw, xfer (telemetry on), xfer (off), 2 s per row and impl.
rows=(--op single,paged,imm,send --size 4K,64K,1M --page-size 1K --pages 100 --rounds "${ROUNDS:-5}" --seconds "${SECS:-2}")
# The table goes to the step's log (stderr under --json), the rows to JSON.
for p in shm tcp; do
	step "bench-$p" 110 sh -c 'json=$1; shift; exec build/bin/xfer-bench "$@" >"$json"' sh \
		"$out/bench-$p.json" --provider "$p" "${rows[@]}" --telemetry both --json
done
step test-telemetry-shm 60 env XFER_TEST_PROVIDER=shm build/bin/test_telemetry
step test-telemetry-tcp 60 env XFER_TEST_PROVIDER=tcp build/bin/test_telemetry
for p in shm tcp; do
	[ -f "$out/bench-$p.log" ] && { echo "== $p"; sed -n '/^telemetry on vs off/,$p' "$out/bench-$p.log"; }
done | tee "$out/telemetry-on-off.txt"
echo "device-telemetry: $fails step(s) failed; $((SECONDS - start)) s" | tee -a "$out/summary.txt"
exit $((fails > 0))
