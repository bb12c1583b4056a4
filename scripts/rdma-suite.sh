#!/bin/sh
# Runs the C suite's RDMA subset inside the soft-RoCE VM (make test-rdma
# starts the VM with four devices: rxe0-rxe1 and rxe2-rxe3 on two veth
# cables). Every test runs on both RDMA paths (libfabric's verbs;ofi_rxm
# and the raw ibverbs backend) in two layouts: one NIC per engine (the
# parent process on rxe0, forked peers on rxe1, so packets cross a cable)
# and two NICs per engine (rxe0,rxe2 against rxe1,rxe3).
#
#   scripts/rdma-suite.sh BUILD [PROVIDERS] [LAYOUTS]
#   PROVIDERS: "verbs ibverbs" (default); LAYOUTS: "one two" (default)
#   RDMA_TESTS="test_write faults:forged_key ..." runs only those (both layouts);
#   RDMA_FULL=1 runs the whole subset on two NICs too (by default a shorter list).
# Prints one line per test and a summary; exits 1 if any test failed.
# POSIX sh: the guest runs the host's userland, but keep it plain.
BUILD=${1:-build}
PROVIDERS=${2:-verbs ibverbs}
LAYOUTS=${3:-one two}
BIN=$BUILD/bin
T=${RDMA_TIMEOUT:-300}
# Waits, heartbeat allowances and default deadlines of the tests, times this
# (tests/helpers.h): software RDMA on an emulated CPU runs far slower than
# a host, and the fault cases assert 0.5 s heartbeat allowances.
export XFER_TEST_TIME_SCALE=${XFER_TEST_TIME_SCALE:-4}

# The subset: the whole provider-parametrized C suite, scatter to 4 peers,
# the fake-GPU staged paths, and the fault cases that apply to RDMA. Left
# out: network_partition (needs netns around rxe) and the tcp-only multinic
# namespaces; too_many_regions and send_too_large test the core alone (they
# run on tcp and shm in make test).
DEFAULT_TESTS="test_write test_chunks test_send test_paged test_imm test_bad_input test_backpressure
test_scatter:4 test_gpu_fake:write-staged test_gpu_fake:scatter-staged
faults:forged_key faults:stale_descriptor faults:revoke_late_writes faults:dereg_in_flight
faults:cancel_mid_paged faults:stop_in_flight faults:kill_target_mid_paged
faults:submit_to_dead_peer faults:peer_restart faults:scatter_dead_member
faults:concurrent_submit_and_peers test_overflow faults:forged_bounce_key faults:made_up_key
faults:revoked_plain_writes faults:kill_target_mid_scatter faults:dead_peer_holds_credits
faults:forged_sender_id"
TESTS=${RDMA_TESTS:-$DEFAULT_TESTS}
# Two NICs per engine add sharding, chunking across NICs, paged spreading and
# per-NIC connections; the rest of the suite says nothing new there. To keep
# make test-rdma within ~20 minutes on a 2-vCPU CI machine (TCG emulation),
# the two-NIC layout runs this subset; RDMA_FULL=1 (or RDMA_TESTS) runs
# everything in both layouts.
# The fault cases the issue names for both paths (peer SIGKILL mid paged
# write, revoke then late write, forged key, dead member in scatter) and the
# sender check run there too: each NIC has its own connections to reset and
# its own sender tokens.
TWO_NIC_TESTS="test_write test_chunks test_paged test_imm test_scatter:4 faults:kill_target_mid_paged
faults:scatter_dead_member faults:revoke_late_writes faults:forged_key faults:forged_sender_id"
if [ -n "$RDMA_TESTS" ] || [ "${RDMA_FULL:-0}" = 1 ]; then TWO_NIC_TESTS=$TESTS; fi

