#!/bin/sh
# Inside the soft-RoCE VM (make bench-rdma starts it with --rxe 2): the raw
# ibverbs backend, verbs;ofi_rxm and perftest's ib_write_bw side by side,
# rxe0 -> rxe1 over the veth cable, for single writes of 64 KiB and 1 MiB
# and paged writes of 4 KiB pages (1000 per call; ib_write_bw: 4 KiB writes).
# Prints Gbit/s and each path's ratio to ib_write_bw measured in the same
# run. Soft-RoCE under emulation is not a performance model: the figures
# say which path costs more on this machine, nothing about a NIC.
#   scripts/bench-rdma.sh BUILD [SECONDS]
BUILD=${1:-build}
SECS=${2:-3}
BIN=$BUILD/bin
OUT=${BENCH_OUT:-/tmp/bench-rdma}
mkdir -p "$OUT"
PORT=7470

# Pinned neighbour entries, as in rdma-suite.sh.
ip neigh replace 198.18.0.2 lladdr "$(cat /sys/class/net/rxenet1/address)" dev rxenet0 nud permanent
ip neigh replace 198.18.0.1 lladdr "$(cat /sys/class/net/rxenet0/address)" dev rxenet1 nud permanent

xfer_run() { # provider baseline [name] -> JSON rows in $OUT/xfer-NAME.json (NAME default provider)
	PORT=$((PORT + 1))
	n=${3:-$1}
	"$BIN/xfer-bench" --listen "198.18.0.2:$PORT" --provider "$1" --nics rxe1 \
		>"$OUT/target-$n.log" 2>&1 &
	tpid=$!
	sleep 2
	timeout 600 "$BIN/xfer-bench" --connect "198.18.0.2:$PORT" --provider "$1" --nics rxe0 \
		--op single,paged --size 64K,1M --page-size 4K --pages 1000 --baseline "$2" \
		--seconds "$SECS" --rounds 3 --no-trace --json >"$OUT/xfer-$n.json" 2>"$OUT/xfer-$n.log"
	echo "xfer-bench $n: exit $?"
	wait $tpid 2>/dev/null
}

perftest_run() { # size -> Gbit/s
	ib_write_bw -d rxe1 -x 1 -s "$1" -D "$SECS" -F --report_gbits >"$OUT/ibw-server-$1.log" 2>&1 &
	spid=$!
	sleep 1
	timeout 120 ib_write_bw -d rxe0 -x 1 -s "$1" -D "$SECS" -F --report_gbits 198.18.0.2 \
		>"$OUT/ibw-$1.log" 2>&1
	wait $spid 2>/dev/null
	# The result row: bytes, iterations, peak, average, message rate.
	awk -v s="$1" '$1 == s && NF >= 4 { print $4 }' "$OUT/ibw-$1.log" | tail -1
}

# gbps of one xfer row: file, op, bytes (paged: bytes of one page).
row() {
	grep "\"op\":\"$2\"" "$1" | grep '"baseline":null' | grep "\"bytes\":$3," |
		sed 's/.*"gbps":\([0-9.e+-]*\).*/\1/' | head -1
}
raw_row() {
	grep "\"op\":\"$2\"" "$1" | grep '"baseline":"raw' | grep "\"bytes\":$3," |
		sed 's/.*"gbps":\([0-9.e+-]*\).*/\1/' | head -1
}

xfer_run ibverbs none
# verbs;ofi_rxm as xfer opens it by default: rxm's shared receive context on,
# immediates carried by a message after the write (design.md §16.4).
xfer_run verbs none
# The raw libfabric loop needs FI_REMOTE_CQ_DATA, which 1.17's rxm loses
# with the shared receive context on (§16.3): it runs with it off, beside
# xfer's write-with-immediate path on the same setting ("verbs, SRX off").
(export FI_OFI_RXM_USE_SRX=0; xfer_run verbs raw verbs-nosrx)
W64=$(perftest_run 65536)
W1M=$(perftest_run 1048576)
W4K=$(perftest_run 4096)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }
printf '\n%-22s %10s %10s %10s %12s %12s %10s %10s\n' "Gbit/s (rxe0->rxe1)" ib_write_bw ibverbs verbs "verbs nosrx" "verbs raw" "ibv/ibw" "verbs/ibw"
for spec in "single 65536 $W64" "single 1048576 $W1M" "paged 4096 $W4K"; do
	set -- $spec
	a=$(row "$OUT/xfer-ibverbs.json" "$1" "$2")
	b=$(row "$OUT/xfer-verbs.json" "$1" "$2")
	d=$(row "$OUT/xfer-verbs-nosrx.json" "$1" "$2")
	c=$(raw_row "$OUT/xfer-verbs-nosrx.json" "$1" "$2")
	printf '%-22s %10s %10s %10s %12s %12s %10s %10s\n' "$1 $2 B" "$3" "${a:--}" "${b:--}" "${d:--}" "${c:--}" \
		"$(ratio "$a" "$3")" "$(ratio "$b" "$3")"
done
echo "(paged: 1000 pages of 4096 B per call; ib_write_bw: 4096 B writes. verbs: xfer's default on"
echo " verbs;ofi_rxm (shared receive context, immediates by message); verbs nosrx: FI_OFI_RXM_USE_SRX=0"
echo " (write with immediate); verbs raw: xfer-bench's raw libfabric loop on verbs;ofi_rxm, SRX off."
echo " Soft-RoCE on an emulated CPU: not a performance model.)"
