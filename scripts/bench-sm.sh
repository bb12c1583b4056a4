#!/usr/bin/env bash
# xfer's own shm against libfabric's shm, row by row: for every row, xfer on
# "shm" with the raw libfabric shm loop as its baseline, then xfer on
# "ofi-shm" (libfabric's shm behind the same engine), one after the other,
# so that both see the same machine. Prints one table (markdown) with the
# ratios; the JSON rows are kept in OUT_DIR.
#
#   scripts/bench-sm.sh [BUILD_DIR] [OUT_DIR]
#
# XFER_BENCH_SECONDS: seconds per row and implementation (default 1, split
# into 3 rounds). XFER_BENCH_RAW_COMPLETION: match (the raw loop asks for
# delivery-complete, as xfer's shm gives) or transmit (libfabric shm's
# default, its fastest; the default here). Extra xfer-bench options go in
# XFER_BENCH_ARGS. Set XFER_SPIN_US (e.g. 1000000) for busy-poll workers.
#
# A second table gives the CPU time (user + system, both processes, from
# /usr/bin/time) each backend spends moving the same bytes, a fixed number
# of calls per row: on a machine shared with other work it is steadier
# than throughput. XFER_BENCH_CPU=0 skips it.
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d /tmp/bench-sm.XXXXXX)}
bench="$build/bin/xfer-bench"
[ -x "$bench" ] || { echo "bench-sm.sh: $bench is not built" >&2; exit 1; }
mkdir -p "$out"
secs=${XFER_BENCH_SECONDS:-1}
raw=${XFER_BENCH_RAW_COMPLETION:-transmit}
read -r l1 _ < /proc/loadavg
echo "bench-sm.sh: $(nproc) CPUs, load average $l1 before the run, XFER_SPIN_US=${XFER_SPIN_US:-default}, raw completion $raw" >&2

rows=()
for s in 1K 4K 16K 64K 256K 1M 4M 16M 64M; do rows+=("--op single --size $s"); done
for p in 1K 4K 64K; do rows+=("--op paged --page-size $p --pages 10000"); done
rows+=("--op imm" "--op send --size 64")

: > "$out/shm.json"
: > "$out/ofi-shm.json"
for r in "${rows[@]}"; do
	# shellcheck disable=SC2086
	"$bench" --provider shm $r --seconds "$secs" --baseline raw --raw-completion "$raw" --json \
		${XFER_BENCH_ARGS:-} >> "$out/shm.json" 2>> "$out/shm.log" || echo "bench-sm.sh: shm row failed: $r" >&2
	# shellcheck disable=SC2086
	"$bench" --provider ofi-shm $r --seconds "$secs" --baseline none --json \
		${XFER_BENCH_ARGS:-} >> "$out/ofi-shm.json" 2>> "$out/ofi-shm.log" || echo "bench-sm.sh: ofi-shm row failed: $r" >&2
done
cpu_rows=("--op single --size 1K --iters 200000" "--op single --size 4K --iters 100000"
	"--op single --size 64K --iters 40000" "--op single --size 1M --iters 2000"
	"--op single --size 16M --iters 200" "--op paged --page-size 4K --pages 10000 --iters 20")
: > "$out/cpu.txt"
if [ "${XFER_BENCH_CPU:-1}" != 0 ] && [ -x /usr/bin/time ]; then
	for r in "${cpu_rows[@]}"; do
		for p in shm ofi-shm; do
			# shellcheck disable=SC2086
			/usr/bin/time -f "%U %S %e" -o "$out/t" "$bench" --provider "$p" $r --rounds 1 \
				--baseline none --no-trace > /dev/null 2>> "$out/cpu.log" &&
				echo "$p|$r|$(cat "$out/t")" >> "$out/cpu.txt"
		done
	done
fi
read -r l2 _ < /proc/loadavg
echo "bench-sm.sh: load average $l2 after the run; rows in $out" >&2

python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
def load(name):
    rows = {}
    for line in open(os.path.join(out, name)):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        key = (d["op"], d["bytes"], d["pages"])
        rows.setdefault(key, {})[d["impl"]] = d
    return rows
sm, ofi = load("shm.json"), load("ofi-shm.json")
def size(n):
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)
print("| row | xfer shm | raw libfabric shm | xfer ofi-shm | shm / raw | shm / ofi-shm | spread shm/raw/ofi |")
print("|---|---|---|---|---|---|---|")
for key in sorted(sm, key=lambda k: (["single", "paged", "imm", "send"].index(k[0]), k[1])):
    op, nbytes, pages = key
    x = sm[key].get("xfer"); r = sm[key].get("raw"); o = ofi.get(key, {}).get("xfer")
    if op in ("imm", "send"):
        unit, v = "us", lambda d: d["p50_us"] if d else None
        better = lambda a, b: b / a if a and b else None  # lower is better
        diff = lambda a, b: a - b if a is not None and b is not None else None
        name = f"{op} ping-pong {size(nbytes)} (half RTT p50)" if op == "send" else "imm ping-pong (half RTT p50)"
    else:
        unit, v = "Gb/s", lambda d: d["gbps"] if d else None
        better = lambda a, b: a / b if a and b else None
        name = f"single {size(nbytes)}" if op == "single" else f"paged {size(nbytes)} x {pages}"
    fmt = lambda d: "-" if v(d) is None else f"{v(d):.2f} {unit}"
    rat = lambda a, b: "-" if better(v(a), v(b)) is None else f"{better(v(a), v(b)):.2f}x"
    sp = "/".join("-" if not d or d.get("spread") is None else f"{100 * d['spread']:.0f}%" for d in (x, r, o))
    extra = ""
    if op in ("imm", "send") and x and r:
        extra = f" ({diff(v(x), v(r)):+.1f} us)"
    print(f"| {name} | {fmt(x)} | {fmt(r)} | {fmt(o)} | {rat(x, r)}{extra} | {rat(x, o)} | {sp} |")
cpu = {}
for line in open(os.path.join(out, "cpu.txt")):
    p, row, t = line.rstrip("\n").split("|")
    u, s_, wall = (float(v) for v in t.split())
    cpu.setdefault(row, {})[p] = (u + s_, wall)
if cpu:
    print()
    print("| same calls (CPU time, both processes) | xfer shm | xfer ofi-shm | ofi-shm / shm |")
    print("|---|---|---|---|")
    for row, d in cpu.items():
        a, b = d.get("shm"), d.get("ofi-shm")
        ratio = f"{b[0] / a[0]:.2f}x" if a and b and a[0] > 0 else "-"
        fmt = lambda v: f"{v[0]:.2f} s CPU ({v[1]:.1f} s wall)" if v else "-"
        print(f"| {row.replace('--op ', '').replace('--', '')} | {fmt(a)} | {fmt(b)} | {ratio} |")
PY
