#!/bin/sh
# Repeats the verbs;ofi_rxm tests that crashed inside libfabric at teardown
# (docs/design.md §16.2), to count crashes before and after a change:
#   scripts/rdma-loop.sh BUILD N   (inside the rxe VM, --rxe 4)
# LOOP_PROVIDER=ibverbs runs the same rounds on the raw backend, for the
# comparison. Prints rdma-suite's lines and one tally per test at the end.
BUILD=${1:-build}
N=${2:-20}
ONE=${LOOP_ONE:-faults:stop_in_flight faults:forged_bounce_key faults:dead_peer_holds_credits}
TWO=${LOOP_TWO:-faults:forged_key}
PROV=${LOOP_PROVIDER:-verbs}
dir=$(dirname "$0")
log=$(mktemp)
i=0
while [ $i -lt "$N" ]; do
	i=$((i + 1))
	RDMA_TESTS="$ONE" sh "$dir/rdma-suite.sh" "$BUILD" "$PROV" one | grep -v '^rdma-suite' | sed "s/\[$PROV, one\]/[one]/" | tee -a "$log"
	[ -n "$TWO" ] && RDMA_TESTS="$TWO" sh "$dir/rdma-suite.sh" "$BUILD" "$PROV" two | grep -v '^rdma-suite' | sed "s/\[$PROV, two\]/[two]/" | tee -a "$log"
done
echo "rdma-loop: $N rounds on $PROV"
for t in $ONE; do
	for r in PASS FAIL PCRASH; do printf '%s %s [one]: %s\n' "$r" "$t" "$(grep -c "^$r $t \[one\]" "$log")"; done
done
for t in $TWO; do
	for r in PASS FAIL PCRASH; do printf '%s %s [two]: %s\n' "$r" "$t" "$(grep -c "^$r $t \[two\]" "$log")"; done
done
rm -f "$log"
