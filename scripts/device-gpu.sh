#!/usr/bin/env bash
# GPU checks of issue 14 (the GPU data path): xfer-gpu-bench rows against a
# baseline measured in the same run, the A/B switches of the copy path in
# the same session, traced rows, then the C GPU tests. Builds nothing: run
# from the repository root with build/ carried over (made where nvcc exists,
# so libxfer embeds the kernels' fatbin).
#
#   scripts/device-gpu.sh OUT_DIR [PLAN ...]      (OUT_DIR default: $OUT)
#
# Plans run in the order given (default ORDER below: the rows that still miss
# their targets first); each step has its own timeout and log OUT_DIR/NAME.log,
# a line in OUT_DIR/steps.log, and all logs end up in OUT_DIR/gpu-logs.tgz.
# Step times on 1x H200 (runs of 2026-12-01): a full bench 2 s, one plan's
# bench rows 1-4 s each, a test 1-2 s. REPS (default 3) repeats bench rows:
# one run's ratio moves by up to ~0.2 between runs of one setting.
#   paged    XFER_BENCH_ONLY=paged, REPS times for each paged kernel
#            (XFER_GPU_PAGES=warp|tile|bulk; by default bulk for pages of 16 KiB
#            and more up to 64 MiB a launch, tile else: plan auto), plus each with
#            XFER_GPU_INDEX=device (page lists copied to the GPU first)  ~60 s
#   single   XFER_BENCH_ONLY=single REPS times (lone copies by the copy
#            engine), then XFER_GPU_LONE=kernel XFER_GPU_KERNEL_MAX=1G
#            (every single write by the kernel) twice, then XFER_SPIN_US=1000
#            (no worker or waiter sleeps during a long copy) REPS times     ~35 s
#   staged   XFER_BENCH_ONLY=staged on tcp and shm, STAGED_REPS (default 2)
#            times each of: defaults, XFER_GPU_STAGE=kernel (staging copies
#            batched into the kernel's launches), XFER_GPU_STAGE_AHEAD=1 (the
#            staging of queued ops starts while the FIFO head waits), both ~50 s
#   trace    one row alone with XFER_GPU_TRACE (stage summary in the log):
#            16384 x 4 KiB and x 16 KiB for each kernel, single 1 MiB and
#            256 MiB (and with XFER_SPIN_US=1000), staged single 64 KiB on
#            shm (default, both staging switches)                          ~25 s
#   tests    test_gpu ipc/staged/h2g/g2h/scatter-* on shm and tcp (native
#            modes skip: no FI_HMEM provider there), ipc/scatter-ipc/staged
#            with XFER_GPU_PAGES=warp and =bulk, staged modes with both
#            staging switches (bytes verified, odd page sizes included),
#            test_gpu_signal ipc and staged (and staged with both)       ~45 s
#   watcher  test_gpu watcher (CUDA Graph) and watcher-latency            ~15 s
#   lone     the single-write rows of issue 14's gpu6 task: REPS rounds of the
#            defaults, XFER_SPIN_US=1000 (the forced spin, for the ratio of the
#            default to it) and XFER_GPU_DONE=event (copies' ends by event
#            queries, not the word their stream writes), interleaved; one
#            run of each with XFER_BENCH_TRACE=1 (the engine's op trace at 1 in
#            flight), 64 KiB, 1 MiB and 256 MiB alone with XFER_GPU_TRACE too,
#            the paged rows twice (and once by events), then test_gpu
#            ipc/scatter-ipc/staged/h2g/g2h on shm and tcp (ipc, scatter-ipc,
#            staged also by events) and test_gpu_signal ipc and staged   ~100 s
#   auto     the default choice of paged kernel (bulk for aligned launches
#            of pages >= 16 KiB up to 64 MiB, tile for the rest: gpuk6) against each
#            forced: REPS rounds of XFER_BENCH_ONLY=paged with the default,
#            XFER_GPU_PAGES=tile and =bulk; the staged rows on tcp and shm,
#            default vs tile, STAGED_REPS times (their gathers and landings
#            are paged launches too); test_gpu ipc/scatter-ipc/staged/
#            scatter-staged with the default on shm and tcp            ~70 s
#   percall  issue 14's page7 task (the 16384 x 16 KiB row, 1024 x 4 KiB,
#            single 64 KiB at 1 in flight): REPS rounds, interleaved, of the
#            paged rows with the defaults, XFER_SPIN_US=1000 and
#            $PERCALL_AB (default: one notice per copy and the copy
#            ring's events made at each slot's first use, as before them,
#            XFER_NOTICE_MERGE=0 XFER_GPU_EVENTS=lazy; the first alone;
#            NAME:SETTINGS, the
#            settings ","-joined, " " between variants; other settings
#            measured in run page7-1: XFER_GPU_INDEX=device, XFER_GPU_BATCH=0,
#            the bench's pairs by page XFER_BENCH_ORDER=src|dst), and of the
#            single rows with
#            the defaults and XFER_SPIN_US=1000; then rows 3 (16384 x 16 KiB),
#            0 (1024 x 4 KiB) alone with XFER_BENCH_TRACE=1 and
#            XFER_GPU_TRACE (CSV) for every setting, 6 (single 64 KiB) by
#            default, spinning and as before, and row 9 (single 256 MiB)
#            by the tile kernel traced                                 ~90 s
#   stage7   the staged 64 KiB row of issue 14's stage7 task: XFER_BENCH_ONLY=
#            staged on shm and tcp, STAGED_REPS (default 3) rounds of each
#            variant of STAGE7_AB (NAME:VAR=v,VAR=v ...; default: default
#            (early staging for ops of at most 256 KiB), XFER_GPU_STAGE_AHEAD=0
#            (none, the old default), =1 (every op)), interleaved;
#            row 0 traced (XFER_GPU_TRACE) on shm for the variants of
#            STAGE7_TRACE; test_gpu staged/scatter-staged and
#            test_gpu_signal staged on shm and tcp; the IPC single and
#            paged rows once                                            ~75 s
#   ceil9    issue 14's ceiling of the staged rows on one GPU: CEIL_REPS
#            (default 3) rounds, interleaved, of XFER_BENCH_ONLY=ceiling (no
#            xfer: a staged write's two copies by plain CUDA calls, device->
#            pinned host in one process and pinned host->device in another,
#            at once and each alone, 16 in flight, and a pinned memcpy; 64 KiB,
#            1 MiB, 16 MiB singles, 1024 x 4 KiB as one copy and as 1024) and
#            XFER_BENCH_ONLY=staged XFER_BENCH_CEILING=1 on CEIL_PROVIDERS
#            (default shm; shm,tcp for both): the staged rows, then the ceiling rows in the same
#            two processes, each with pair / the staged row's host GB/s;
#            CEIL_TRACE=0,1: those staged rows alone, traced (XFER_GPU_TRACE)  ~25 s
#   stagedab the staged rows A/B: STAGED_REPS (default 3) rounds, interleaved,
#            on AB_PROVIDERS (default shm,tcp) of the variants AB_VARIANTS,
#            NAME:VAR=v,VAR=v joined by + (ENV_gpu splits on spaces), e.g.
#            default:+kdtoh:XFER_GPU_STAGE=kernel-dtoh; AB_TRACE=NAME,ROW[,PROV]
#            traces one row of one variant (on shm unless PROV; several:
#            NAME,ROW+NAME2,ROW2,tcp); AB_TESTS=NAME runs
#            test_gpu staged/scatter-staged and test_gpu_signal staged on
#            both providers with that variant's variables       ~4 s a step
#   full     the whole bench with defaults, then XFER_GPU_KERNEL=0 (copy
#            engine), XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0 (one launch per
#            call), XFER_GPU_SPREAD=1, XFER_GPU_INDEX=mapped              ~15 s
# (This folds in the former scripts/device-gpu3.sh: its list is
#  `full staged trace tests`.)
set -uo pipefail
out=${1:-${OUT:?usage: scripts/device-gpu.sh OUT_DIR [PLAN ...]}}
shift $(($# > 0 ? 1 : 0))
ORDER=${*:-paged single staged trace tests watcher}
REPS=${REPS:-3}
. "$(dirname "$0")/device-gpu-lib.sh"
{ cat .commit 2>/dev/null || git rev-parse HEAD; } >>"$out/env.log" 2>&1 # .commit: a packed tree (no .git of its own)
B=build/bin/xfer-gpu-bench
T=build/bin/test_gpu

# A paged kernel whose first bench step failed (or hung) is not run again:
# its other steps would only spend the window's time in timeouts.
KERNELS="warp tile bulk"
# The exit status of the latest step, from its line in steps.log (the step
# runner of device-gpu-lib.sh returns 0 so that a plan goes on).
last_rc() { tail -1 "$out/steps.log" | sed -n 's/.*: rc=\([0-9]*\) in .*/\1/p'; }
drop_kernel() { KERNELS=$(echo " $KERNELS " | sed "s/ $1 / /"); echo "dropping XFER_GPU_PAGES=$1 from later steps" | tee -a "$out/steps.log"; }

plan_paged() {
	local r k
	for r in $(seq "$REPS"); do
		for k in $KERNELS; do
			step paged-$k-r$r 10 env XFER_GPU_PAGES=$k XFER_BENCH_ONLY=paged $B
			local rc=$(last_rc)
			[ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$k" != tile ] && drop_kernel $k
		done
	done
	for k in $KERNELS; do
		step paged-$k-devidx 10 env XFER_GPU_PAGES=$k XFER_GPU_INDEX=device XFER_BENCH_ONLY=paged $B
	done
}

plan_single() {
	local r
	for r in $(seq "$REPS"); do step single-r$r 20 env XFER_BENCH_ONLY=single $B; done
	for r in 1 2; do
		step single-kernel-r$r 20 env XFER_GPU_LONE=kernel XFER_GPU_KERNEL_MAX=1G XFER_BENCH_ONLY=single $B
	done
	# Run gpu5-1: a 256 MiB copy took 133 us, the write ~174 us: the default
	# spin_us (50) lets the target's worker and the waiting application
	# sleep during a long copy; 1 ms of spinning says what the wake-ups cost.
	for r in $(seq "$REPS"); do step single-spin-r$r 20 env XFER_SPIN_US=1000 XFER_BENCH_ONLY=single $B; done
}

# Staging A/B: default (one copy-engine copy per op, each op's staging only
# once the op before it left the FIFO), kernel (XFER_GPU_STAGE=kernel),
# ahead (XFER_GPU_STAGE_AHEAD=1: staging of queued ops starts early), both.
STAGE_AB="default: kernel:XFER_GPU_STAGE=kernel ahead:XFER_GPU_STAGE_AHEAD=1 both:XFER_GPU_STAGE=kernel,XFER_GPU_STAGE_AHEAD=1"
plan_staged() {
	local r p v
	for r in $(seq "${STAGED_REPS:-2}"); do
		for p in tcp shm; do
			for v in $STAGE_AB; do
				local envs=${v#*:}
				step staged-$p-${v%%:*}-r$r 20 env ${envs//,/ } XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p $B
			done
		done
	done
}

plan_auto() {
	local r k p m
	for r in $(seq "$REPS"); do
		for k in auto tile bulk; do step auto-paged-$k-r$r 10 env XFER_GPU_PAGES=$k XFER_BENCH_ONLY=paged $B; done
	done
	for r in $(seq "${STAGED_REPS:-2}"); do
		for p in tcp shm; do
			for k in auto tile; do
				step auto-staged-$p-$k-r$r 20 env XFER_GPU_PAGES=$k XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p $B
			done
		done
	done
	for p in shm tcp; do
		for m in ipc scatter-ipc staged scatter-staged; do step auto-test-$m-$p 30 env XFER_TEST_PROVIDER=$p $T $m; done
	done
}

plan_trace() {
	local k
	for k in $KERNELS; do
		step trace-p16k4k-$k 10 env XFER_GPU_PAGES=$k XFER_BENCH_ROW=1 XFER_GPU_TRACE="$out/trace-p16k4k-$k.csv" $B
		step trace-p16k16k-$k 10 env XFER_GPU_PAGES=$k XFER_BENCH_ROW=3 XFER_GPU_TRACE="$out/trace-p16k16k-$k.csv" $B
	done
	step trace-s1m 10 env XFER_BENCH_ROW=7 XFER_GPU_TRACE="$out/trace-s1m.csv" $B
	step trace-s256m 10 env XFER_BENCH_ROW=9 XFER_GPU_TRACE="$out/trace-s256m.csv" $B
	step trace-s256m-spin 10 env XFER_SPIN_US=1000 XFER_BENCH_ROW=9 XFER_GPU_TRACE="$out/trace-s256m-spin.csv" $B
	step trace-staged64k-shm 10 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=shm XFER_BENCH_ROW=0 \
		XFER_GPU_TRACE="$out/trace-staged64k.csv" $B
	step trace-staged64k-shm-both 10 env XFER_GPU_STAGE=kernel XFER_GPU_STAGE_AHEAD=1 XFER_BENCH_ONLY=staged \
		XFER_TEST_PROVIDER=shm XFER_BENCH_ROW=0 XFER_GPU_TRACE="$out/trace-staged64k-both.csv" $B
}

plan_tests() {
	local p m k
	for p in shm tcp; do
		for m in ipc staged h2g g2h native scatter-ipc scatter-staged scatter-native; do
			step test-$m-$p 30 env XFER_TEST_PROVIDER=$p $T $m
		done
	done
	for k in $KERNELS; do
		[ $k = tile ] && continue # the default: the steps above
		for m in ipc scatter-ipc staged; do
			step test-$m-shm-$k 15 env XFER_GPU_PAGES=$k XFER_TEST_PROVIDER=shm $T $m
		done
	done
	local both="XFER_GPU_STAGE=kernel XFER_GPU_STAGE_AHEAD=1"
	for p in tcp shm; do
		for m in staged scatter-staged; do
			step test-$m-$p-stageboth 30 env $both XFER_TEST_PROVIDER=$p $T $m
		done
	done
	step test-signal-ipc-shm 20 env XFER_TEST_PROVIDER=shm build/bin/test_gpu_signal ipc
	step test-signal-staged-tcp 20 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu_signal staged
	step test-signal-staged-tcp-stageboth 20 env $both XFER_TEST_PROVIDER=tcp build/bin/test_gpu_signal staged
}

plan_watcher() {
	step watcher 30 $T watcher
	step watcher-latency 30 $T watcher-latency
}

plan_lone() {
	local r p m
	for r in $(seq "$REPS"); do
		step single-r$r 20 env XFER_BENCH_ONLY=single $B
		step single-spin-r$r 20 env XFER_SPIN_US=1000 XFER_BENCH_ONLY=single $B
		step single-event-r$r 20 env XFER_GPU_DONE=event XFER_BENCH_ONLY=single $B
	done
	step single-trace 20 env XFER_BENCH_TRACE=1 XFER_BENCH_ONLY=single $B
	step single-trace-spin 20 env XFER_BENCH_TRACE=1 XFER_SPIN_US=1000 XFER_BENCH_ONLY=single $B
	step single-trace-event 20 env XFER_BENCH_TRACE=1 XFER_GPU_DONE=event XFER_BENCH_ONLY=single $B
	for r in 6:s64k 7:s1m 9:s256m; do
		step trace-${r#*:} 10 env XFER_BENCH_TRACE=1 XFER_GPU_TRACE=1 XFER_BENCH_ROW=${r%%:*} $B
	done
	for r in 1 2; do step paged-r$r 15 env XFER_BENCH_ONLY=paged $B; done
	step paged-event 15 env XFER_GPU_DONE=event XFER_BENCH_ONLY=paged $B
	for p in shm tcp; do
		for m in ipc scatter-ipc staged h2g g2h; do
			step test-$m-$p 30 env XFER_TEST_PROVIDER=$p $T $m
		done
	done
	for m in ipc scatter-ipc staged; do
		step test-$m-shm-event 30 env XFER_GPU_DONE=event XFER_TEST_PROVIDER=shm $T $m
	done
	step test-signal-ipc-shm 20 env XFER_TEST_PROVIDER=shm build/bin/test_gpu_signal ipc
	step test-signal-staged-tcp 20 env XFER_TEST_PROVIDER=tcp build/bin/test_gpu_signal staged
}

# Run page7-1 (b9a20a7) measured idx, batch0, bysrc and bydst: none beyond
# the spread on 16384 x 16 KiB (PERCALL_AB="idx:XFER_GPU_INDEX=device
# batch0:XFER_GPU_BATCH=0 bysrc:XFER_BENCH_ORDER=src bydst:XFER_BENCH_ORDER=dst"
# runs them again); run page7-3 (d54c7b7) a large call split in two
# launches and the tile kernel oversubscribed in runs of 16-64 items (both
# removed: within the spread). Now the merged notices and the events made
# at registration against merging alone off and both off (as before them).
PERCALL_AB=${PERCALL_AB:-old:XFER_NOTICE_MERGE=0,XFER_GPU_EVENTS=lazy nomerge:XFER_NOTICE_MERGE=0}
plan_percall() {
	local r v rw
	local vars="spin:XFER_SPIN_US=1000 $PERCALL_AB"
	for r in $(seq "$REPS"); do
		step pc-paged-default-r$r 15 env XFER_BENCH_ONLY=paged $B
		for v in $vars; do
			local envs=${v#*:}
			step pc-paged-${v%%:*}-r$r 15 env ${envs//,/ } XFER_BENCH_ONLY=paged $B
		done
		step pc-single-default-r$r 20 env XFER_BENCH_ONLY=single $B
		step pc-single-spin-r$r 20 env XFER_SPIN_US=1000 XFER_BENCH_ONLY=single $B
		step pc-single-old-r$r 20 env XFER_NOTICE_MERGE=0 XFER_GPU_EVENTS=lazy XFER_BENCH_ONLY=single $B
	done
	for rw in 3:p16k16k 0:p1k4k 6:s64k; do
		step pc-trace-${rw#*:}-default 15 env XFER_BENCH_TRACE=1 XFER_BENCH_ROW=${rw%%:*} \
			XFER_GPU_TRACE="$out/pc-trace-${rw#*:}-default.csv" $B
		# The single row: by default and spinning only (the others are
		# paged settings).
		[ "${rw#*:}" = s64k ] && vars="spin:XFER_SPIN_US=1000 old:XFER_NOTICE_MERGE=0,XFER_GPU_EVENTS=lazy"
		for v in $vars; do
			local envs=${v#*:}
			step pc-trace-${rw#*:}-${v%%:*} 15 env ${envs//,/ } XFER_BENCH_TRACE=1 XFER_BENCH_ROW=${rw%%:*} \
				XFER_GPU_TRACE="$out/pc-trace-${rw#*:}-${v%%:*}.csv" $B
		done
	done
	# The tile kernel on one contiguous 256 MiB copy (row 9 by kernel): its
	# GPU time beside a call of 16,384 random 16 KiB pages (~143 us in run
	# page7-1) and the copy engine's (~131 us): random pages' cost, or the
	# kernel's own.
	step pc-trace-s256m-kernel 15 env XFER_GPU_LONE=kernel XFER_GPU_KERNEL_MAX=1G XFER_BENCH_ROW=9 \
		XFER_GPU_TRACE="$out/pc-trace-s256m-kernel.csv" $B
}

STAGE7_AB=${STAGE7_AB:-"default: none:XFER_GPU_STAGE_AHEAD=0 all:XFER_GPU_STAGE_AHEAD=1"}
STAGE7_TRACE=${STAGE7_TRACE:-"default none"}
plan_stage7() {
	local r p v m t envs
	for r in $(seq "${STAGED_REPS:-3}"); do
		for p in shm tcp; do
			for v in $STAGE7_AB; do
				envs=${v#*:}
				step s7-staged-$p-${v%%:*}-r$r 10 env ${envs//,/ } XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p $B
			done
		done
	done
	for t in $STAGE7_TRACE; do
		for v in $STAGE7_AB; do
			[ "${v%%:*}" = "$t" ] || continue
			envs=${v#*:}
			step s7-trace64k-shm-$t 10 env ${envs//,/ } XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=shm XFER_BENCH_ROW=0 \
				XFER_GPU_TRACE="$out/s7-trace64k-shm-$t.csv" $B
		done
	done
	for p in shm tcp; do
		for m in staged scatter-staged; do step s7-test-$m-$p 30 env XFER_TEST_PROVIDER=$p $T $m; done
		step s7-test-signal-staged-$p 20 env XFER_TEST_PROVIDER=$p build/bin/test_gpu_signal staged
	done
	# This tree's defaults on the rows that do not stage (IPC), once each.
	step s7-single 20 env XFER_BENCH_ONLY=single $B
	step s7-paged 15 env XFER_BENCH_ONLY=paged $B
}

# The ceiling rows alone (no engine was ever made in those processes), then
# after the staged rows of the same run, whose host GB/s they are read against.
plan_ceil9() {
	local r p
	: "${CEIL_PROVIDERS:=shm}"
	for r in $(seq "${CEIL_REPS:-3}"); do
		step ceil9-ceiling-r$r 15 env XFER_BENCH_ONLY=ceiling $B
		for p in ${CEIL_PROVIDERS//,/ }; do # a list: "shm tcp" or shm,tcp (ENV_gpu splits on spaces)
			step ceil9-staged-$p-r$r 20 env XFER_BENCH_CEILING=1 XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p $B
		done
	done
	# CEIL_TRACE=0,1 (staged row numbers): each row alone, traced, per provider.
	for p in ${CEIL_PROVIDERS//,/ }; do
		for r in ${CEIL_TRACE//,/ }; do
			step ceil9-trace-$p-row$r 10 env XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p XFER_BENCH_ROW=$r \
				XFER_GPU_TRACE="$out/ceil9-trace-$p-row$r.csv" $B
		done
	done
}

ab_envs() { # the variables of variant $1 of AB_VARIANTS, space-separated
	local v
	for v in ${AB_VARIANTS//+/ }; do
		[ "${v%%:*}" = "$1" ] && { v=${v#*:}; echo "${v//,/ }"; return; }
	done
}
plan_stagedab() {
	local r p v n
	: "${AB_VARIANTS:=default:}" "${AB_PROVIDERS:=shm,tcp}"
	for r in $(seq "${STAGED_REPS:-3}"); do
		for p in ${AB_PROVIDERS//,/ }; do
			for v in ${AB_VARIANTS//+/ }; do
				n=${v%%:*}
				# shellcheck disable=SC2046 # a word list by design
				step ab-staged-$p-$n-r$r 15 env $(ab_envs "$n") XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$p $B
			done
		done
	done
	local t tp
	local traces=${AB_TRACE:-}
	for t in ${traces//+/ }; do
		IFS=, read -r n r tp <<<"$t"
		tp=${tp:-shm}
		# shellcheck disable=SC2046
		step ab-trace-$n-row$r-$tp 10 env $(ab_envs "$n") XFER_BENCH_ONLY=staged XFER_TEST_PROVIDER=$tp XFER_BENCH_ROW=$r \
			XFER_GPU_TRACE="$out/ab-trace-$n-row$r-$tp.csv" $B
	done
	if [ -n "${AB_TESTS:-}" ]; then
		for p in shm tcp; do
			for v in staged scatter-staged; do
				# shellcheck disable=SC2046
				step ab-test-$AB_TESTS-$v-$p 30 env $(ab_envs "$AB_TESTS") XFER_TEST_PROVIDER=$p $T $v
			done
			# shellcheck disable=SC2046
			step ab-test-$AB_TESTS-signal-$p 20 env $(ab_envs "$AB_TESTS") XFER_TEST_PROVIDER=$p build/bin/test_gpu_signal staged
		done
	fi
}

plan_full() {
	step bench 20 $B
	step bench-engine 30 env XFER_GPU_KERNEL=0 XFER_BENCH_ONLY=paged $B
	step bench-old 20 env XFER_GPU_BATCH=0 XFER_GPU_KERNEL_MAX=0 $B
	step bench-spread 15 env XFER_GPU_SPREAD=1 XFER_BENCH_ONLY=paged $B
	step bench-mapped 15 env XFER_GPU_INDEX=mapped XFER_BENCH_ONLY=paged $B
}

for plan in $ORDER; do
	if declare -F "plan_$plan" >/dev/null; then
		echo "== plan $plan" >>"$out/steps.log"
		"plan_$plan"
	else
		echo "unknown plan $plan (known: paged single staged trace tests watcher lone auto percall stage7 ceil9 full)" | tee -a "$out/steps.log"
		fails=$((fails + 1))
	fi
done
echo "device-gpu: $fails step(s) failed" | tee -a "$out/steps.log"
tar -czf "$out/gpu-logs.tgz" -C "$out" $(cd "$out" && ls *.log *.csv.* 2>/dev/null) 2>/dev/null
exit $((fails > 0))
