#!/usr/bin/env bash
# Before/after: xfer-bench of two builds on the same rows, taking turns
# round by round (old, new, old, new, ...) so that both see the same
# machine, and per row the two medians, their ratio and each side's round
# spread ((max - min) / median). A ratio inside the larger spread is noise.
#
#   scripts/bench-ab.sh OLD_BUILD NEW_BUILD [provider | old_provider:new_provider]
#
# The second form compares across a rename, e.g. shm:ofi-shm (libfabric's shm
# was "shm" before xfer had its own same-host backend).
#
# Environment: XFER_AB_ROUNDS (default 3, at least 3), XFER_AB_SECONDS per
# row and round (default 0.5), XFER_AB_ARGS the rows (default below), e.g.
#   XFER_AB_ARGS="--op single --size 4K,1M" scripts/bench-ab.sh build-old build shm
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 OLD_BUILD NEW_BUILD [provider]" >&2
	exit 2
fi
old=$1/bin/xfer-bench new=$2/bin/xfer-bench provider=${3:-tcp}
old_provider=${provider%%:*} new_provider=${provider#*:}
rounds=${XFER_AB_ROUNDS:-3} seconds=${XFER_AB_SECONDS:-0.5}
rows=${XFER_AB_ARGS:---op single,paged,imm,send --size 64,4K,64K,1M,16M --page-size 4K,64K --pages 100,10000}
[ "$rounds" -ge 3 ] || { echo "$0: XFER_AB_ROUNDS must be at least 3" >&2; exit 2; }
for b in "$old" "$new"; do
	[ -x "$b" ] || { echo "$0: $b is not built" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
read -r load _ < /proc/loadavg
echo "bench-ab: $provider, $rounds rounds of $seconds s per row and build, $(nproc) CPUs, load $load"
for r in $(seq 1 "$rounds"); do
	for side in old new; do
		bin=$old prov=$old_provider
		[ $side = new ] && bin=$new prov=$new_provider
		# Each side with its own libxfer: a copied build lacks the directory
		# its binaries' RUNPATH names.
		# shellcheck disable=SC2086
		LD_LIBRARY_PATH="$(dirname "$(dirname "$bin")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$bin" --provider "$prov" --baseline none --seconds "$seconds" --rounds 1 --no-trace \
			--json $rows > "$out/$side.$r.json" 2> "$out/$side.$r.err" ||
			{ echo "$0: $side round $r failed:" >&2; tail -5 "$out/$side.$r.err" >&2; exit 1; }
		echo "  round $r $side done" >&2
	done
done
read -r load _ < /proc/loadavg
python3 - "$out" "$rounds" "$load" <<'EOF'
import json, statistics, sys
out, rounds, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = {}  # row -> side -> [values]
order = []
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{side}.{r}.json"):
            line = line.strip()
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("impl") != "xfer":
                continue
            small = j["op"] in ("imm", "send") or j["bytes"] <= 64
            key = (j["op"], j["bytes"], j["pages"], j["window"])
            if key not in data:
                data[key] = {"old": [], "new": [], "unit": "Mops" if small else "Gbit/s"}
                order.append(key)
            data[key][side].append(j["mops"] if small else j["gbps"])

def spread(v):
    m = statistics.median(v)
    return (max(v) - min(v)) / m if m else 0.0

def size(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return str(b)

print(f"{'row':<24} {'unit':<7} {'old':>9} {'new':>9} {'new/old':>8} {'spread old':>11} {'spread new':>11}  verdict")
worse = 0
for key in order:
    d = data[key]
    if len(d["old"]) != rounds or len(d["new"]) != rounds:
        continue
    op, b, pages, window = key
    name = f"{op} {size(b)}" + (f" x{pages}" if pages else "") + f" w{window}"
    mo, mn = statistics.median(d["old"]), statistics.median(d["new"])
    ratio = mn / mo if mo else float("nan")
    so, sn = spread(d["old"]), spread(d["new"])
    noise = max(so, sn)
    verdict = "better" if ratio > 1 + noise else "WORSE" if ratio < 1 - noise else "within noise"
    worse += verdict == "WORSE"
    print(f"{name:<24} {d['unit']:<7} {mo:>9.4g} {mn:>9.4g} {ratio:>8.3f} {so:>10.1%} {sn:>10.1%}  {verdict}")
print(f"bench-ab: {worse} row(s) worse beyond the spread; load average {load} at the end")
EOF