# Known failures of a provider, not of xfer (docs/design.md §16.1): they
# still run, and report XFAIL (or XPASS) instead of failing the suite. None
# now: verbs;ofi_rxm's stale_descriptor and revoke_late_writes pass since the
# ofi backend resets a connection whose queue pair a rejected write failed
# (src/backend/ofi/ofi_conn.c), and test_bad_input since its local checks
# run in a child (a forked peer must not inherit an opened device).
XFAIL=${RDMA_XFAIL:-}
# Without rxm's shared receive context (FI_OFI_RXM_USE_SRX=0; xfer turns it
# on where an RDMA device is present), ofi_rxm 1.17 over verbs also crashes
# now and then (SIGSEGV inside
# libfabric.so, +0xb7882 in rxm_post_recv): when rxm closes a connection (the
# peer disconnected, or our fi_close) while a message of that peer is unread,
# it frees the verbs endpoint, then reads the CQ and reposts that message's
# buffer into the freed endpoint. rxm handles disconnects while completions
# are queued, and the message may be its own credit grant, so no order of
# xfer's calls avoids it (docs/design.md §16.4; scripts/rdma-loop.sh counts
# it: 1 to 13 of 80 runs of the four tests that hit it most; 0 of 80 with SRX).
# "auto" takes the raw ibverbs backend, which does not crash. A verbs test that dies that way is
# reported PCRASH and counted apart; the checks it had not reached yet did
# not run.

# Pin each cable's neighbour entries (why: rdma-neigh.sh).
sh "$(dirname "$0")/rdma-neigh.sh"

pass=0 fail=0 skip=0 xfail=0 pcrash=0 failed=""
for prov in $PROVIDERS; do
	for layout in $LAYOUTS; do
		case $layout in
		one) nics=rxe0 child=rxe1 list=$TESTS ;;
		two) nics=rxe0,rxe2 child=rxe1,rxe3 list=$TWO_NIC_TESTS ;;
		*) echo "unknown layout $layout"; exit 2 ;;
		esac
		for t in $list; do
			bin=${t%%:*}
			arg=
			[ "$bin" != "$t" ] && arg=${t#*:}
			start=$(date +%s)
			out=$(XFER_TEST_PROVIDER=$prov XFER_NICS=$nics XFER_NICS_CHILD=$child \
				timeout -k 5 "$T" "$BIN/$bin" $arg 2>&1)
			rc=$?
			secs=$(($(date +%s) - start))
			name="$t [$prov, $layout]"
			known=0
			case " $XFAIL " in *" $prov:$t "*) known=1 ;; esac
			if [ $known = 1 ] && [ $rc != 77 ]; then
				xfail=$((xfail + 1))
				if [ $rc = 0 ]; then echo "XPASS $name ${secs}s (a known failure passed)"
				else echo "XFAIL $name rc=$rc ${secs}s: $(echo "$out" | grep -m1 -i 'check failed\|want\|succeeded')"; fi
				continue
			fi
			if [ "$prov" = verbs ] && [ $rc != 0 ] && [ $rc != 77 ] &&
				echo "$out" | grep -q "terminated with signal 11" &&
				echo "$out" | grep -A1 "Backtrace:" | grep -q "libfabric.so"; then
				pcrash=$((pcrash + 1))
				echo "PCRASH $name ${secs}s: SIGSEGV in libfabric ($(echo "$out" | grep -m1 -o 'build/bin/[a-z_]*(+0x[0-9a-f]*)'))"
				continue
			fi
			case $rc in
			0) pass=$((pass + 1)); echo "PASS $name ${secs}s" ;;
			77) skip=$((skip + 1)); echo "SKIP $name: $(echo "$out" | grep -m1 SKIP)" ;;
			*) fail=$((fail + 1)); failed="$failed
  $name (rc $rc)"
			   echo "FAIL $name rc=$rc ${secs}s"
			   echo "$out" | tail -25 | sed 's/^/    | /' ;;
			esac
		done
	done
done
echo "rdma-suite: $pass passed, $fail failed, $skip skipped, $xfail known provider failures, $pcrash provider crashes$failed"
[ "$fail" -eq 0 ]
